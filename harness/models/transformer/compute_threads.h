// LibTorch's intra-op threads (the module's "set_torch_threads" entry; harness/models/registry/torch_module.h's
// set_compute_threads sets OpenMP's and, through it, these). LibTorch defaults to 1 thread here; with 2 threads
// on a busy machine set OMP_WAIT_POLICY=passive.
#pragma once

namespace specula {
void set_torch_threads(int threads);
}
