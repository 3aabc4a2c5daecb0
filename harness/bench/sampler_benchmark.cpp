// The cases of `specula bench sampler`. The only translation unit of the harness that includes LibTorch.
#include "harness/bench/sampler_benchmark.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>

#include "harness/bench/bench_workload.h"
#include "harness/bench/benchmark_cases.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula::bench {

const char* const kSamplerBenchMethods[5] = {"specula", "torch_ops", "streaming_floor", "torch_softmax", "read"};

namespace {

constexpr int32_t kVocabSizes[] = {32000, 128256};  // Llama 2, Llama 3
constexpr int32_t kBatchSizes[] = {1, 64};
constexpr uint64_t kSeed = 0x5eec01a;
constexpr int32_t kAgreementRows = 4;

std::string workload_description() {
  std::ostringstream os;
  os << "logits ~ N(0, " << kLogitSigma << "^2) via Box-Muller on Philox4x32-10 (seed " << kSeed << "); per row "
     << kPromptTokens << " prompt tokens (half from the row's " << kHistoryPool
     << " most likely tokens, half uniform) and " << kOutputTokens
     << " output tokens drawn with repeats from the row's " << kHistoryPool << " most likely; "
     << all_stages_description() << "; then one token drawn per row";
  return os.str();
}

// ---- Inputs ------------------------------------------------------------------------------------------

// Everything one shape's cases read. Built once per shape, outside the timed loops.
struct ShapeInputs {
  int32_t vocab_size = 0;
  int32_t batch = 0;
  SamplingParams params;
  std::vector<float> logits;  // [B, V]
  std::vector<TokenHistory> histories;
  std::unique_ptr<SamplerPipeline> pipeline;  // shared by all rows: same parameters
  std::vector<const SamplerPipeline*> row_pipelines;
  std::vector<const TokenHistory*> row_histories;

  // The same inputs as LibTorch sees them.
  torch::Tensor logits_t;     // [B, V] float, a view of `logits`
  torch::Tensor history_ids;  // [B, P + O] int64: prompt ++ output (repetition penalty)
  torch::Tensor output_ids;   // [B, O] int64 (frequency and presence penalties)
  torch::Tensor banned_ids;   // [n_banned] int64
  torch::Tensor bias_ids;     // [n_bias] int64
  torch::Tensor bias_values;  // [1, n_bias] float

