// CUDA kernel benchmarks (see cuda_bench.h). Compiled by the C++ compiler against the CUDA runtime when
// the build has CUDA; without it, run_cuda_bench only reports "no CUDA device: ...".
#include "kernels/cuda_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/cuda_device.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"

#if defined(SPECULA_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "kernels/cuda_check.h"
#endif

namespace specula {
namespace {

#if defined(SPECULA_HAS_CUDA)

// A device buffer that frees itself; every allocation and copy is checked.
template <typename T>
class Buffer {
 public:
  explicit Buffer(size_t n) : n_(n) {
    if (n_) cuda_check(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)), "bench: cudaMalloc");
  }
  explicit Buffer(const std::vector<T>& host) : Buffer(host.size()) {
    if (n_) cuda_check(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "bench: cudaMemcpy");
  }
  ~Buffer() {
    if (ptr_) cudaFree(ptr_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  std::vector<T> to_host() const {
    std::vector<T> out(n_);
    if (n_) cuda_check(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "bench: cudaMemcpy");
    return out;
  }
  // Row r of a [rows, V] buffer <- host row.
  void set_row(size_t r, const std::vector<T>& row) {
    cuda_check(cudaMemcpy(ptr_ + r * row.size(), row.data(), row.size() * sizeof(T), cudaMemcpyHostToDevice),
               "bench: cudaMemcpy");
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

class Events {
 public:
  Events() {
    cuda_check(cudaEventCreate(&start), "bench: cudaEventCreate");
    cuda_check(cudaEventCreate(&stop), "bench: cudaEventCreate");
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// 3 untimed launches, then `iterations` timed ones. With the L2 flush, each launch is timed alone with
// events: the flush (a memset of twice the L2, tens of microseconds) keeps the GPU busy while the host
// enqueues the start event and the kernel, so the host's launch overhead is not timed. Without it, the
// launches run back to back between one pair of events (the queue stays full) and min = mean.
template <class Launch>
void time_launches(Launch&& launch, const CudaBenchOptions& o, const Buffer<uint8_t>& flush, CudaBenchCase& c) {
  for (int i = 0; i < 3; ++i) launch();
  cuda_check(cudaDeviceSynchronize(), "bench: warm-up");
  Events ev;
  c.iterations = o.iterations;
  if (!o.flush_l2 || !flush.size()) {
    cuda_check(cudaEventRecord(ev.start), "bench: cudaEventRecord");
    for (int i = 0; i < o.iterations; ++i) launch();
    cuda_check(cudaEventRecord(ev.stop), "bench: cudaEventRecord");
    cuda_check(cudaEventSynchronize(ev.stop), "bench: cudaEventSynchronize");
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, ev.start, ev.stop), "bench: cudaEventElapsedTime");
    c.mean_us = c.min_us = 1e3 * ms / o.iterations;
    return;
  }
  double total_ms = 0.0, best_ms = std::numeric_limits<double>::infinity();
  for (int i = 0; i < o.iterations; ++i) {
    cuda_check(cudaMemsetAsync(flush.get(), i & 0xff, flush.size()), "bench: L2 flush");
    cuda_check(cudaEventRecord(ev.start), "bench: cudaEventRecord");
    launch();
    cuda_check(cudaEventRecord(ev.stop), "bench: cudaEventRecord");
    cuda_check(cudaEventSynchronize(ev.stop), "bench: cudaEventSynchronize");
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, ev.start, ev.stop), "bench: cudaEventElapsedTime");
    total_ms += ms;
    best_ms = std::min(best_ms, static_cast<double>(ms));
  }
  c.mean_us = 1e3 * total_ms / o.iterations;
  c.min_us = 1e3 * best_ms;
}

// A case named by its kernel and shape, before timing.
CudaBenchCase bench_case(std::string kernel, int32_t vocab, int32_t batch, int32_t width = 0) {
  CudaBenchCase c;
  c.kernel = std::move(kernel);
  c.vocab = vocab;
  c.batch = batch;
  c.width = width;
  return c;
}

void finish_case(CudaBenchCase& c, const CudaBenchReport& report) {
  c.gb_per_s = c.bytes / (c.mean_us * 1e-6) / 1e9;
  c.fraction_of_peak = c.gb_per_s / report.peak_gb_per_s;
  c.bound_us = c.bytes / (report.peak_gb_per_s * 1e9) * 1e6;
  c.floor_us = c.bytes / (report.copy_gb_per_s * 1e9) * 1e6;
}

// What HBM delivers to a kernel here: a 1 GiB device-to-device copy, best of 5, as bytes moved (read plus
// written) per second. The floor of a kernel's time is its compulsory bytes (reads plus writes) at this rate.
double measured_copy_gb_per_s() {
  const size_t bytes = size_t(1) << 30;
  Buffer<uint8_t> from(bytes), to(bytes);
  Events ev;
  double best_ms = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 6; ++i) {
    cuda_check(cudaEventRecord(ev.start), "bench: cudaEventRecord");
    cuda_check(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice), "bench: copy");
    cuda_check(cudaEventRecord(ev.stop), "bench: cudaEventRecord");
    cuda_check(cudaEventSynchronize(ev.stop), "bench: cudaEventSynchronize");
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, ev.start, ev.stop), "bench: cudaEventElapsedTime");
    if (i > 0) best_ms = std::min(best_ms, static_cast<double>(ms));  // the first one warms up
  }
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}

