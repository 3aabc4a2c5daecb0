// The command line's and experiment files' device options, read into the kernels' types: --device (and
// [experiment] device), --cuda-host-schedule and --cuda-host-exchange.
#pragma once

#include <string>

#include "kernels/cuda_device.h"
#include "kernels/fiber_team.h"
#include "kernels/sampler_kernels.h"

namespace specula {

// "cpu", "cuda" or "cuda-host"; an error naming the parameter `device` and the value otherwise.
Device parse_device(const std::string& text);
// "forward", "reverse" or "rotating" (the block emulation's thread order); an error naming the value otherwise.
FiberSchedule parse_fiber_schedule(const std::string& text);
// "automatic" or "global_memory" (how the blocks of a split row exchange: row_exchange_name); an error naming the
// value otherwise.
RowExchange parse_row_exchange(const std::string& text);
// Where the target model computes for a run on `device` (model_registry.h's device): on the GPU for cuda; on the
// CPU otherwise (cuda-host emulates the kernels, not the model).
const char* model_device_for(Device device);

}  // namespace specula
