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

// The bookkeeping both training loops (specula train, train-medusa/train-eagle) keep beside the bar: the mean
// training loss of the current window of eval_interval steps, the seconds spent in training steps and in
// evaluations, and from them the time left.
class TrainingLog {
 public:
  TrainingLog(int64_t total_steps, int64_t eval_interval) : total_steps_(total_steps), eval_interval_(eval_interval) {}
  // A training step's loss and seconds; the loss window restarts after each eval_interval steps.
  void add_step(double loss, double seconds);
  void add_evaluation(double seconds);
  // The mean loss of the current window (0 before any step).
  double recent_loss() const;
  double train_seconds() const { return train_seconds_; }
  // Seconds left after `done` steps: the remaining steps at the mean step time plus the evaluations still due
  // at the mean evaluation time.
  double eta(int64_t done) const;

 private:
  int64_t total_steps_, eval_interval_;
  double train_seconds_ = 0.0, eval_seconds_ = 0.0, recent_sum_ = 0.0;
  int64_t evals_done_ = 0, recent_count_ = 0;
};

// `v` with `digits` decimals ("0.7903"): the losses and rates the training logs print.
std::string fixed_decimals(double v, int digits = 4);

}  // namespace specula
