// The first line at which two texts differ, for messages that say what changed in a file ("'temperature = 0.8'
// where the other has 'temperature = 0.5'") rather than only that it changed.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace specula {

// The first line of `a` and of `b` that differ, "(end)" standing for the line of a text that ran out first, control
// bytes written as escapes ("[experiment]\\r" for a line of a CRLF file); none when the texts hold the same lines.
std::optional<std::pair<std::string, std::string>> first_differing_lines(const std::string& a, const std::string& b);

}  // namespace specula
