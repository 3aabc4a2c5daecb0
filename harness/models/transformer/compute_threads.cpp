#include "harness/models/transformer/compute_threads.h"

#include <ATen/Parallel.h>

#include "kernels/shared/thread_limit.h"

namespace specula {

void set_torch_threads(int threads) {
  check_thread_count(threads);
  at::set_num_threads(threads);
}

}  // namespace specula