// Synthetic rows: a few random patterns, reused across rows (content does not change the traffic).
constexpr int kPatterns = 8;

std::vector<std::vector<float>> logit_patterns(int32_t V, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<float>> rows(kPatterns, std::vector<float>(V));
  for (auto& row : rows)
    for (float& x : row) x = normal(rng);
  return rows;
}

// Dense distributions with lognormal weights: two independent rows are ~0.6 apart in acceptance, so
// verification both accepts and rejects.
std::vector<std::vector<float>> distribution_patterns(int32_t V, std::mt19937_64& rng) {
  std::vector<std::vector<float>> rows = logit_patterns(V, rng);
  for (auto& row : rows) {
    double total = 0.0;
    for (float& x : row) total += x = std::exp(0.5f * x);
    for (float& x : row) x = static_cast<float>(x / total);
  }
  return rows;
}

int32_t draw(const std::vector<float>& weights, std::mt19937_64& rng) {
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  for (size_t x = 0; x < weights.size(); ++x)
    if ((u -= weights[x]) < 0.0) return static_cast<int32_t>(x);
  return static_cast<int32_t>(weights.size()) - 1;
}

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int64_t l2_bytes = 0;
  double peak_gb_per_s = 0.0;
};

DeviceInfo device_info() {
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "bench: cudaGetDevice");
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, dev), "bench: cudaGetDeviceProperties");
  int clock_khz = 0;  // cudaDeviceProp::memoryClockRate is gone in CUDA 13; the attribute remains
  cuda_check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev), "bench: memory clock");
  DeviceInfo d;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = prop.l2CacheSize;
  // Double data rate: two transfers per clock over memoryBusWidth bits (3.35 TB/s on an H100 SXM).
  d.peak_gb_per_s = 2.0 * clock_khz * 1e3 * (prop.memoryBusWidth / 8.0) / 1e9;
  return d;
}

const std::vector<int32_t> kVocabs = {32000, 128256};
const std::vector<int32_t> kBatches = {1, 64};

SamplerRowParams bench_row(const SamplerBenchSetting& s, int32_t b) {
  SamplerRowParams r;
  r.seed = 7;
  r.stream = static_cast<uint64_t>(b);
  if (s.temperature > 0.0f) r.temperature = s.temperature;
  if (s.penalties) {
    r.repetition_penalty = 1.1f;
    r.frequency_penalty = 0.2f;
    r.presence_penalty = 0.1f;
    r.flags |= kRowCounts | kRowPrompt;
  }
  if (s.min_p > 0.0f) {
    r.min_p = s.min_p;
    r.filters[r.num_filters++] = static_cast<uint8_t>(KernelFilter::min_p);
  }
  if (s.top_k > 0) {
    r.top_k = s.top_k;
    r.filters[r.num_filters++] = static_cast<uint8_t>(KernelFilter::top_k);
  }
  if (s.top_p < 1.0f) {
    r.top_p = s.top_p;
    r.filters[r.num_filters++] = static_cast<uint8_t>(KernelFilter::top_p);
  }
  return r;
}

