#include "harness/train/progress_bar.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace specula {

ProgressBar::ProgressBar(std::ostream& out, int64_t total_steps, bool interactive, int64_t plain_every)
    : out_(out), total_(total_steps), interactive_(interactive), plain_every_(plain_every < 1 ? 1 : plain_every) {}

std::string ProgressBar::format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

std::string ProgressBar::status(int64_t step, double loss, double tokens_per_s, double eta_s) const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %lld/%lld  loss %.4f  %.0f tok/s  ETA %s", static_cast<long long>(step + 1),
                static_cast<long long>(total_), loss, tokens_per_s, format_duration(eta_s).c_str());
  return buf;
}

void ProgressBar::update(int64_t step, double loss, double tokens_per_s, double eta_s) {
  const bool last = step + 1 == total_;
  if (!interactive_) {
    if ((step + 1) % plain_every_ == 0 || step == 0 || last) out_ << status(step, loss, tokens_per_s, eta_s) << "\n";
    out_.flush();
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!last && line_open_ && now - last_draw_ < std::chrono::milliseconds(200)) return;  // ~5 redraws a second
  last_draw_ = now;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * (step + 1) / std::max<int64_t>(1, total_));
  std::ostringstream line;
  line << "\r[" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] "
       << status(step, loss, tokens_per_s, eta_s) << "\033[K";
  out_ << line.str();
  out_.flush();
  line_open_ = true;
}

void ProgressBar::note(const std::string& line) {
  if (interactive_ && line_open_) out_ << "\r\033[K";
  out_ << line << "\n";
  out_.flush();
  line_open_ = false;
}

void ProgressBar::finish() {
  if (interactive_ && line_open_) out_ << "\n";
  out_.flush();
  line_open_ = false;
}

void TrainingLog::add_step(double loss, double seconds) {
  train_seconds_ += seconds;
  if (recent_count_ == eval_interval_) recent_sum_ = recent_count_ = 0;
  recent_sum_ += loss;
  ++recent_count_;
}

void TrainingLog::add_evaluation(double seconds) {
  eval_seconds_ += seconds;
  ++evals_done_;
}

double TrainingLog::recent_loss() const {
  return recent_sum_ / static_cast<double>(std::max<int64_t>(1, recent_count_));
}

double TrainingLog::eta(int64_t done) const {
  const double eval_cost = evals_done_ ? eval_seconds_ / static_cast<double>(evals_done_) : 0.0;
  return static_cast<double>(total_steps_ - done) * train_seconds_ / static_cast<double>(done) +
         static_cast<double>(std::max<int64_t>(0, total_steps_ / eval_interval_ - evals_done_)) * eval_cost;
}

std::string fixed_decimals(double v, int digits) {
  std::ostringstream os;
  os.precision(digits);
  os << std::fixed << v;
  return os.str();
}

}  // namespace specula
