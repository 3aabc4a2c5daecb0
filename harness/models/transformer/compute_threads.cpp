#include "harness/models/transformer/compute_threads.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include "kernels/shared/error.h"
#include "kernels/shared/thread_limit.h"

namespace specula {

void set_compute_threads(int threads) {
  check_thread_count(threads);
  at::set_num_threads(threads);
  omp_set_num_threads(threads);
}

}  // namespace specula
