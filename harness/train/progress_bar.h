// Training progress on stderr: on a terminal, one line redrawn in place (bar, step, loss, tokens/s, ETA);
// otherwise (a log file, CI) plain lines every `plain_every` steps, so logs stay readable. Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace specula {

class ProgressBar {
 public:
  // interactive: redraw in place (pass isatty(2)); plain_every: steps between plain lines otherwise.
  ProgressBar(std::ostream& out, int64_t total_steps, bool interactive, int64_t plain_every);

  // After step `step` (0-based) with its training loss; tokens_per_s over training steps only; eta_s the
  // estimated seconds left (evaluation included).
  void update(int64_t step, double loss, double tokens_per_s, double eta_s);
  // A line that must not be overwritten (validation results, checkpoint saves).
  void note(const std::string& line);
  void finish();

  static std::string format_duration(double seconds);  // "1:02:03", "12:31"

 private:
  std::string status(int64_t step, double loss, double tokens_per_s, double eta_s) const;

  std::ostream& out_;
  int64_t total_;
  bool interactive_;
  int64_t plain_every_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace specula