// Output histories of 256 tokens per row (counts) inside a 64-token prompt (bitmap), for the penalties.
void fill_history(int32_t V, int32_t B, std::mt19937_64& rng, std::vector<int32_t>& counts,
                  std::vector<uint32_t>& prompt) {
  const int32_t W = (V + 31) / 32;
  counts.assign(static_cast<size_t>(B) * V, 0);
  prompt.assign(static_cast<size_t>(B) * W, 0u);
  std::uniform_int_distribution<int32_t> token(0, V - 1);
  for (int32_t b = 0; b < B; ++b) {
    for (int i = 0; i < 256; ++i) ++counts[static_cast<size_t>(b) * V + token(rng)];
    for (int i = 0; i < 64; ++i) {
      const int32_t t = token(rng);
      prompt[static_cast<size_t>(b) * W + t / 32] |= 1u << (t % 32);
    }
  }
}

// One launch a kernel's cases time: blocks per row, how they exchange, whether a verification cluster stages its rows
// in shared memory, and the case's name.
struct LaunchVariant {
  int blocks;
  RowExchange exchange;
  int32_t stage_rows;
  std::string name;
};
// The dispatch's launch (the cluster of `dispatched` blocks where the GPU has clusters, else one block per row)
// under the kernel's name; where `dispatched` > 1, the same blocks exchanging through global memory ("/global", the
// path of GPUs without clusters) and, beside a cluster, one block per row ("/one-block"); with `unstaged`, the
// cluster again reading its rows from global memory ("/unstaged").
std::vector<LaunchVariant> launch_variants(const std::string& kernel, int dispatched, bool unstaged) {
  const bool cluster = dispatched > 1 && cuda_device_has_clusters();
  std::vector<LaunchVariant> variants = {{cluster ? dispatched : 1, RowExchange::automatic, 1, kernel}};
  if (cluster && unstaged) variants.push_back({dispatched, RowExchange::automatic, 0, kernel + "/unstaged"});
  if (dispatched > 1) variants.push_back({dispatched, RowExchange::global_memory, 1, kernel + "/global"});
  if (cluster) variants.push_back({1, RowExchange::automatic, 1, kernel + "/one-block"});
  return variants;
}

// What the launcher ran, which a case reports: a split it could not run on this device fell back to one block per
// row, and the case says so instead of the variant it asked for.
void record_split(const RowSplit& ran, CudaBenchCase& c) {
  c.blocks_per_row = ran.blocks;
  c.row_exchange = row_exchange_name(ran.exchange);
}

void bench_sampler(const CudaBenchOptions& o, const Buffer<uint8_t>& flush, CudaBenchReport& report) {
  std::mt19937_64 rng(20260101);
  GroupWorkspace workspace;  // kept across the launches, as a KernelStream keeps its own
  for (int32_t V : kVocabs) {
    const auto patterns = logit_patterns(V, rng);
    for (int32_t B : kBatches) {
      Buffer<float> logits(static_cast<size_t>(B) * V), probs(static_cast<size_t>(B) * V);
      for (int32_t b = 0; b < B; ++b) logits.set_row(b, patterns[b % kPatterns]);
      std::vector<int32_t> host_counts;
      std::vector<uint32_t> host_prompt;
      fill_history(V, B, rng, host_counts, host_prompt);
      Buffer<int32_t> counts(host_counts), tokens(B), status(B);
      Buffer<uint32_t> prompt(host_prompt);
      const std::vector<SamplerBenchSetting>& settings = sampler_bench_settings();
      for (size_t index = 0; index < settings.size(); ++index) {
        const SamplerBenchSetting& setting = settings[index];
        std::vector<SamplerRowParams> rows(B);
        for (int32_t b = 0; b < B; ++b) rows[b] = bench_row(setting, b);
        Buffer<SamplerRowParams> d_rows(rows);
        SamplerKernelParams p;
        p.logits = logits.get();
        p.rows = d_rows.get();
        p.probs = probs.get();
        p.tokens = tokens.get();
        p.status = status.get();
        p.output_counts = counts.get();
        p.prompt_bitmap = prompt.get();
        p.batch = B;
        p.vocab = V;
        p.top_p_pass = setting.exact_top_p ? TopPPass::exact : TopPPass::float_first;
        for (const LaunchVariant& variant :
             launch_variants(setting.name, choose_fused_sampler_config(p).ctas, /*unstaged=*/false)) {
          p.cluster_blocks = variant.blocks;
          p.row_exchange = variant.exchange;
          CudaBenchCase c = bench_case(variant.name, V, B);
          c.setting = static_cast<int>(index);
          RowSplit ran;
          time_launches([&] { ran = launch_fused_sampler(p, nullptr, &workspace); }, o, flush, c);
          record_split(ran, c);
          const std::vector<int32_t> st = status.to_host();
          check_sampler_status(st.data(), B);
          // Read logits, write probabilities, row params; the penalties read counts and the prompt bitmap.
          c.bytes =
              static_cast<double>(B) * (8.0 * V + 72.0 + (setting.penalties ? 4.0 * V + (V + 31) / 32 * 4.0 : 0.0));
          finish_case(c, report);
          report.cases.push_back(c);
        }
      }
    }
  }
}

