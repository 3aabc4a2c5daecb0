// GPU parity tests (ctest label `gpu`): the CUDA kernels against the CPU reference. The executable exits
// with 77, which CTest reports as skipped (SKIP_RETURN_CODE), when no CUDA device can be used.
//
// Tolerances:
//  - Philox uniforms: bitwise. Integer rounds and one exact int -> double conversion, same source.
//  - Processed probabilities: max abs diff <= 1e-6. Masks, bias, penalties and temperature are the same
//    float operations (nvcc --fmad=false), and the filter decisions are exact, so the kept sets are
//    identical. What differs is the softmax: the kernel uses expf with a float64 normaliser summed in a
//    tree, the CPU exp in float64 summed in index order. expf is within 2 ulp (2.4e-7 relative) and the
//    normaliser within ~1e-7 relative, so |p - p_ref| <= ~4e-7 for p <= 1, inside 1e-6.
//  - Tokens: equal. The draw uses the same Philox uniform and the same inverse CDF over the kernel's own
//    probabilities (checked exactly against sample_categorical on them); against the reference
//    distribution the token can only differ if u * total falls within ~1e-6 of a CDF step, which these
//    fixed seeds do not hit.
#include <cstdio>

#include "kernels/cuda_device.h"

#if !defined(SPECULA_HAS_CUDA)
int main() {
  std::printf("skipped: %s\n", specula::cuda_unavailable_reason().c_str());
  return 77;
}
#else

#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "kept_workspace_check.h"
#include "kernel_sampler_cases.h"
#include "kernels/draft_children.h"
#include "kernels/emulated_kernels.h"
#include "kernels/kernel_stream.h"
#include "kernels/philox_fill.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/philox.h"
#include "law_values_case.h"
#include "pending_counts_case.h"
#include "sibling_draw_case.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/device/device_sampler.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(e));
}

// A device copy of a host vector (or `count` uninitialised elements), freed on scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    if (count_) check_cuda(cudaMalloc(reinterpret_cast<void**>(&ptr_), count_ * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (count_) check_cuda(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return count_ ? ptr_ : nullptr; }
  std::vector<T> to_host() const {
    std::vector<T> out(count_);
    if (count_) check_cuda(cudaMemcpy(out.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }
  void poison() {  // 0xff bytes: NaN floats, -1 ints
    if (count_) check_cuda(cudaMemset(ptr_, 0xff, count_ * sizeof(T)), "cudaMemset");
  }

 private:
  T* ptr_ = nullptr;
  size_t count_;
};

struct GpuRun {
  std::vector<float> probs;
  std::vector<int32_t> tokens, status;
};

// A batch's arrays on the device: its logits, its rows' parameters (`row_params`, a row each), the sampler inputs of
// `inputs`, and `probs_rows` rows of probabilities; outputs poisoned (NaN floats, -1 ints).
struct DeviceBatch {
  DeviceArray<float> logits, bias, probs;
  DeviceArray<SamplerRowParams> rows;
  DeviceArray<uint32_t> allowed, banned, prompt;
  DeviceArray<int32_t> counts, tokens, status;
  int32_t batch, vocab;
  DeviceBatch(const std::vector<float>& host_logits, const SamplerBatch& inputs,
              const std::vector<SamplerRowParams>& row_params, size_t probs_rows)
      : logits(host_logits),
        bias(inputs.logit_bias),
        probs(probs_rows * static_cast<size_t>(inputs.vocab)),
        rows(row_params),
        allowed(inputs.allowed),
        banned(inputs.banned),
        prompt(inputs.prompt),
        counts(inputs.output_counts),
        tokens(row_params.size()),
        status(row_params.size()),
        batch(static_cast<int32_t>(row_params.size())),
        vocab(inputs.vocab) {
    probs.poison();
    tokens.poison();
    status.poison();
  }
  SamplerKernelParams params() const {
    SamplerKernelParams p;
    p.logits = logits.get();
    p.rows = rows.get();
    p.allowed_bitmap = allowed.get();
    p.banned_bitmap = banned.get();
    p.prompt_bitmap = prompt.get();
    p.output_counts = counts.get();
    p.logit_bias = bias.get();
    p.probs = probs.get();
    p.tokens = tokens.get();
    p.status = status.get();
    p.batch = batch;
    p.vocab = vocab;
    return p;
  }
};

// Runs the fused kernel on a case with poisoned outputs.
// `kept`: the global-memory exchange's workspace kept across launches (null: one for this launch).
GpuRun run_on_gpu(const testing::SamplerCase& c, TopPPass top_p_pass = TopPPass::float_first,
                  int32_t cluster_blocks = 0, RowExchange exchange = RowExchange::automatic,
                  GroupWorkspace* kept = nullptr) {
  const SamplerBatch batch(c.vocab, c.rows());
  const DeviceBatch d(c.logits, batch, batch.rows, static_cast<size_t>(c.batch()));
  SamplerKernelParams p = d.params();
  p.top_p_pass = top_p_pass;
  p.cluster_blocks = cluster_blocks;
  p.row_exchange = exchange;
  const RowSplit ran = launch_fused_sampler(p, nullptr, kept);
  // A split through global memory asked for runs as asked on any GPU the tests run on (cooperative launches, memory
  // pools), not silently as one block per row.
  if (exchange == RowExchange::global_memory && cluster_blocks > 1) {
    CHECK(ran.exchange == RowExchange::global_memory);
    CHECK(ran.blocks == cluster_blocks);
  }
  check_cuda(cudaDeviceSynchronize(), "fused sampler");
  return {d.probs.to_host(), d.tokens.to_host(), d.status.to_host()};
}

// Every row of a GPU run against the CPU pipeline (testing::compare_row, tolerance 1e-6 derived above).
void check_against_pipeline(const testing::SamplerCase& c, int32_t cluster_blocks = 0,
                            RowExchange exchange = RowExchange::automatic, GroupWorkspace* kept = nullptr) {
  const GpuRun gpu = run_on_gpu(c, TopPPass::float_first, cluster_blocks, exchange, kept);
  for (int32_t r = 0; r < c.batch(); ++r) {
    const testing::RowComparison cmp = testing::compare_row(c, r, gpu.probs.data() + static_cast<size_t>(r) * c.vocab,
                                                            gpu.tokens[r], gpu.status[r], 1e-6);
    INFO("vocab " << c.vocab << ", cluster_blocks " << cluster_blocks << ", " << row_exchange_name(exchange) << ": "
                  << cmp.message);
    CHECK(cmp.ok);
  }
}

}  // namespace