  size_t bytes() const { return logits.size() * sizeof(float); }
};

std::shared_ptr<ShapeInputs> make_inputs(int32_t vocab_size, int32_t batch) {
  auto in = std::make_shared<ShapeInputs>();
  in->vocab_size = vocab_size;
  in->batch = batch;
  in->params = all_stages_params();
  in->logits.resize(static_cast<size_t>(batch) * vocab_size);
  // Box-Muller: one Philox block gives two uniforms, hence two Gaussians. Rows of a larger batch extend
  // those of a smaller one (stream = row), so B = 1 and B = 64 share row 0.
  for (int32_t r = 0; r < batch; ++r)
    gaussian_row(kSeed, philox_stream(static_cast<uint64_t>(r), RandomRole::aux), kLogitSigma, vocab_size,
                 in->logits.data() + static_cast<size_t>(r) * vocab_size);
  // Histories: any stream but the logits'.
  in->histories.resize(batch);
  for (int32_t r = 0; r < batch; ++r)
    in->histories[r] = likely_history(in->logits.data() + static_cast<size_t>(r) * vocab_size, vocab_size, kSeed,
                                      philox_stream(static_cast<uint64_t>(r), RandomRole::tree));
  in->pipeline = std::make_unique<SamplerPipeline>(in->params, vocab_size);
  in->row_pipelines.assign(batch, in->pipeline.get());
  for (const TokenHistory& h : in->histories) in->row_histories.push_back(&h);

  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  in->logits_t = torch::from_blob(in->logits.data(), {batch, vocab_size}, torch::kFloat);
  in->history_ids = torch::empty({batch, kPromptTokens + kOutputTokens}, i64);
  in->output_ids = torch::empty({batch, kOutputTokens}, i64);
  auto hist = in->history_ids.accessor<int64_t, 2>();
  auto out = in->output_ids.accessor<int64_t, 2>();
  for (int32_t r = 0; r < batch; ++r) {
    const TokenHistory& h = in->histories[r];
    for (int32_t j = 0; j < kPromptTokens; ++j) hist[r][j] = h.prompt[j];
    for (int32_t j = 0; j < kOutputTokens; ++j) hist[r][kPromptTokens + j] = out[r][j] = h.output[j];
  }
  in->banned_ids =
      torch::tensor(std::vector<int64_t>(in->params.banned_tokens.begin(), in->params.banned_tokens.end()));
  std::vector<int64_t> bias_ids;
  std::vector<float> bias_values;
  for (const auto& [t, bias] : in->params.logit_bias) {
    bias_ids.push_back(t);
    bias_values.push_back(bias);
  }
  in->bias_ids = torch::tensor(bias_ids);
  in->bias_values = torch::tensor(bias_values).unsqueeze(0);
  return in;
}

// ---- (b) The pipeline in plain LibTorch ops ----------------------------------------------------------

// The same stages as SamplerPipeline, written the way LibTorch / Hugging Face / vLLM users write them:
// whole-batch ops, gather/scatter for the penalties, softmax for min-p (vLLM), topk for top-k and a sort
// with a cumulative softmax for top-p (Hugging Face's TopKLogitsWarper / TopPLogitsWarper). Returns the
// processed distribution [B, V].
torch::Tensor torch_process(const ShapeInputs& in) {
  const SamplingParams& s = in.params;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  torch::Tensor logits = in.logits_t.clone();
  const int64_t batch = logits.size(0), vocab = logits.size(1);

  // Step 1: masks, then logit bias.
  logits.index_fill_(1, in.banned_ids, neg_inf);
  logits.index_add_(1, in.bias_ids, in.bias_values.expand({batch, -1}));

  // Step 2: repetition penalty over prompt ∪ output. A repeated token is gathered twice from the same
  // unpenalised logit and scattered back twice with the same value, so it is penalised once (CTRL).
  const torch::Tensor seen = logits.gather(1, in.history_ids);
  logits.scatter_(1, in.history_ids, torch::where(seen > 0, seen / s.repetition_penalty, seen * s.repetition_penalty));
  // Frequency and presence over the output: each output position's count of its token within the row.
  const torch::Tensor counts = (in.output_ids.unsqueeze(2) == in.output_ids.unsqueeze(1)).sum(2).to(torch::kFloat);
  const torch::Tensor produced = logits.gather(1, in.output_ids);
  logits.scatter_(1, in.output_ids, produced - counts * s.frequency_penalty - s.presence_penalty);

  // Step 3: temperature.
  logits.div_(s.temperature);

  // Step 4: min-p (keep p >= min_p * max p), top-k (keep logits >= the k-th largest, ties kept), top-p
  // (sort ascending, drop the low tail whose cumulative mass is <= 1 - P; the crossing token stays).
  const torch::Tensor probs = torch::softmax(logits, -1);
  logits.masked_fill_(probs < std::get<0>(probs.max(-1, true)) * s.min_p, neg_inf);
  const torch::Tensor kth = std::get<0>(logits.topk(s.top_k, -1)).narrow(1, s.top_k - 1, 1);
  logits.masked_fill_(logits < kth, neg_inf);
  const auto [sorted, order] = logits.sort(-1, /*descending=*/false);
  torch::Tensor tail = sorted.softmax(-1).cumsum(-1) <= 1.0 - s.top_p;
  tail.select(1, vocab - 1).fill_(false);  // the most probable token always stays
  logits.masked_fill_(tail.scatter(1, order, tail), neg_inf);

  // Step 5: the distribution.
  return torch::softmax(logits, -1);
}

// ---- (c) The streaming floor -------------------------------------------------------------------------

// exp(x) for x <= 0 in a form compilers vectorise (no libm call): exp(x) = 2^n exp(r) with n = round(x / ln 2)
// and |r| <= ln 2 / 2, exp(r) by Cephes' expf polynomial (relative error ~1e-7), 2^n built in the exponent.
inline float exp_nonpositive(float x) {
  // Clamp at -87 so 2^n stays a normal float (exp(-87) ~ 1.6e-38; -inf gives that too). Done on the bits:
  // for x <= 0 they grow as x falls, and an integer min vectorises where a float comparison does not under
  // GCC's default -ftrapping-math (the loop would keep a branch and run scalar, 4x slower).
  constexpr uint32_t kMinus87Bits = 0xC2AE0000u;
  const uint32_t bits = __builtin_bit_cast(uint32_t, x);
  x = __builtin_bit_cast(float, bits < kMinus87Bits ? bits : kMinus87Bits);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // Cody-Waite: ln 2 split in two
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
}

// A numerically stable softmax of one row: max, exp, sum, normalise. The least any sampler that returns
// the processed distribution must do: read the row, exponentiate it, write it. Compiled twice (function
// multiversioning) and dispatched on the CPU, because the floor is what one vectorised pass costs on the
// machine at hand, and the project's baseline flags stop at SSE2. The exp and the sum are separate loops:
// GCC 12 leaves the fused loop with its reduction scalar once it is inlined into an OpenMP region.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void softmax_row_floor(const float* __restrict x,
                                                                                   int32_t size, float* __restrict y) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int32_t i = 0; i < size; ++i) m = x[i] > m ? x[i] : m;
