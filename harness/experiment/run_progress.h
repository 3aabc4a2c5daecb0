// Progress of a run on stderr: done/total, rate, ETA and the current setting. Redrawn in place on a
// terminal; plain lines (at most one every few seconds) when stderr is a file or a CI log; nothing with
// --quiet.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace specula {

class RunProgress {
 public:
  RunProgress(int64_t total, bool quiet);
  void update(int64_t done, const std::string& what);
  void finish();

 private:
  int64_t total_;
  bool quiet_, interactive_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace specula
