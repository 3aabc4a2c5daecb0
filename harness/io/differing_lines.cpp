#include "harness/io/differing_lines.h"

#include <cstdio>
#include <sstream>

namespace specula {

namespace {

// A line as a message quotes it: a control byte (a CRLF file's \r) written as an escape, not sent to the terminal.
std::string shown(const std::string& line) {
  std::string out;
  for (const char c : line) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7f) {
      out += c;
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

}  // namespace

std::optional<std::pair<std::string, std::string>> first_differing_lines(const std::string& a, const std::string& b) {
  std::istringstream ia(a), ib(b);
  std::string la, lb;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(ia, la)), more_b = static_cast<bool>(std::getline(ib, lb));
    if (!more_a && !more_b) return std::nullopt;
    if (!more_a || !more_b || la != lb)
      return std::make_pair(more_a ? shown(la) : std::string("(end)"), more_b ? shown(lb) : std::string("(end)"));
  }
}

}  // namespace specula
