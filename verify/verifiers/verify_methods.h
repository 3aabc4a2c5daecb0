// The verification methods' table (verify_methods.cpp): their names, for messages that list them.
#pragma once

#include <string>

namespace specula {

// "greedy, chain, tree, block, typical": every method parse_verify_method knows, in table order.
std::string verify_method_names();

}  // namespace specula