// Outputs of one verification launch, on the device and (after the run) on the host.
struct VerifyBuffers {
  Buffer<int32_t> emitted, num_emitted, num_accepted, bonus, q_zero, status, path;
  VerifyBuffers(int32_t B, int32_t width, bool tree)
      : emitted(static_cast<size_t>(B) * (width + 1)),
        num_emitted(B),
        num_accepted(B),
        bonus(B),
        q_zero(B),
        status(B),
        path(tree ? static_cast<size_t>(B) * width : 0) {}
  VerifyOutputs outputs() const {
    return {emitted.get(), num_emitted.get(), num_accepted.get(), bonus.get(), q_zero.get(), status.get()};
  }
};

// One vocabulary and batch size of the verification benchmark: the distributions rows are drawn from, and each
// sequence's row parameters.
struct VerifyBenchInputs {
  int32_t V = 0, B = 0;
  const std::vector<std::vector<float>>& patterns;
  std::mt19937_64& rng;
  int32_t pattern(int32_t b, int32_t i, int32_t salt) const { return (b * 5 + i * 3 + salt) % kPatterns; }
  std::vector<VerifyRowParams> row_params(int32_t num_draft) const {
    std::vector<VerifyRowParams> rows(B);
    for (int32_t b = 0; b < B; ++b) {
      rows[b].seed = 11;
      rows[b].sequence = static_cast<uint64_t>(b);
      rows[b].step = 1;
      rows[b].num_draft = num_draft;
      rows[b].flags = kVerifyRowHasQ;
      rows[b].scheme = static_cast<int32_t>(TreeSiblingScheme::iid);
    }
    return rows;
  }
};

constexpr int32_t kBenchDraft = 4;  // K of the chain and block cases
// The tree case: 2 children under the root, 2 under each of those, 1 under each of those (N = 10).
const std::vector<int32_t> kBenchTreeParents = {-1, -1, 0, 0, 1, 1, 2, 3, 4, 5};