TEST_CASE("Philox uniforms are bit-identical on CPU and GPU", "[gpu][philox]") {
  const int64_t n = 100000;
  for (const auto& [seed, stream, offset] : {std::tuple<uint64_t, uint64_t, uint64_t>{0, 0, 0},
                                             {42, philox_stream(3, RandomRole::accept), 1000},
                                             {~0ull, ~0ull, (1ull << 32) - 5000}}) {
    DeviceArray<double> out(n);
    launch_philox_fill(PhiloxFillParams{seed, stream, offset, n, out.get()});
    check_cuda(cudaDeviceSynchronize(), "philox fill");
    const std::vector<double> gpu = out.to_host();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double cpu = philox_uniform(seed, stream, offset + static_cast<uint64_t>(i));
      mismatches += std::memcmp(&cpu, &gpu[static_cast<size_t>(i)], sizeof cpu) != 0;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("the fused sampler kernel matches the CPU pipeline on random rows", "[gpu][sampler]") {
  // Both dispatch widths (V % 4), both block sizes (V >= 16384), and a Llama-3-sized vocabulary.
  for (const auto& [vocab, batch] :
       {std::pair<int32_t, int32_t>{7, 16}, {1000, 48}, {1003, 48}, {32000, 24}, {32003, 8}, {128256, 6}}) {
    const testing::SamplerCase c = testing::random_sampler_case(0x5eed + vocab, vocab, batch);
    check_against_pipeline(c);
  }
}

namespace {

// The GPU's kept sets, tokens and statuses against the CPU backend of the same row algorithm.
void check_decisions_against_host(uint64_t seed, int32_t cluster_blocks,
                                  RowExchange exchange = RowExchange::automatic) {
  const testing::SamplerCase c = testing::random_sampler_case(seed, 4096, 32);
  const GpuRun gpu = run_on_gpu(c, TopPPass::float_first, cluster_blocks, exchange);
  const SamplerBatch batch(c.vocab, c.rows());
  std::vector<float> probs(c.logits.size());
  std::vector<int32_t> tokens(c.batch()), status(c.batch());
  run_fused_sampler_host(batch.host_params(c.logits.data(), probs.data(), tokens.data(), status.data()));
  // Same kept sets. Below 1e-30 the two expf implementations may round a denormal to 0 differently.
  size_t mismatches = 0;
  for (size_t i = 0; i < probs.size(); ++i)
    mismatches += (probs[i] > 0.0f) != (gpu.probs[i] > 0.0f) && std::max(probs[i], gpu.probs[i]) > 1e-30f;
  CHECK(mismatches == 0);
  CHECK(tokens == gpu.tokens);
  CHECK(status == gpu.status);
}

}  // namespace

TEST_CASE("the kernel takes the same decisions as its CPU backend", "[gpu][sampler][sanitize]") {
  check_decisions_against_host(99, 0);
}

TEST_CASE("the fused sampler split over a thread-block cluster matches the CPU pipeline", "[gpu][sampler][cluster]") {
  // One block per row and clusters of 2, 3 and 8 at every vector width; slices of 1 to 40960 tokens (the most a
  // block keeps), and empty ones (V 7 over 8 blocks). A GPU without clusters runs one block per row for all of them.
  for (int32_t blocks : {1, 2, 3, 4, 8})
    for (const auto& [vocab, batch] :
         {std::pair<int32_t, int32_t>{7, 16}, {1003, 24}, {32000, 24}, {128256, 6}, {128257, 3}}) {
      if (blocks > 1 && cluster_slice_span(vocab, blocks, 1) > kMaxSamplerSliceTokens) continue;
      const testing::SamplerCase c = testing::random_sampler_case(0xc105 + vocab + blocks, vocab, batch);
      check_against_pipeline(c, blocks);
    }
  // A cluster whose slices would not fit a block's shared memory is refused before the launch.
  const testing::SamplerCase big = testing::random_sampler_case(0xc106, 128256, 1);
  CHECK_THROWS_WITH(run_on_gpu(big, TopPPass::float_first, 3), Catch::Contains("slices of more than"));
}

TEST_CASE("the fused sampler split over blocks exchanging through global memory matches the CPU pipeline",
          "[gpu][sampler][cluster][sanitize]") {
  // Groups of 2, 3 and 8 blocks: slices of one token to 126, empty ones (V 7 over 8 blocks).
  for (int32_t blocks : {2, 3, 8})
    for (const auto& [vocab, batch] : {std::pair<int32_t, int32_t>{7, 16}, {1003, 24}}) {
      const testing::SamplerCase c = testing::random_sampler_case(0x910b + vocab + blocks, vocab, batch);
      check_against_pipeline(c, blocks, RowExchange::global_memory);
    }
  check_decisions_against_host(97, 4, RowExchange::global_memory);
}

TEST_CASE("a kept workspace serves launches that split rows over 3, 8 and 2 blocks, and each leaves it zero",
          "[gpu][sampler][cluster][sanitize]") {
  // The groups' layouts differ from one launch to the next, so a word left set would lie in another launch's
  // counters or histograms; a second pass through the same launches allocates nothing.
  GroupWorkspace kept;
  const auto pass = [&] {
    for (int32_t blocks : {3, 8, 2})
      for (const auto& [vocab, batch] : {std::pair<int32_t, int32_t>{1003, 24}, {32000, 8}}) {
        INFO(blocks << " blocks, V " << vocab);
        check_against_pipeline(testing::random_sampler_case(0x910e + vocab + blocks, vocab, batch), blocks,
                               RowExchange::global_memory, &kept);
        CHECK(testing::kept_words_left_set(kept) == 0);
      }
  };
  pass();
  const uint64_t allocations = kept.allocations();
  CHECK(allocations >= 1);
  pass();
  CHECK(kept.allocations() == allocations);
}

TEST_CASE("blocks exchanging through global memory at large vocabularies, more rows than resident groups",
          "[gpu][sampler][cluster]") {
  // V 32000 and 128256 over 4 and 8 blocks (fewer would leave slices of more than 40960 tokens), and 300 rows of
  // 128256 over 8 blocks: more rows than the device holds groups at once, so each group takes rows in turn.
  for (int32_t blocks : {4, 8})
    for (const auto& [vocab, batch] : {std::pair<int32_t, int32_t>{32000, 24}, {128256, 6}})
      check_against_pipeline(testing::random_sampler_case(0x910c + vocab + blocks, vocab, batch), blocks,
                             RowExchange::global_memory);
  check_against_pipeline(testing::random_sampler_case(0x910d, 128256, 300), 8, RowExchange::global_memory);
}

// Rows through maps (SamplerKernelParams::logits_rows / probs_rows, how a draft's tree depth is drawn in one launch):
// row r reads logits row pick[r] and writes probs row place[r] of a larger array, and gives, bit for bit, the dense
// launch's row pick[r] with the same parameters, history and key; the rows no map names stay poisoned.
TEST_CASE("the fused sampler reads and writes rows through maps as the dense launch does on the GPU",
          "[gpu][sampler][cluster][sanitize]") {
  const std::vector<int32_t> pick = {4, 0, 0, 5, 2, 2, 2, 1, 3};
  const std::vector<int32_t> place = {7, 2, 9, 0, 4, 11, 1, 5, 8};  // distinct rows of 12
  for (int32_t vocab : {1003, 32000}) {
    const testing::SamplerCase c = testing::random_sampler_case(0x3aa + vocab, vocab, 6);
    testing::SamplerCase mapped = c;  // row r: case row pick[r]'s parameters, history and key
    mapped.params.clear();
    mapped.histories.clear();
    mapped.keys.clear();
    for (int32_t r : pick) {
      mapped.params.push_back(c.params[r]);
      mapped.histories.push_back(c.histories[r]);
      mapped.keys.push_back(c.keys[r]);
    }
    const SamplerBatch batch(vocab, mapped.rows());
    const size_t R = pick.size(), V = static_cast<size_t>(vocab);
    for (const auto& [blocks, exchange] : {std::pair<int32_t, RowExchange>{1, RowExchange::automatic},
                                           {3, RowExchange::automatic},
                                           {3, RowExchange::global_memory}}) {
      const GpuRun dense = run_on_gpu(c, TopPPass::float_first, blocks, exchange);
      for (bool through_inputs : {false, true}) {
        // Every row its own copy of its inputs, its logits through logits_rows; or the dense inputs through input_rows.
        const SamplerBatch dense_batch(vocab, c.rows());
        std::vector<SamplerRowParams> picked_params;
        for (int32_t r : pick) picked_params.push_back(dense_batch.rows[static_cast<size_t>(r)]);
        const DeviceBatch d(c.logits, through_inputs ? dense_batch : batch, through_inputs ? picked_params : batch.rows,
                            12);
        const DeviceArray<int32_t> row_map(pick), probs_rows(place);
        SamplerKernelParams p = d.params();
        p.cluster_blocks = blocks;
        p.row_exchange = exchange;
        (through_inputs ? p.input_rows : p.logits_rows) = row_map.get();
        p.probs_rows = probs_rows.get();
        launch_fused_sampler(p);
        check_cuda(cudaDeviceSynchronize(), "fused sampler through row maps");
        const std::vector<float> out = d.probs.to_host();
        const std::vector<int32_t> out_tokens = d.tokens.to_host(), out_status = d.status.to_host();
        for (size_t r = 0; r < R; ++r) {
          const size_t from = static_cast<size_t>(pick[r]);
          INFO("V " << vocab << ", " << blocks << " blocks, " << row_exchange_name(exchange)
                    << (through_inputs ? ", through input_rows" : ", through logits_rows") << ": row " << r);
          CHECK(out_tokens[r] == dense.tokens[from]);
          CHECK(out_status[r] == dense.status[from]);
          CHECK(std::memcmp(out.data() + place[r] * V, dense.probs.data() + from * V, V * sizeof(float)) == 0);
        }
        for (size_t row : {3u, 6u, 10u}) CHECK(std::isnan(out[row * V]));
      }
    }
  }
}

TEST_CASE("a cluster's kernel takes the same decisions as the CPU backend", "[gpu][sampler][cluster][sanitize]") {
  check_decisions_against_host(98, 4);
}

TEST_CASE("top-p at a step of the cumulative mass keeps exactly the fixed-point nucleus on the GPU",
          "[gpu][sampler][sanitize]") {
  // CUDA's expf (2 ulp) feeds the float-first pass here: the guard band must still send every knife-edge
  // row to the exact pass (test_kernels_host.cpp shows these rows need it). Both passes; 1000 tokens, and
  // a Llama-3 row.
  for (const auto& [vocab, batch] : {std::pair<int32_t, int32_t>{1000, 300}, {128256, 4}}) {
    const testing::SamplerCase c = testing::top_p_boundary_case(31 + vocab, vocab, batch);
    for (TopPPass pass : {TopPPass::float_first, TopPPass::exact})
      for (int32_t blocks : {0, 1, 4}) {  // the dispatch's choice (8 blocks at V 128256), one block, a cluster
        const GpuRun gpu = run_on_gpu(c, pass, blocks);
        INFO("V " << vocab << (pass == TopPPass::exact ? ", exact pass" : ", float-first pass") << ", cluster_blocks "
                  << blocks);
        CHECK(testing::count_top_p_boundary_mismatches(c, gpu.probs.data()) == 0);
      }
  }
}

TEST_CASE("the float-first and exact top-p passes give identical rows on the GPU", "[gpu][sampler]") {
  const testing::SamplerCase c = testing::random_sampler_case(0x70b, 32000, 48);
  const GpuRun first = run_on_gpu(c, TopPPass::float_first), exact = run_on_gpu(c, TopPPass::exact);
  CHECK(first.probs == exact.probs);
  CHECK(first.tokens == exact.tokens);
}

TEST_CASE("every output element is written (outputs poisoned with NaN / -1 first)", "[gpu][sampler][sanitize]") {
  const testing::SamplerCase c = testing::random_sampler_case(7, 5003, 40);
  const GpuRun gpu = run_on_gpu(c);
  for (int32_t r = 0; r < c.batch(); ++r) {
    CHECK(gpu.status[r] == 0);
    CHECK(gpu.tokens[r] >= 0);
    CHECK(gpu.tokens[r] < c.vocab);
    double total = 0.0;
    bool finite = true;
    for (int32_t i = 0; i < c.vocab; ++i) {
      const float p = gpu.probs[static_cast<size_t>(r) * c.vocab + i];
      finite = finite && std::isfinite(p) && p >= 0.0f && p <= 1.0f;
      total += p;
    }
    CHECK(finite);
    CHECK(std::fabs(total - 1.0) < 1e-5);
    CHECK(gpu.probs[static_cast<size_t>(r) * c.vocab + gpu.tokens[r]] > 0.0f);
  }
}

TEST_CASE("failed rows report a status instead of crashing", "[gpu][sampler][sanitize]") {
  testing::SamplerCase c = testing::random_sampler_case(3, 256, 3);
  c.logits[17] = std::nanf("");
  c.logits[256 + 3] = std::numeric_limits<float>::infinity();
  const GpuRun gpu = run_on_gpu(c);
  CHECK(gpu.status[0] == static_cast<int32_t>(SamplerRowStatus::nan_logit));
  CHECK(gpu.status[1] == static_cast<int32_t>(SamplerRowStatus::pos_inf_logit));
  CHECK(gpu.status[2] == 0);
  CHECK(gpu.tokens[0] == -1);
  CHECK_THROWS_WITH(check_sampler_status(gpu.status.data(), 3), Catch::Contains("row 0"));
}

TEST_CASE("small batches at every dispatch (block 256/512, vec 1/4) match the CPU pipeline",
          "[gpu][sampler][sanitize]") {
  for (int32_t vocab : {1000, 1003, 32000, 32003}) {
    const testing::SamplerCase c = testing::random_sampler_case(0xd15 + vocab, vocab, 4);
    check_against_pipeline(c);
  }
}

// The fused sampler's draws have the law of the CPU pipeline's processed distribution (tests/TESTING.md: fixed
// seed, G-test at alpha = 1e-6). 200k rows share one row of logits and parameters and differ only in their
// Philox stream, so their tokens are independent draws. The power check: the same counts must fail against
// the law of a pipeline that drops top-p (a kernel that skipped the filter would pass that one instead).
TEST_CASE("the fused sampler's tokens have the processed distribution's law (G-test)", "[gpu][sampler][law]") {
  constexpr int32_t kRows = 200000, V = 12;
  const std::vector<float> logits = {1.2f, -0.3f, 0.8f, 2.0f, -1.5f, 0.0f, 0.4f, 1.9f, -0.7f, 0.9f, 0.1f, -2.2f};
  SamplingParams s;
  s.temperature = 0.8f;
  s.top_k = 8;
  s.top_p = 0.9f;
  s.min_p = 0.02f;
  s.repetition_penalty = 1.3f;
  TokenHistory h;
  h.prompt = {3, 7};
  testing::SamplerCase c;
  c.vocab = V;
  for (int32_t r = 0; r < kRows; ++r) {
    c.params.push_back(s);
    c.histories.push_back(h);
    c.keys.push_back(RandomKey{0x5a3e11, philox_stream(static_cast<uint64_t>(r), RandomRole::sample), 9});
    c.logits.insert(c.logits.end(), logits.begin(), logits.end());
  }
  // One block per row, a cluster of 3 blocks whose slices hold 4 tokens each, and 3 blocks exchanging through
  // global memory.
  const auto [blocks, exchange] =
      GENERATE(std::make_pair(1, RowExchange::automatic), std::make_pair(3, RowExchange::automatic),
               std::make_pair(3, RowExchange::global_memory));
  const GpuRun gpu = run_on_gpu(c, TopPPass::float_first, blocks, exchange);
  INFO("cluster_blocks " << blocks << ", " << row_exchange_name(exchange));
  std::vector<int64_t> counts(V, 0);
  for (int32_t r = 0; r < kRows; ++r) {
    REQUIRE(gpu.status[r] == 0);
    ++counts[static_cast<size_t>(gpu.tokens[r])];
  }
  const auto law_of = [&](const SamplingParams& params) {
    const std::vector<float> probs = SamplerPipeline(params, V).process(logits, h);
    double total = 0.0;
    for (float x : probs) total += x;
    std::vector<double> law;
    for (float x : probs) law.push_back(static_cast<double>(x) / total);
    return law;
  };
  const stats::GofResult gof = stats::g_test(counts, law_of(s));
  INFO(gof.detail);
  CHECK(gof.passed(stats::kAlpha));
  SamplingParams no_top_p = s;
  no_top_p.top_p = 1.0f;
  const stats::GofResult wrong = stats::g_test(counts, law_of(no_top_p));
  INFO("against the law without top-p: " << wrong.detail);
  CHECK_FALSE(wrong.passed(stats::kAlpha));
}

TEST_CASE("RowSampler on cuda draws, from one uploaded row, what the CPU draws", "[gpu][sampler][sanitize]") {
  const testing::RowSamplerCheck c = testing::check_row_sampler(Device::cuda);
  CHECK(c.drawn == c.expected);
  CHECK(c.worst_probability_difference < 1e-6);
}

// The ranked-children kernel against its emulation (tested against draw_children's order on the host,
// test_draft_children.cpp): rows of few values (a subnormal among them), so that most children are ties broken by id.
namespace {
void check_ranked_children_on_gpu(int32_t vocab) {
  const std::vector<float> values = {0.0f, -0.0f, 0.25f, 0.125f, 0.125f, 1e-40f, 0.5f, 3e-8f, 1e-30f};
  for (int32_t count : {1, 4, 16}) {
    const int32_t batch = 6;
    std::mt19937_64 rng(static_cast<uint64_t>(vocab) * 31 + static_cast<uint64_t>(count));
    std::vector<float> rows(static_cast<size_t>(batch) * static_cast<size_t>(vocab));
    for (float& x : rows) x = values[rng() % values.size()];
    std::fill(rows.begin(), rows.begin() + vocab, 0.0625f);  // one value alone: every child a tie
    const DeviceArray<float> d_rows(rows);
    DeviceArray<int32_t> d_tokens(static_cast<size_t>(batch) * static_cast<size_t>(count));
    d_tokens.poison();
    RankedChildrenParams p;
    p.probs = d_rows.get();
    p.tokens = d_tokens.get();
    p.batch = batch;
    p.vocab = vocab;
    p.count = count;
    launch_ranked_children(p);
    check_cuda(cudaDeviceSynchronize(), "ranked children");
    std::vector<int32_t> expected(static_cast<size_t>(batch) * static_cast<size_t>(count), -1);
    RankedChildrenParams host = p;
    host.probs = rows.data();
    host.tokens = expected.data();
    emulate_ranked_children(host, EmulationOptions{32});
    INFO("V = " << vocab << ", count " << count << ", vec " << ranked_children_vec(p));
    CHECK(d_tokens.to_host() == expected);
  }
}
}  // namespace

// V at the 4-wide and the scalar dispatch (small, for compute-sanitizer), and at a 128K vocabulary.
TEST_CASE("ranked children on the GPU are the emulation's, ties by id", "[gpu][ranked][sanitize]") {
  check_ranked_children_on_gpu(64);
  check_ranked_children_on_gpu(37);
}

TEST_CASE("ranked children on the GPU at a 128K vocabulary", "[gpu][ranked]") { check_ranked_children_on_gpu(128256); }

// Siblings drawn without replacement on the GPU against the emulation (tested against draw_children on the host):
// dyadic laws, whose float64 sums are exact in any order, with fewer positive tokens than children in most rows; V
// within one tile of the inverse-CDF scan and over several (scalar and 4-wide); then as a depth of a fixed-shape tree.
TEST_CASE("siblings drawn without replacement on the GPU are the emulation's", "[gpu][siblings][sanitize]") {
  for (int32_t vocab : {37, 64, 4099, 8192})
    for (int32_t count : {1, 3, 5}) {
      const testing::SiblingDrawCase c =
          testing::sibling_draw_case(static_cast<uint64_t>(vocab * 100 + count), vocab, count);
      const DeviceArray<float> d_laws(c.laws);
      const DeviceArray<int32_t> d_rows(c.rows), d_first(c.first);
      const DeviceArray<double> d_uniforms(c.uniforms);
      DeviceArray<int32_t> d_tokens(c.uniforms.size()), d_spent(c.rows.size());
      d_tokens.poison();
      d_spent.poison();
      const SiblingDrawParams p =
          c.params(d_laws.get(), d_rows.get(), d_first.get(), d_uniforms.get(), d_tokens.get(), d_spent.get());
      launch_sibling_draws(p);
      check_cuda(cudaDeviceSynchronize(), "sibling draws");
      std::vector<int32_t> expected(c.uniforms.size(), -7), spent(c.rows.size(), -7);
      emulate_sibling_draws(
          c.params(c.laws.data(), c.rows.data(), c.first.data(), c.uniforms.data(), expected.data(), spent.data()),
          EmulationOptions{32});
      INFO("V = " << vocab << ", count " << count << ", vec " << sibling_draw_vec(p));
      CHECK(d_tokens.to_host() == expected);
      CHECK(d_spent.to_host() == spent);
      // A depth of a fixed-shape tree: each sequence's uniforms from where its depths before stopped (2, 0 and 5 of
      // them), the rows whose node was never drawn (-1) drawing nothing, each sequence's count handed on.
      const int32_t U = 4 * count + 5;
      std::vector<double> per_sequence(3 * static_cast<size_t>(U));
      for (size_t u = 0; u < per_sequence.size(); ++u) per_sequence[u] = c.uniforms[u % c.uniforms.size()];
      const std::vector<int32_t> before = {2, 0, 5}, row_tokens = {4, -1, 0, 9, -1, 1, -1, 3};
      const DeviceArray<double> d_per_sequence(per_sequence);
      const DeviceArray<int32_t> d_before(before), d_row_tokens(row_tokens);
      DeviceArray<int32_t> d_after(3);
      d_tokens.poison();
      d_spent.poison();
      d_after.poison();
      SiblingDrawParams q = p;
      q.uniforms = d_per_sequence.get();
      q.uniforms_per_sequence = U;
      q.spent_before = d_before.get();
      q.spent_after = d_after.get();
      q.row_tokens = d_row_tokens.get();
      launch_sibling_draws(q);
      check_cuda(cudaDeviceSynchronize(), "fixed-shape sibling draws");
      std::vector<int32_t> after(3, -7);
      SiblingDrawParams e =
          c.params(c.laws.data(), c.rows.data(), c.first.data(), per_sequence.data(), expected.data(), spent.data());
      e.uniforms_per_sequence = U;
      e.spent_before = before.data();
      e.spent_after = after.data();
      e.row_tokens = row_tokens.data();
      emulate_sibling_draws(e, EmulationOptions{32});
      CHECK(d_tokens.to_host() == expected);
      CHECK(d_spent.to_host() == spent);
      CHECK(d_after.to_host() == after);
    }
}

// Pending ids' counts added on the GPU with atomics are the host's (integer sums: any order gives the same), many
// entries colliding on one count, failed draws (-1) adding nothing.
TEST_CASE("pending counts on the GPU are the host's", "[gpu][penalties][sanitize]") {
  for (const auto& [rows, vocab, n] : {std::tuple{1, 1, 1}, std::tuple{3, 37, 50}, std::tuple{16, 128256, 5000}}) {
    const testing::PendingCountsCase c = testing::pending_counts_case(static_cast<uint64_t>(vocab + n), rows, vocab, n);
    DeviceArray<int32_t> d_counts(c.counts);
    const DeviceArray<int32_t> d_ids(c.ids), d_entries(c.entries);
    launch_pending_counts(c.params(d_counts.get(), d_ids.get(), d_entries.get()));
    check_cuda(cudaDeviceSynchronize(), "pending counts");
    std::vector<int32_t> expected = c.counts;
    add_pending_counts_host(c.params(expected.data(), c.ids.data(), c.entries.data()));
    INFO(rows << " rows, V = " << vocab << ", " << n << " entries");
    CHECK(d_counts.to_host() == expected);
  }
}

// Law values gathered on the GPU are the host's (a float read, moved bit for bit), failed draws' -1 among them.
TEST_CASE("law values on the GPU are the host's", "[gpu][sanitize]") {
  for (const auto& [rows, vocab, n] : {std::tuple{1, 1, 1}, std::tuple{5, 37, 50}, std::tuple{8, 128256, 5000}}) {
    const testing::LawValuesCase c = testing::law_values_case(static_cast<uint64_t>(vocab + n), rows, vocab, n);
    const DeviceArray<float> d_laws(c.laws);
    const DeviceArray<int32_t> d_ids(c.ids);
    const DeviceArray<int64_t> d_entries(c.entries);
    DeviceArray<float> d_values(static_cast<size_t>(n));
    launch_law_values(c.params(d_laws.get(), d_ids.get(), d_entries.get(), d_values.get()));
    check_cuda(cudaDeviceSynchronize(), "law values");
    std::vector<float> expected(static_cast<size_t>(n));
    read_law_values_host(c.params(c.laws.data(), c.ids.data(), c.entries.data(), expected.data()));
    INFO(rows << " rows, V = " << vocab << ", " << n << " entries");
    CHECK(d_values.to_host() == expected);
  }
}

// The staging guard on a GPU: a staging slot written again right after an upload from it was enqueued, behind
// enough queued work that the copy has not started, drains the stream first, so the upload lands with its own data
// (without the drain the copy would read the second values). Every buffer is sized first: a growth would drain too.
TEST_CASE("a staging slot rewritten while its upload is queued keeps the upload's data", "[gpu][stream]") {
  const auto s = make_kernel_stream(Device::cuda);
  const size_t n = size_t{1} << 22, busy = size_t{1} << 28;  // 16 MiB of ids; 256 MiB copied again and again
  s->host_array<int32_t>(0, n);
  s->device_array<int32_t>(0, n);
  int32_t* kept = s->device_array<int32_t>(1, n);
  int32_t* back = s->host_array<int32_t>(2, n);
  char* scratch_a = s->device_array<char>(3, busy);
  char* scratch_b = s->device_array<char>(4, busy);
  s->synchronize();
  for (int i = 0; i < 64; ++i)  // tens of milliseconds of copies ahead of the upload
    s->copy_within_device(i % 2 ? scratch_a : scratch_b, busy, i % 2 ? scratch_b : scratch_a, busy, busy, 1);
  const std::vector<int32_t> first(n, 1), second(n, 2);
  const int32_t* a = s->upload(0, first);
  s->copy_within_device(kept, n * sizeof(int32_t), a, n * sizeof(int32_t), n * sizeof(int32_t), 1);
  CHECK(s->staging_waits() == 0);
  s->upload(0, second);  // host slot 0 again, its copy still queued
  CHECK(s->staging_waits() == 1);
  s->to_host(back, kept, n * sizeof(int32_t));
  s->synchronize();
  CHECK(std::count(back, back + n, 1) == static_cast<std::ptrdiff_t>(n));
}

int main(int argc, char** argv) {
  if (cuda_device_count_or_zero() == 0) {
    std::printf("skipped: no CUDA device: %s\n", cuda_unavailable_reason().c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
#endif
