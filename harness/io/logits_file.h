// Reading a logits row from a text file: numbers separated by whitespace and/or commas. -inf is allowed
// (a token already removed); NaN and +inf are errors naming the file and the entry.
#pragma once

#include <string>
#include <vector>

namespace specula {

std::vector<float> read_logits_file(const std::string& path);
std::vector<float> parse_logits_text(const std::string& text, const std::string& source);

}  // namespace specula