// chain and block: p [B, K + 1, V], q [B, K, V], drafts drawn from q
void bench_chain_and_block(const VerifyBenchInputs& in, const CudaBenchOptions& o, const Buffer<uint8_t>& flush,
                           CudaBenchReport& report) {
  const int32_t V = in.V, B = in.B, K = kBenchDraft;
  const double V4 = 4.0 * V;
  Buffer<float> p(static_cast<size_t>(B) * (K + 1) * V), q(static_cast<size_t>(B) * K * V);
  std::vector<int32_t> drafts(static_cast<size_t>(B) * K);
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t i = 0; i <= K; ++i) p.set_row(static_cast<size_t>(b) * (K + 1) + i, in.patterns[in.pattern(b, i, 0)]);
    for (int32_t i = 0; i < K; ++i) {
      const auto& q_row = in.patterns[in.pattern(b, i, 1)];
      q.set_row(static_cast<size_t>(b) * K + i, q_row);
      drafts[static_cast<size_t>(b) * K + i] = draw(q_row, in.rng);
    }
  }
  Buffer<int32_t> d_drafts(drafts);
  Buffer<VerifyRowParams> rows(in.row_params(K));
  const int dispatched = choose_verify_config(p.get(), q.get(), V).ctas;
  GroupWorkspace workspace;  // kept across the launches, as a KernelStream keeps its own
  for (const bool block : {false, true})
    for (const LaunchVariant& variant : launch_variants(block ? "verify/block" : "verify/chain", dispatched, true)) {
      VerifyBuffers out(B, K, false);
      BlockVerifyParams params;
      params.p = p.get();
      params.q = q.get();
      params.draft = d_drafts.get();
      params.rows = rows.get();
      params.out = out.outputs();
      params.batch = B;
      params.max_draft = K;
      params.vocab = V;
      params.cluster_blocks = variant.blocks;
      params.row_exchange = variant.exchange;
      params.stage_rows = variant.stage_rows;
      CudaBenchCase c = bench_case(variant.name, V, B, K);
      RowSplit ran;
      if (block)
        time_launches([&] { ran = launch_block_verify(params, nullptr, &workspace); }, o, flush, c);
      else
        time_launches([&] { ran = launch_chain_verify(params, nullptr, &workspace); }, o, flush, c);
      record_split(ran, c);
      const std::vector<int32_t> st = out.status.to_host(), accepted = out.num_accepted.to_host(),
                                 bonus = out.bonus.to_host();
      check_verify_status(st.data(), B);
      // Cost model (kernels/README.md): drafts, row params and outputs; a 32-byte sector for each
      // p(d) and q(d) read; then every full row the algorithm had to read.
      double bytes = 0.0;
      for (int32_t b = 0; b < B; ++b) {
        bytes += 4.0 * K + sizeof(VerifyRowParams) + 4.0 * (K + 1) + 20.0;
        if (block) {
          bytes += 64.0 * K + (bonus[b] ? V4 : 2.0 * V4 * (K - accepted[b]));
        } else {
          bytes += 64.0 * (accepted[b] + (bonus[b] ? 0 : 1)) + (bonus[b] ? V4 : 2.0 * V4);
        }
      }
      c.bytes = bytes;
      finish_case(c, report);
      report.cases.push_back(c);
    }
}

// tree: p and q [B, N + 1, V], i.i.d. siblings drawn from their row's q
void bench_tree_verify(const VerifyBenchInputs& in, const CudaBenchOptions& o, const Buffer<uint8_t>& flush,
                       CudaBenchReport& report) {
  const std::vector<int32_t>& tree_parents = kBenchTreeParents;
  const int32_t V = in.V, B = in.B, N = static_cast<int32_t>(tree_parents.size());
  const double V4 = 4.0 * V;
  Buffer<float> p(static_cast<size_t>(B) * (N + 1) * V), q(static_cast<size_t>(B) * (N + 1) * V);
  std::vector<int32_t> tokens(static_cast<size_t>(B) * N), parents(static_cast<size_t>(B) * N);
  for (int32_t b = 0; b < B; ++b) {
    for (int32_t r = 0; r <= N; ++r) {
      p.set_row(static_cast<size_t>(b) * (N + 1) + r, in.patterns[in.pattern(b, r, 0)]);
      q.set_row(static_cast<size_t>(b) * (N + 1) + r, in.patterns[in.pattern(b, r, 1)]);
    }
    for (int32_t n = 0; n < N; ++n) {
      parents[static_cast<size_t>(b) * N + n] = tree_parents[n];
      tokens[static_cast<size_t>(b) * N + n] = draw(in.patterns[in.pattern(b, tree_parents[n] + 1, 1)], in.rng);
    }
  }
  Buffer<int32_t> d_tokens(tokens), d_parents(parents);
  Buffer<VerifyRowParams> rows(in.row_params(N));
  GroupWorkspace workspace;  // kept across the launches, as a KernelStream keeps its own
  for (const LaunchVariant& variant :
       launch_variants("verify/tree", choose_verify_config(p.get(), q.get(), V).ctas, true)) {
    VerifyBuffers out(B, N, true);
    TreeVerifyParams params;
    params.p = p.get();
    params.q = q.get();
    params.tokens = d_tokens.get();
    params.parents = d_parents.get();
    params.rows = rows.get();
    params.out = out.outputs();
    params.path = out.path.get();
    params.batch = B;
    params.max_nodes = N;
    params.vocab = V;
    params.cluster_blocks = variant.blocks;
    params.row_exchange = variant.exchange;
    params.stage_rows = variant.stage_rows;
    CudaBenchCase c = bench_case(variant.name, V, B, N);
    RowSplit ran;
    time_launches([&] { ran = launch_tree_verify(params, nullptr, &workspace); }, o, flush, c);
    record_split(ran, c);
    const std::vector<int32_t> st = out.status.to_host(), path = out.path.to_host(),
                               accepted = out.num_accepted.to_host(), bonus = out.bonus.to_host();
    check_verify_status(st.data(), B);
    std::vector<int32_t> first_child(N + 1, -1);
    for (int32_t n = N - 1; n >= 0; --n) first_child[tree_parents[n] + 1] = n;
    // Per visited row with children: q for the proposals' normaliser, and p once a sibling is rejected
    // there; the final row: p for the bonus (a leaf) or nothing more (the residual's rows were read).
    double bytes = 0.0;
    for (int32_t b = 0; b < B; ++b) {
      bytes += 8.0 * N + sizeof(VerifyRowParams) + 4.0 * (N + 1) + 4.0 * N + 20.0;
      int32_t row = 0;
      for (int32_t j = 0; j < accepted[b]; ++j) {
        const int32_t node = path[static_cast<size_t>(b) * N + j];
        bytes += V4 + (node == first_child[row] ? 64.0 : V4);
        row = node + 1;
      }
      bytes += bonus[b] ? V4 : 2.0 * V4;
    }
    c.bytes = bytes;
    finish_case(c, report);
    report.cases.push_back(c);
  }
}

