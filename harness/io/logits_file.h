// Reading a logits row from a text file: one row of numbers separated by whitespace and/or commas, on one
// line or one number per line. -inf is allowed (a token already removed); NaN, +inf, an empty item and a
// table (several lines of several numbers) are errors naming the file.
#pragma once

#include <string>
#include <vector>

namespace specula {

std::vector<float> read_logits_file(const std::string& path);
std::vector<float> parse_logits_text(const std::string& text, const std::string& source);

}  // namespace specula
