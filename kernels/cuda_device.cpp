// Device selection: the parts that need no CUDA runtime. The runtime probe (cuda_probe) is defined in
// cuda_runtime_probe.cpp when the build has CUDA, and below when it does not.
#include "kernels/cuda_device.h"

#include "kernels/shared/error.h"

namespace specula {

namespace detail {
// Device count, and the runtime's reason when it is 0, or device 0's name. Defined once per build flavour.
int cuda_probe(std::string* reason, std::string* name);
}  // namespace detail

#if !defined(SPECULA_HAS_CUDA)
namespace detail {
int cuda_probe(std::string* reason, std::string* /*name*/) {
  *reason = "this build has no CUDA support (configure with -DSPECULA_CUDA=ON)";
  return 0;
}
}  // namespace detail
bool built_with_cuda() { return false; }
bool cuda_device_has_clusters() { return false; }
#else
bool built_with_cuda() { return true; }
#endif

const char* device_name(Device device) {
  switch (device) {
    case Device::cpu:
      return "cpu";
    case Device::cuda:
      return "cuda";
    case Device::cuda_host:
      return "cuda-host";
  }
  return "?";
}

namespace {
// The runtime is asked once per process: devices do not come and go under a running program, and every
// launcher checks for one.
struct Probe {
  int count = 0;
  std::string reason;
  std::string name;
};
const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    p.count = detail::cuda_probe(&p.reason, &p.name);
    return p;
  }();
  return result;
}
}  // namespace

int cuda_device_count_or_zero() { return probe().count; }

std::string cuda_device_name() { return probe().name; }

std::string cuda_unavailable_reason() { return probe().count > 0 ? std::string() : probe().reason; }

void require_cuda_device() {
  if (probe().count == 0) fail("no CUDA device: ", probe().reason);
}

void require_device(Device device) {
  if (device == Device::cuda) require_cuda_device();
}

}  // namespace specula
