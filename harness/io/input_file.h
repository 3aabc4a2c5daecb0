// Opening an input file, with an error that names it and what it was read for. Every reader of a user-named file
// opens it here, so a folder given where a file is read is named as one (on Linux a folder opens as a stream that
// reads nothing, which a reader would otherwise report as an empty or malformed file).
#pragma once

#include <fstream>
#include <string>

namespace specula {

// `path` opened for reading in binary mode; an Error "WHAT: 'PATH' is a folder, not a file" or "WHAT: cannot
// open 'PATH'" when it cannot be.
std::ifstream open_input_file(const std::string& path, const std::string& what);

// The contents of `path`, opened as open_input_file does; an Error "WHAT: cannot read 'PATH'" when a read fails.
std::string read_input_file(const std::string& path, const std::string& what);

// As read_input_file, for a text format read by lines and numbers: an Error "WHAT: 'PATH' line L holds a NUL byte"
// where one is, since a number or key read up to it (strtod, a C string) would silently drop the rest of its line.
std::string read_text_file(const std::string& path, const std::string& what);

// Whether `path` is there as a folder (`folder`) or a file, checked without reading it: "" when it is, else what is
// wrong, to follow the quoted path in a message: ": no such folder" (or file), " is not a folder", " is a folder, not a
// file".
std::string path_kind_problem(const std::string& path, bool folder);

// As read_input_file, but the Error is a ParameterError for `parameter` ("corpus"), so the layer that read the path
// names its source: the command line's --corpus, an experiment's file:line: key.
std::string read_parameter_file(const std::string& path, const std::string& parameter);

}  // namespace specula
