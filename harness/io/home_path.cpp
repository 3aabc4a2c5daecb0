#include "harness/io/home_path.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "kernels/shared/error.h"

namespace specula {

std::string expand_home(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') fail("'", path, "': HOME is not set, so '~' names no folder");
  return std::string(home) + path.substr(1);
}

std::string expand_home_in_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return spec;
  // After "kind:", comma-separated items, each a path or key=value (medusa:~/heads,tree=~/tree.txt,target=~/model).
  std::string out = spec.substr(0, colon + 1);
  const std::string rest = spec.substr(colon + 1);
  for (size_t from = 0; from <= rest.size();) {
    const size_t comma = std::min(rest.find(',', from), rest.size());
    const std::string item = rest.substr(from, comma - from);
    // KEY=VALUE only where KEY is a name (tree, target, max_n): a path may hold '=' too (runs/lr=3e-4/ckpt).
    const size_t eq = item.find('=');
    const bool keyed = eq != std::string::npos && eq > 0 &&
                       std::all_of(item.begin(), item.begin() + static_cast<std::ptrdiff_t>(eq),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
    out += keyed ? item.substr(0, eq + 1) + expand_home(item.substr(eq + 1)) : expand_home(item);
    if (comma < rest.size()) out += ',';
    from = comma + 1;
  }
  return out;
}

}  // namespace specula
