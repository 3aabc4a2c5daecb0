#include "draft/drafter_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "kernels/shared/error.h"

namespace specula {

std::map<std::string, std::string> parse_drafter_options(const std::string& text, const std::string& spec,
                                                         const std::set<std::string>& known) {
  std::map<std::string, std::string> out;
  if (text.empty()) return out;
  std::string known_list;
  for (const std::string& k : known) known_list += (known_list.empty() ? "" : ", ") + k;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      fail_parameter("draft", " ", spec, ": '", item, "' is not key=value (known keys: ", known_list, ")");
    const std::string key = item.substr(0, eq);
    if (!known.count(key)) fail_parameter("draft", " ", spec, ": unknown option '", key, "' (known: ", known_list, ")");
    if (!out.emplace(key, item.substr(eq + 1)).second)
      fail_parameter("draft", " ", spec, ": option '", key, "' given twice");
  }
  if (!text.empty() && text.back() == ',') fail_parameter("draft", " ", spec, ": trailing ','");
  return out;
}

long drafter_option_int(const std::string& value, const std::string& key, const std::string& spec) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    fail_parameter("draft", " ", spec, ": ", key, " must be an integer, got '", value, "'");
  return v;
}

double drafter_option_real(const std::string& value, const std::string& key, const std::string& spec) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !std::isfinite(v))
    fail_parameter("draft", " ", spec, ": ", key, " must be a finite number, got '", value, "'");
  return v;
}

}  // namespace specula
