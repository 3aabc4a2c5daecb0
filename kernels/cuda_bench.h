// `specula bench sampler|verify --device cuda`: times the CUDA kernels (fused sampler; chain, block and
// tree verification) on synthetic inputs with CUDA events, and reports the bandwidth each achieves
// against the device's peak (from cudaGetDeviceProperties / cudaDeviceGetAttribute). Bytes are the
// compulsory HBM traffic of kernels/README.md's cost model, computed per launch from the kernels' own
// outcomes (which rows a verification had to read). Torch-free; throws "no CUDA device: ..." where no
// device can be used, including in a build without CUDA.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace specula {

struct CudaBenchOptions {
  std::string what = "sampler";  // "sampler" or "verify"
  int iterations = 20;           // timed launches per case, after 3 untimed warm-up launches
  bool flush_l2 = true;          // overwrite L2 before every timed launch (cold-cache HBM numbers)
};

// One setting of the sampler's benchmark (every row alike): temperature 0 = none; top_k 0, top_p 1, min_p 0 =
// off; penalties = repetition 1.1, frequency 0.2, presence 0.1 over a 256-token output inside a 64-token prompt.
// Filters run in the canonical order min_p, top_k, top_p.
struct SamplerBenchSetting {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  bool penalties;
  bool exact_top_p;  // TopPPass::exact instead of float-first
};
const std::vector<SamplerBenchSetting>& sampler_bench_settings();

struct CudaBenchCase {
  std::string kernel;  // e.g. "sampler/plain", "verify/chain"
  int32_t vocab = 0;   // V
  int32_t batch = 0;   // B
  int32_t width = 0;   // K drafts (chain, block) or N tree nodes; 0 for the sampler
  int iterations = 0;
  double mean_us = 0;  // per launch (CUDA events around the launch alone)
  double min_us = 0;
  double bytes = 0;     // compulsory HBM bytes per launch (cost model)
  double gb_per_s = 0;  // bytes / mean time
  double fraction_of_peak = 0;
  double bound_us = 0;                     // bytes / peak: the bandwidth-bound time
  double floor_us = 0;                     // bytes / the device-to-device copy bandwidth measured in the same run
  int blocks_per_row = 1;                  // the launch: one block per row, or a row split over this many
  std::string row_exchange = "automatic";  // how a split row's blocks exchange (row_exchange_name)
  int setting = -1;                        // the sampler's: index into sampler_bench_settings()
  // The same work done by LibTorch's CUDA operations, timed in the same run (0: not measured). Filled by the
  // harness (harness/bench/torch_sampler_baseline.h); the kernels layer does not link LibTorch.
  double libtorch_us = 0;
};

struct CudaBenchReport {
  std::string what;
  std::string device;  // cudaDeviceProp::name
  int sm_count = 0;
  int64_t l2_bytes = 0;
  double peak_gb_per_s = 0;  // 2 * memory clock * bus width / 8
  double copy_gb_per_s = 0;  // measured: a device-to-device copy's bytes read / its time
  bool flush_l2 = true;
  // The sampler's LibTorch baseline: "measured", or why it was not (filled by the harness).
  std::string libtorch_baseline = "not measured";
  std::vector<CudaBenchCase> cases;
};

CudaBenchReport run_cuda_bench(const CudaBenchOptions& options);
void print_cuda_bench(const CudaBenchReport& report, std::ostream& os);
std::string cuda_bench_json(const CudaBenchReport& report);

// The host name the report names (and the default report path uses).
std::string cuda_bench_host_name();

}  // namespace specula
