// The device of the LibTorch baselines (torch_sampler_baseline.h, torch_verify_baseline.h), and how they time a
// batch on it. Includes LibTorch: for the benchmarks' LibTorch translation units only.
#pragma once

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <string>

namespace specula::bench {

// "cpu" or "cuda"; throws Error naming `what` for another name, and "no CUDA device: ..." where this LibTorch
// sees no GPU.
torch::Device torch_bench_device(const std::string& device, const char* what);

// LibTorch runs GPU work asynchronously: a timed loop ends when the device has finished it.
void wait_for(const torch::Device& device);

// Mean microseconds of once() on `device`: 3 untimed calls, then `iterations` back to back and one wait (launch
// overheads overlap and L2 stays warm: both favour a baseline over a kernel timed alone after an L2 flush).
template <class Once>
double mean_us_per_batch(Once&& once, const torch::Device& device, int iterations) {
  for (int i = 0; i < 3; ++i) once();
  wait_for(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) once();
  wait_for(device);
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

}  // namespace specula::bench