#pragma omp simd
  for (int32_t i = 0; i < size; ++i) y[i] = exp_nonpositive(x[i] - m);
  float z = 0.0f;
#pragma omp simd reduction(+ : z)
  for (int32_t i = 0; i < size; ++i) z += y[i];
  const float inv = 1.0f / z;
#pragma omp simd
  for (int32_t i = 0; i < size; ++i) y[i] *= inv;
}

// ---- Agreement check ---------------------------------------------------------------------------------

SamplerBenchAgreement check_agreement(int32_t vocab_size) {
  const std::shared_ptr<ShapeInputs> in = make_inputs(vocab_size, kAgreementRows);
  std::vector<float> probs(in->logits.size());
  process_batch(in->logits.data(), in->batch, in->vocab_size, in->row_pipelines.data(), in->row_histories.data(),
                probs.data());
  const torch::Tensor expected = torch_process(*in).contiguous();
  const float* p_torch = expected.data_ptr<float>();
  SamplerBenchAgreement a;
  a.vocab_size = vocab_size;
  a.rows = in->batch;
  a.min_support = vocab_size;
  for (int32_t r = 0; r < in->batch; ++r) {
    int32_t support = 0;
    for (int32_t i = 0; i < vocab_size; ++i) {
      const size_t k = static_cast<size_t>(r) * vocab_size + i;
      a.max_abs_prob_diff = std::max(a.max_abs_prob_diff, std::fabs(static_cast<double>(probs[k]) - p_torch[k]));
      a.support_mismatches += (probs[k] > 0.0f) != (p_torch[k] > 0.0f) ? 1 : 0;
      support += probs[k] > 0.0f ? 1 : 0;
    }
    a.min_support = std::min(a.min_support, support);
    a.max_support = std::max(a.max_support, support);
  }
  return a;
}

// ---- Registration and collection ---------------------------------------------------------------------

struct CaseSpec {
  std::string method;
  int32_t vocab_size;
  int32_t batch;
};

// Builds a shape's inputs on first use, so a filtered-out shape costs nothing.
class LazyInputs {
 public:
  LazyInputs(int32_t vocab_size, int32_t batch) : vocab_size_(vocab_size), batch_(batch) {}
  ShapeInputs& get() {
    if (!inputs_) inputs_ = make_inputs(vocab_size_, batch_);
    return *inputs_;
  }

 private:
  int32_t vocab_size_, batch_;
  std::shared_ptr<ShapeInputs> inputs_;
};

