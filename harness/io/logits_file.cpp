#include "harness/io/logits_file.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "verify/error.h"

namespace specula {

std::vector<float> parse_logits_text(const std::string& text, const std::string& source) {
  std::vector<float> logits;
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
    logits.push_back(static_cast<float>(v));
  }
  if (logits.empty()) fail(source, ": no logits found");
  return logits;
}

std::vector<float> read_logits_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, ": cannot open logits file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_logits_text(buffer.str(), path);
}

}  // namespace specula
