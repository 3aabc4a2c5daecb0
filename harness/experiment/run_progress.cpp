#include "harness/experiment/run_progress.h"

#include <unistd.h>

#include <cstdio>

namespace specula {
namespace {
std::string format_duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}
}  // namespace

RunProgress::RunProgress(int64_t total, bool quiet)
    : total_(total), quiet_(quiet), interactive_(isatty(2) != 0), start_(std::chrono::steady_clock::now()), last_() {}

void RunProgress::update(int64_t done, const std::string& what) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double since_last = std::chrono::duration<double>(now - last_).count();
  if (!interactive_ && since_last < 5.0 && done < total_) return;
  if (interactive_ && since_last < 0.1 && done < total_) return;
  last_ = now;
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const double eta = rate > 0 ? (total_ - done) / rate : 0.0;
  const int width = 24;
  const int filled = total_ ? static_cast<int>(width * done / total_) : width;
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  std::fprintf(stderr, "%s[%s] %lld/%lld  %.2f gen/s  ETA %s  %s%s", interactive_ ? "\r\033[K" : "", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), rate, format_duration(eta).c_str(),
               what.substr(0, 60).c_str(), interactive_ ? "" : "\n");
  std::fflush(stderr);
}

void RunProgress::finish() {
  if (!quiet_ && interactive_) std::fprintf(stderr, "\n");
}

}  // namespace specula