// Runs `body` in the timed loop; an exception becomes a benchmark error instead of crossing Google
// Benchmark's runner.
void run_case(benchmark::State& state, LazyInputs& lazy, const std::function<void(ShapeInputs&, uint64_t)>& body) {
  try {
    ShapeInputs& in = lazy.get();
    uint64_t iteration = 0;
    for (auto _ : state) body(in, iteration++);
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(in.bytes()));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

std::function<void(ShapeInputs&, uint64_t)> case_body(const std::string& method) {
  if (method == "specula") {
    // Per-shape buffers live in the closure: allocation is not what is measured.
    auto probs = std::make_shared<std::vector<float>>();
    auto keys = std::make_shared<std::vector<RandomKey>>();
    auto tokens = std::make_shared<std::vector<Token>>();
    return [=](ShapeInputs& in, uint64_t iteration) {
      probs->resize(in.logits.size());
      keys->resize(in.batch);
      tokens->resize(in.batch);
      for (int32_t r = 0; r < in.batch; ++r)
        (*keys)[r] = RandomKey{kSeed, philox_stream(static_cast<uint64_t>(r), RandomRole::sample), iteration};
      process_batch(in.logits.data(), in.batch, in.vocab_size, in.row_pipelines.data(), in.row_histories.data(),
                    probs->data());
      sample_rows(probs->data(), in.batch, in.vocab_size, keys->data(), tokens->data());
      benchmark::DoNotOptimize(tokens->data());
    };
  }
  if (method == "torch_ops") {
    auto generator = std::make_shared<at::Generator>(at::make_generator<at::CPUGeneratorImpl>(kSeed));
    return [=](ShapeInputs& in, uint64_t) {
      c10::InferenceMode inference;
      const torch::Tensor tokens = torch::multinomial(torch_process(in), 1, /*replacement=*/false, *generator);
      benchmark::DoNotOptimize(tokens.data_ptr<int64_t>());
    };
  }
  if (method == "streaming_floor") {
    auto probs = std::make_shared<std::vector<float>>();
    return [=](ShapeInputs& in, uint64_t) {
      probs->resize(in.logits.size());
      const float* x = in.logits.data();
      float* y = probs->data();
#pragma omp parallel for schedule(static)
      for (int32_t r = 0; r < in.batch; ++r)
        softmax_row_floor(x + static_cast<size_t>(r) * in.vocab_size, in.vocab_size,
                          y + static_cast<size_t>(r) * in.vocab_size);
      benchmark::DoNotOptimize(y);
      benchmark::ClobberMemory();
    };
  }
  if (method == "torch_softmax") {
    auto out = std::make_shared<torch::Tensor>();
    return [=](ShapeInputs& in, uint64_t) {
      c10::InferenceMode inference;
      if (!out->defined()) *out = torch::empty_like(in.logits_t);
      at::_softmax_out(*out, in.logits_t, 1, /*half_to_float=*/false);
      benchmark::DoNotOptimize(out->data_ptr<float>());
    };
  }
  if (method == "read") {
    auto copy = std::make_shared<std::vector<float>>();
    return [=](ShapeInputs& in, uint64_t) {
      copy->resize(in.logits.size());
      const float* x = in.logits.data();
      float* y = copy->data();
#pragma omp parallel for schedule(static)
      for (int32_t r = 0; r < in.batch; ++r)
        std::memcpy(y + static_cast<size_t>(r) * in.vocab_size, x + static_cast<size_t>(r) * in.vocab_size,
                    static_cast<size_t>(in.vocab_size) * sizeof(float));
      benchmark::DoNotOptimize(y);
      benchmark::ClobberMemory();
    };
  }
  fail("sampler benchmark: unknown method '", method, "'");
}

std::string case_name(const CaseSpec& c) {
  return "sampler/" + c.method + "/V=" + std::to_string(c.vocab_size) + "/B=" + std::to_string(c.batch);
}

}  // namespace

SamplerBenchResult run_sampler_benchmarks(const SamplerBenchOptions& options) {
  BenchmarkCases cases("specula bench sampler", options.threads, options.min_time_s, options.filter);
  torch::set_num_threads(options.threads);
  omp_set_num_threads(options.threads);
  std::vector<CaseSpec> specs;
  for (int32_t vocab : kVocabSizes) {
    for (int32_t batch : kBatchSizes) {
      auto lazy = std::make_shared<LazyInputs>(vocab, batch);
      for (const char* method : kSamplerBenchMethods) {
        const CaseSpec spec{method, vocab, batch};
        auto body = case_body(spec.method);
        if (cases.add(case_name(spec), [lazy, body](benchmark::State& state) { run_case(state, *lazy, body); }))
          specs.push_back(spec);
      }
    }
  }
  SamplerBenchResult result;
  for (const CaseRun& run : cases.run()) {
    const auto spec =
        std::find_if(specs.begin(), specs.end(), [&](const CaseSpec& c) { return case_name(c) == run.name; });
    if (spec == specs.end()) fail("benchmark run '", run.name, "' matches no registered case");
    SamplerBenchCase c;
    c.name = run.name;
    c.method = spec->method;
    c.vocab_size = spec->vocab_size;
    c.batch = spec->batch;
    c.iterations = run.iterations;
    c.mean_wall_us = run.mean_wall_us;
    c.mean_cpu_us = run.mean_cpu_us;
    c.mean_us = run.mean_us;
    c.bytes_per_second = static_cast<double>(c.batch) * c.vocab_size * sizeof(float) / (c.mean_us * 1e-6);
    result.cases.push_back(c);
  }
  for (int32_t vocab : kVocabSizes) {
    const bool ran = std::any_of(result.cases.begin(), result.cases.end(), [&](const SamplerBenchCase& c) {
      return c.vocab_size == vocab && (c.method == "specula" || c.method == "torch_ops");
    });
    if (ran) result.agreement.push_back(check_agreement(vocab));
  }
  result.pipeline = SamplerPipeline(all_stages_params(), kVocabSizes[0]).describe();
  result.workload = workload_description();
  result.torch_version = TORCH_VERSION;
  result.parallel_info = at::get_parallel_info();
  return result;
}

}  // namespace specula::bench
