#include "harness/train/training_stop.h"

#include <algorithm>

#include "harness/io/stop_signals.h"

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

}  // namespace specula
