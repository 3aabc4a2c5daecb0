// Learning rate per step: linear warm-up from 0 to `peak` over `warmup_steps`, then a cosine decay to `min` at
// `total_steps` (Loshchilov & Hutter 2017, SGDR without restarts; the nanoGPT recipe). Torch-free.
#pragma once

#include <cstdint>

namespace specula {

struct LrSchedule {
  double peak = 1e-3;
  double min = 1e-4;
  int64_t warmup_steps = 100;
  int64_t total_steps = 1000;

  void validate() const;  // throws Error naming the bad option
  // Step 0 is the first optimizer step: lr = peak / warmup_steps (never 0, so the first step moves).
  double at(int64_t step) const;
};

}  // namespace specula
