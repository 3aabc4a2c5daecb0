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

// An Error about one named parameter ("num_draft_tokens", "beam_width"), raised by a layer that checks a value
// it did not read. The layer that read the value names its source: the command line turns the parameter into its
// flag (--num-draft-tokens), an experiment into file:line: key. The detail starts with its own separator
// (" must be >= 1, got 0", ": unknown model 'x'"); what() alone reads parameter + detail.
class ParameterError : public Error {
 public:
  ParameterError(const std::string& parameter, const std::string& detail)
      : Error(parameter + detail), parameter_(parameter), detail_(detail) {}
  const std::string& parameter() const { return parameter_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string parameter_;
  std::string detail_;
};

// fail_parameter("num_draft_tokens", " must be >= 1, got ", k).
template <typename... Parts>
[[noreturn]] void fail_parameter(const std::string& parameter, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw ParameterError(parameter, os.str());
}

// Runs f() and returns its result; an Error it throws is thrown again with `source` in front, so that lower
// layers name the parameter and the layer that read the value names where it came from (a flag, or
// file:line: key): with_source("--method", [&] { return parse_decoding_method(text); }).
template <typename F>
auto with_source(const std::string& source, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

}  // namespace specula
