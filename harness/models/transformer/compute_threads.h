// One place that sets how many threads model forwards use: LibTorch's intra-op pool and OpenMP.
// LibTorch defaults to 1 thread here; with 2 threads on a busy machine set OMP_WAIT_POLICY=passive.
#pragma once

namespace specula {
void set_compute_threads(int threads);
}
