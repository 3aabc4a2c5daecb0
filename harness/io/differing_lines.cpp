#include "harness/io/differing_lines.h"

#include <sstream>

namespace specula {

std::optional<std::pair<std::string, std::string>> first_differing_lines(const std::string& a, const std::string& b) {
  std::istringstream ia(a), ib(b);
  std::string la, lb;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(ia, la)), more_b = static_cast<bool>(std::getline(ib, lb));
    if (!more_a && !more_b) return std::nullopt;
    if (!more_a || !more_b || la != lb)
      return std::make_pair(more_a ? la : std::string("(end)"), more_b ? lb : std::string("(end)"));
  }
}

}  // namespace specula