void bench_verify(const CudaBenchOptions& o, const Buffer<uint8_t>& flush, CudaBenchReport& report) {
  std::mt19937_64 rng(20260102);
  for (int32_t V : kVocabs) {
    const std::vector<std::vector<float>> patterns = distribution_patterns(V, rng);
    for (int32_t B : kBatches) {
      const VerifyBenchInputs in{V, B, patterns, rng};
      bench_chain_and_block(in, o, flush, report);
      bench_tree_verify(in, o, flush, report);
    }
  }
}

#endif  // SPECULA_HAS_CUDA

std::string json_string(const std::string& s) {
  std::ostringstream os;
  os << '"';
  for (char ch : s) {
    if (ch == '"' || ch == '\\') os << '\\';
    os << ch;
  }
  os << '"';
  return os.str();
}

}  // namespace

// Plain; a common serving configuration (top-k then top-p); top-p alone, whose radix select runs over the whole
// row, with each of the two top-p passes; and the full pipeline (penalties, temperature, min-p, top-k, top-p).
const std::vector<SamplerBenchSetting>& sampler_bench_settings() {
  static const std::vector<SamplerBenchSetting> settings = {
      {"sampler/plain", 0.0f, 0, 1.0f, 0.0f, false, false},
      {"sampler/t0.8_topk50_topp0.9", 0.8f, 50, 0.9f, 0.0f, false, false},
      {"sampler/t0.8_topp0.9/exact", 0.8f, 0, 0.9f, 0.0f, false, true},
      {"sampler/t0.8_topp0.9/float-first", 0.8f, 0, 0.9f, 0.0f, false, false},
      {"sampler/full", 0.8f, 50, 0.9f, 0.05f, true, false},
  };
  return settings;
}

CudaBenchReport run_cuda_bench(const CudaBenchOptions& o) {
  if (o.what != "sampler" && o.what != "verify")
    fail("bench ", o.what, " --device cuda: no CUDA benchmark (known: sampler, verify)");
  if (o.iterations < 1) fail_parameter("iterations", " must be >= 1, got ", o.iterations);
  require_cuda_device();
  CudaBenchReport report;
#if defined(SPECULA_HAS_CUDA)
  const DeviceInfo d = device_info();
  report.what = o.what;
  report.device = d.name;
  report.sm_count = d.sm_count;
  report.l2_bytes = d.l2_bytes;
  report.peak_gb_per_s = d.peak_gb_per_s;
  report.flush_l2 = o.flush_l2;
  report.copy_gb_per_s = measured_copy_gb_per_s();
  const Buffer<uint8_t> flush(o.flush_l2 ? 2 * static_cast<size_t>(std::max<int64_t>(d.l2_bytes, 1 << 20)) : 0);
  if (o.what == "sampler")
    bench_sampler(o, flush, report);
  else
    bench_verify(o, flush, report);
#endif
  return report;
}

