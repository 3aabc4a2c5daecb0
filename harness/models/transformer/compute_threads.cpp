#include "harness/models/transformer/compute_threads.h"

#include <ATen/Parallel.h>
#include <omp.h>

#include "kernels/shared/error.h"

namespace specula {

void set_compute_threads(int threads) {
  if (threads < 1) fail("threads must be >= 1, got ", threads);
  at::set_num_threads(threads);
  omp_set_num_threads(threads);
}

}  // namespace specula
