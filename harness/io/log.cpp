#include "harness/io/log.h"

#include <cstdlib>

#include "kernels/shared/error.h"

namespace specula {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("SPECULA_LOG_LEVEL");
  return env ? parse_log_level(env) : LogLevel::info;
}

LogLevel& level_storage() {
  static LogLevel level = initial_level();
  return level;
}

}  // namespace

LogLevel parse_log_level(const std::string& text) {
  if (text == "error") return LogLevel::error;
  if (text == "warn" || text == "warning") return LogLevel::warn;
  if (text == "info") return LogLevel::info;
  if (text == "debug") return LogLevel::debug;
  fail("log level: '", text, "' is not one of error, warn, info, debug");
}

LogLevel log_level() { return level_storage(); }
void set_log_level(LogLevel level) { level_storage() = level; }

}  // namespace specula
