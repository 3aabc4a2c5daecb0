#include "harness/config/device_options.h"

#include "kernels/shared/error.h"

namespace specula {

Device parse_device(const std::string& text) {
  for (Device d : {Device::cpu, Device::cuda, Device::cuda_host})
    if (text == device_name(d)) return d;
  fail_parameter("device", ": unknown device '", text, "' (expected cpu, cuda or cuda-host)");
}

FiberSchedule parse_fiber_schedule(const std::string& text) {
  for (FiberSchedule s : {FiberSchedule::forward, FiberSchedule::reverse, FiberSchedule::rotating})
    if (text == fiber_schedule_name(s)) return s;
  fail("unknown fiber schedule '", text, "' (expected forward, reverse or rotating)");
}

RowExchange parse_row_exchange(const std::string& text) {
  for (RowExchange e : {RowExchange::automatic, RowExchange::global_memory})
    if (text == row_exchange_name(e)) return e;
  fail("unknown row exchange '", text, "' (expected automatic or global_memory)");
}

const char* model_device_for(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

}  // namespace specula
