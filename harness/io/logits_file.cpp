#include "harness/io/logits_file.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {

std::vector<float> parse_logits_text(const std::string& text, const std::string& source) {
  std::vector<float> logits;
  // One row, on one line or one number per line: a second line of several numbers makes a table (rows
  // would be read as one), and an empty item ("1,,3", a leading or trailing comma) is a missing number.
  int lines_with_numbers = 0;
  bool several_on_a_line = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++lines_with_numbers;
    bool item_since_comma = false, in_item = false;
    int items = 0;
    for (char c : line) {
      const bool separator = c == ',' || c == ' ' || c == '\t' || c == '\r';
      if (!separator && !in_item) ++items;
      in_item = !separator;
      if (c == ',') {
        if (!item_since_comma) fail(source, ": empty item (two commas, or a comma at an end of the row)");
        item_since_comma = false;
      } else if (!separator) {
        item_since_comma = true;
      }
    }
    if (!item_since_comma) fail(source, ": empty item (two commas, or a comma at an end of the row)");
    several_on_a_line = several_on_a_line || items > 1;
    if (lines_with_numbers > 1 && several_on_a_line)
      fail(source,
           ": holds several lines with several numbers: a logits file is one row (on one line, or one "
           "number per line)");
  }
  std::string normalized = text;
  for (char& c : normalized)
    if (c == ',') c = ' ';
  std::istringstream in(normalized);
  std::string item;
  while (in >> item) {
    const size_t index = logits.size();
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (*end != '\0') fail(source, ": entry ", index, " ('", item, "') is not a number");
    if (std::isnan(v)) fail(source, ": entry ", index, " is NaN");
    if (v == INFINITY) fail(source, ": entry ", index, " is +inf");
    // Beyond float32 a logit would become +inf (or, below, -inf: a masked token, as written).
    if (v > std::numeric_limits<float>::max())
      fail(source, ": entry ", index, " ('", item, "') is beyond float32's range");
    logits.push_back(static_cast<float>(v));
  }
  if (logits.empty()) fail(source, ": no logits found");
  return logits;
}

std::vector<float> read_logits_file(const std::string& path) {
  return parse_logits_text(read_text_file(path, "logits file"), path);
}

}  // namespace specula
