// Reading an input file whole, with an error that names it and what it was read for.
#pragma once

#include <string>

namespace specula {

// The contents of `path`; an Error "WHAT: cannot open 'PATH'" when it cannot be read.
std::string read_input_file(const std::string& path, const std::string& what);

}  // namespace specula
