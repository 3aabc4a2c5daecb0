#include "harness/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "kernels/shared/error.h"

namespace specula {

void LrSchedule::validate() const {
  if (!(peak > 0.0 && std::isfinite(peak))) fail_parameter("lr", " must be a finite number > 0, got ", peak);
  if (!(min >= 0.0 && min <= peak)) fail_parameter("min_lr", " must be in [0, lr], got ", min);
  if (total_steps < 1) fail_parameter("steps", " must be >= 1, got ", total_steps);
  if (warmup_steps < 0 || warmup_steps > total_steps)
    fail_parameter("warmup_steps", " must be in [0, steps], got ", warmup_steps);
}

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
  return min + 0.5 * (peak - min) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace specula
