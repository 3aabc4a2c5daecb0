#include "harness/io/home_path.h"

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
  return spec.substr(0, colon + 1) + expand_home(spec.substr(colon + 1));
}

}  // namespace specula
