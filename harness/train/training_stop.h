// A training run stopped by SIGINT, SIGTERM or SIGHUP (harness/io/stop_signals.h). In the training loop, the first
// signal ends the run after the step in progress, with its validation and save when one is due; the model saved last
// stays, its record's `status` saying the run was interrupted and after which step. A second signal two seconds or
// more after the first, or a signal before or after the loop (loading, the final validation), ends the process at
// once, as the default action would, even where it was started ignoring SIGINT; the model saved last then keeps its
// `in progress` status. No signal ends the process between a save's weights and its config (the two files a load
// checks against each other): one that would, ends it after them. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "harness/io/stop_signals.h"

namespace specula {

// How far a stopped run got, and what it had saved.
struct TrainingStop {
  int signal = 0;                  // 0: the run finished
  int64_t steps_done = 0;          // optimiser steps taken
  int64_t total_steps = 0;         // steps asked for
  int64_t saved_step = 0;          // the step of the model saved last; 0: none saved
  bool output_held_model = false;  // the output folder held a model before the run (--overwrite)
};

// The status a saved model's record carries after `stop`: "interrupted (SIGINT) after step 37 of 200".
std::string interrupted_status(const TrainingStop& stop);

// What the command prints: the signal, the steps, and what `output` holds ("the model of step 30, the best
// validation loss it reached"), or that nothing was saved (and the model it held before, or when the first save would
// have been).
std::string interrupted_message(const std::string& command, const TrainingStop& stop, const std::string& output,
                                int64_t eval_interval);

// The stop signals of one training run, for both trainers. Made first, before loading: signals end the process at once
// until begin_loop, after which they end the loop between steps (stop_before) until end_loop.
class TrainingStopper {
 public:
  TrainingStopper(std::string command, std::string output, int64_t total_steps, int64_t eval_interval);

  void begin_loop() { deferral_.emplace(); }
  // Whether a signal came before `step`: then the run stops there, with the model of `saved_step` (0: none) saved.
  bool stop_before(int64_t step, int64_t saved_step);
  // After the loop: a signal from here on ends the process at once, and one that came in the last step stops the run
  // here. True when the run was stopped.
  bool end_loop(int64_t saved_step);
  const TrainingStop& stop() const { return stop_; }
  // A stopped run's ending: the saved model's record gets its status through `set_status` (when one was saved), and
  // stderr the message.
  void report(const std::function<void(const std::string& status)>& set_status) const;

 private:
  const SignalGuard guard_;
  std::optional<StopDeferral> deferral_;
  const std::string command_, output_;
  const int64_t total_steps_, eval_interval_;
  const bool output_held_model_;
  TrainingStop stop_;
};

}  // namespace specula
