// The one exception type Specula throws for bad input: the message names the parameter (or file, line and
// key) and the offending value, so the user can fix it without reading code.
#pragma once

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace specula {

// One part of an error message. Numbers in floating point are written as the shortest text that reads back as
// the same value (std::to_chars), so a value the user typed ("--top-p 0.95") is quoted as typed, not rounded to
// six digits or widened to 0.949999988.
template <typename Part>
void append_message_part(std::ostringstream& os, const Part& part) {
  if constexpr (std::is_floating_point_v<Part>) {
    char text[64];
    const std::to_chars_result r = std::to_chars(text, text + sizeof text, part);
    os.write(text, r.ptr - text);
  } else {
    os << part;
  }
}

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds a message from any streamable parts: fail("top_p must be in (0, 1], got ", p).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (append_message_part(os, parts), ...);
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
  (append_message_part(os, parts), ...);
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
