#include "harness/train/training_stop.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <utility>

namespace specula {

std::string interrupted_status(const TrainingStop& stop) {
  return std::string("interrupted (") + stop_signal_name(stop.signal) + ") after step " +
         std::to_string(stop.steps_done) + " of " + std::to_string(stop.total_steps);
}

std::string interrupted_message(const std::string& command, const TrainingStop& stop, const std::string& output,
                                int64_t eval_interval) {
  const std::string head = command + ": " + interrupted_status(stop) + "; ";
  if (stop.saved_step == 0 && stop.output_held_model)
    return head + "nothing was saved; " + output + " still holds the model it held before this run";
  if (stop.saved_step == 0)
    return head + "nothing was saved to " + output + " (the first save follows the validation at step " +
           std::to_string(std::min(eval_interval, stop.total_steps)) + ")";
  return head + output + " holds the model of step " + std::to_string(stop.saved_step) +
         ", the best validation loss it reached; its record's status says it was interrupted";
}

TrainingStopper::TrainingStopper(std::string command, std::string output, int64_t total_steps, int64_t eval_interval)
    : guard_("", "", true),
      command_(std::move(command)),
      output_(std::move(output)),
      total_steps_(total_steps),
      eval_interval_(eval_interval),
      output_held_model_(std::filesystem::exists(std::filesystem::path(output_) / "config.json")) {}

bool TrainingStopper::stop_before(int64_t step, int64_t saved_step) {
  if (const int signal = stop_signal_received()) {
    stop_ = {signal, step, total_steps_, saved_step, output_held_model_};
    return true;
  }
  return false;
}

bool TrainingStopper::end_loop(int64_t saved_step) {
  deferral_.reset();
  if (!stop_.signal) stop_before(total_steps_, saved_step);
  return stop_.signal != 0;
}

void TrainingStopper::report(const std::function<void(const std::string& status)>& set_status) const {
  if (stop_.saved_step > 0) set_status(interrupted_status(stop_));
  std::cerr << interrupted_message(command_, stop_, output_, eval_interval_) << "\n";
}

}  // namespace specula
