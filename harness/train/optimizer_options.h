// What `specula train` and `specula train-medusa` / `train-eagle` share: the optimisation loop's settings
// (AdamW, warm-up + cosine schedule, clipping, periodic evaluation, logging, seed, threads), their checks
// and their command-line options. Torch-free.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "harness/train/lr_schedule.h"

namespace specula {

struct OptimizerOptions {
  int64_t batch_size = 32;  // windows per step
  int64_t seq_len = 256;    // tokens per window
  LrSchedule lr;            // lr.total_steps = number of optimizer steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double grad_clip = 1.0;  // max global gradient norm (<= 0: off)

  int64_t eval_interval = 250;  // steps between validation losses (and checkpoints when it improves)
  int64_t eval_windows = 64;    // validation windows per periodic evaluation (evenly spaced, fixed)
  int64_t log_interval = 50;    // steps between plain progress lines when stderr is not a terminal
  uint64_t seed = 0;
  int threads = 1;

  // Throws Error naming the option (--batch-size, --beta1, ...); the window limits are the callers'.
  void validate_optimizer() const;
};

// --steps, --batch-size, --seq-len, --lr, --min-lr, --warmup-steps, --weight-decay, --beta1, --beta2,
// --grad-clip, --eval-interval, --eval-windows, --log-interval, --seed, --threads with `defaults`.
void add_optimizer_options(boost::program_options::options_description& desc, const OptimizerOptions& defaults);
void read_optimizer_options(const boost::program_options::variables_map& vm, OptimizerOptions& options);

// The settings a trained model's record keeps: steps, batch_size, seq_len, lr, min_lr, warmup_steps,
// weight_decay, betas, grad_clip, seed, threads.
nlohmann::json optimizer_record(const OptimizerOptions& options);

// The record a model saved during training carries until the run ends and its full record replaces it: what made it
// (`command`, `corpus`, optimizer_record) and a status saying the run had not finished, so that a run killed before
// its end still says how its model was trained (a stop signal's status replaces it: training_stop.h). Callers add their
// own fields, and the step and loss of each save.
nlohmann::json in_progress_record(const OptimizerOptions& options, const std::string& command,
                                  const std::string& corpus);

}  // namespace specula
