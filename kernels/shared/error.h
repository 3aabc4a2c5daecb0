// The one exception type Specula throws for bad input: the message names the parameter (or file, line and
// key) and the offending value, so the user can fix it without reading code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace specula {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds a message from any streamable parts: fail("top_p must be in (0, 1], got ", p).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

}  // namespace specula
