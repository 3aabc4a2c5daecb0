// Log lines on stderr with a level: error < warn < info < debug. The level comes from --log-level (or the
// SPECULA_LOG_LEVEL environment variable); --quiet sets it to error and hides progress bars.
#pragma once

#include <iostream>
#include <sstream>
#include <string>

namespace specula {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

// Throws Error naming the value for anything but error, warn, info or debug.
LogLevel parse_log_level(const std::string& text);
LogLevel log_level();
void set_log_level(LogLevel level);

// log(LogLevel::info, "loaded ", n, " prompts") prints "specula: loaded 3 prompts" when info is enabled.
template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (static_cast<int>(level) > static_cast<int>(log_level())) return;
  std::ostringstream os;
  os << "specula: " << (level == LogLevel::error ? "error: " : level == LogLevel::warn ? "warning: " : "");
  (os << ... << parts);
  std::cerr << os.str() << "\n";
}

// A warning printed at every log level, --quiet's included: for what may lose data if unseen (two runs writing one
// results folder), which a quiet batch job's log must still show.
template <typename... Parts>
void warn_unhidden(const Parts&... parts) {
  std::ostringstream os;
  os << "specula: warning: ";
  (os << ... << parts);
  std::cerr << os.str() << "\n";
}

}  // namespace specula
