// The verification methods' table (verify_methods.cpp): their names, for messages that list them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "verify/verifiers/verification.h"

namespace specula {

// "greedy, chain, tree, block, typical": every method parse_verify_method knows, in table order.
std::string verify_method_names();

// Every method of the table, in table order.
std::vector<VerifyMethod> verify_methods();

// The method named `text`, or nullopt (parse_verify_method throws instead).
std::optional<VerifyMethod> find_verify_method(const std::string& text);

}  // namespace specula