void print_cuda_bench(const CudaBenchReport& r, std::ostream& os) {
  os << r.device << ": " << r.sm_count << " SMs, " << r.l2_bytes / (1 << 20) << " MiB L2, peak " << std::fixed
     << std::setprecision(0) << r.peak_gb_per_s << " GB/s, measured copy " << r.copy_gb_per_s << " GB/s"
     << (r.flush_l2 ? " (L2 flushed before each launch)" : "") << "\n\n"
     << std::left << std::setw(30) << "kernel" << std::right << std::setw(8) << "V" << std::setw(5) << "B"
     << std::setw(5) << "K/N" << std::setw(11) << "mean us" << std::setw(10) << "min us" << std::setw(11) << "MB/launch"
     << std::setw(9) << "GB/s" << std::setw(8) << "% peak" << std::setw(10) << "bound us" << std::setw(10) << "floor us"
     << std::setw(9) << "x floor" << std::setw(7) << "blocks" << std::setw(12) << "libtorch us"
     << "\n";
  for (const CudaBenchCase& c : r.cases)
    os << std::left << std::setw(30) << c.kernel << std::right << std::setw(8) << c.vocab << std::setw(5) << c.batch
       << std::setw(5) << c.width << std::setprecision(1) << std::setw(11) << c.mean_us << std::setw(10) << c.min_us
       << std::setprecision(2) << std::setw(11) << c.bytes / 1e6 << std::setprecision(0) << std::setw(9) << c.gb_per_s
       << std::setprecision(1) << std::setw(8) << 100.0 * c.fraction_of_peak << std::setw(10) << c.bound_us
       << std::setw(10) << c.floor_us << std::setw(9) << c.mean_us / c.floor_us << std::setw(7) << c.blocks_per_row
       << std::setw(12) << c.libtorch_us << "\n";
  os << "\nbytes: compulsory HBM traffic per launch (kernels/README.md cost model); bound us = bytes / peak;\n"
        "floor us = bytes / the measured copy rate; blocks: blocks per row (a cluster when > 1); libtorch us: the\n"
        "same work in LibTorch's CUDA operations (0: not measured)\n";
}

std::string cuda_bench_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown-host";
  return buf;
}

std::string cuda_bench_json(const CudaBenchReport& r) {
  std::ostringstream os;
  os << std::setprecision(10);
  os << "{\n  \"benchmark\": " << json_string(r.what)
     << ",\n  \"device\": \"cuda\",\n  \"gpu\": " << json_string(r.device) << ",\n  \"sm_count\": " << r.sm_count
     << ",\n  \"l2_bytes\": " << r.l2_bytes << ",\n  \"peak_gb_per_s\": " << r.peak_gb_per_s
     << ",\n  \"copy_gb_per_s\": " << r.copy_gb_per_s
     << ",\n  \"l2_flushed_before_each_launch\": " << (r.flush_l2 ? "true" : "false")
     << ",\n  \"hostname\": " << json_string(cuda_bench_host_name())
     << ",\n  \"libtorch_baseline\": " << json_string(r.libtorch_baseline)
     << ",\n  \"bytes_model\": \"compulsory HBM bytes per launch, kernels/README.md\",\n  \"cases\": [";
  for (size_t i = 0; i < r.cases.size(); ++i) {
    const CudaBenchCase& c = r.cases[i];
    os << (i ? "," : "") << "\n    {\"kernel\": " << json_string(c.kernel) << ", \"vocab_size\": " << c.vocab
       << ", \"batch\": " << c.batch << ", \"width\": " << c.width << ", \"iterations\": " << c.iterations
       << ", \"mean_us\": " << c.mean_us << ", \"min_us\": " << c.min_us << ", \"bytes\": " << c.bytes
       << ", \"gb_per_s\": " << c.gb_per_s << ", \"fraction_of_peak\": " << c.fraction_of_peak
       << ", \"bandwidth_bound_us\": " << c.bound_us << ", \"floor_us\": " << c.floor_us
       << ", \"times_floor\": " << c.mean_us / c.floor_us << ", \"blocks_per_row\": " << c.blocks_per_row
       << ", \"row_exchange\": " << json_string(c.row_exchange);
    if (c.libtorch_us > 0)
      os << ", \"libtorch_us\": " << c.libtorch_us << ", \"speedup_vs_libtorch\": " << c.libtorch_us / c.mean_us;
    os << "}";
  }
  os << "\n  ]\n}\n";
  return os.str();
}

}  // namespace specula
