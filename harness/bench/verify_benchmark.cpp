// The cases of `specula bench verify`.
#include "harness/bench/verify_benchmark.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

#include "harness/bench/bench_workload.h"
#include "harness/bench/benchmark_cases.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/token_tree.h"
#include "verify/verifiers/verification.h"
#include "verify/verifiers/verify_methods.h"

namespace specula::bench {

std::vector<std::string> verify_bench_methods() {
  std::vector<std::string> methods;
  for (VerifyMethod m : verify_methods())
    if (!is_lossy(m) && !verifies_greedily(m)) methods.push_back(verify_method_name(m));
  methods.push_back("sampler_passes");
  return methods;
}

namespace {

constexpr int32_t kVocabSizes[] = {32000, 128256};  // Llama 2, Llama 3
constexpr int32_t kChainLengths[] = {1, 4, 8};
const char* const kTreeShapes[] = {"2,2,1", "4,2,1"};
constexpr uint64_t kSeed = 0x5eec01b;
// As `bench sampler` (bench_workload.h): target logits ~ N(0, 2^2), all stages on, so every filter removes
// tokens. The drafter sees the target's logits plus N(0, 0.7^2) noise through the same pipeline: a draft law
// close to, but not equal to, the target's, so steps accept some drafts and reject others.
constexpr float kDraftNoiseSigma = 0.7f;
constexpr int32_t kAcceptanceSteps = 400;
// Drafts per shape, cycled through by the steps: one fixed draft would make every step take the same path.
constexpr int32_t kDrafts = 16;

std::string workload_description() {
  std::ostringstream os;
  os << "target logits ~ N(0, " << kLogitSigma << "^2) per row via Box-Muller on Philox4x32-10 (seed " << kSeed
     << "); draft logits = target + N(0, " << kDraftNoiseSigma << "^2), processed by the same pipeline with the "
     << "same path histories; committed history " << kPromptTokens << " prompt tokens (half from row 0's "
     << kHistoryPool << " most likely, half uniform) and " << kOutputTokens << " output tokens from row 0's "
     << kHistoryPool << " most likely; sampling parameters as `bench sampler` (" << all_stages_description()
     << "); drafts drawn i.i.d. "
     << "from the draft law of their parent row; " << kDrafts << " drafts per shape, step i verifies draft i mod "
     << kDrafts << " with fresh verifier uniforms (step = i)";
  return os.str();
}

// Children per depth: K ones for a chain, the parsed shape for a tree.
std::vector<int32_t> shape_widths(const std::string& shape) {
  if (shape.rfind("K=", 0) == 0) return std::vector<int32_t>(std::stoi(shape.substr(2)), 1);
  return parse_tree_shape(shape.substr(shape.find('=') + 1));
}

// Everything one (shape, V) pair's cases read, built once outside the timed loops.
struct ShapeInputs {
  int32_t vocab_size = 0;
  std::unique_ptr<SamplerPipeline> pipeline;  // target and drafter alike
  TokenHistory committed;
  std::vector<TokenTree> drafts;  // kDrafts drafts of the shape, each with the law of every row with children
  std::vector<float> logits;      // [rows, V] target logits
  std::vector<float> probs;       // [rows, V] scratch for the processed target rows
  int32_t rows() const { return drafts[0].size() + 1; }
  const TokenTree& draft(uint64_t step) const { return drafts[step % drafts.size()]; }
};

// One draft of the shape, depth by depth: each frontier row's draft law from its noisy logits and its path
// history, then its children drawn i.i.d. from that law (draft keys from `first_draw` on).
TokenTree draw_draft(const ShapeInputs& in, const std::vector<int32_t>& widths, uint64_t first_draw) {
  const size_t V = static_cast<size_t>(in.vocab_size);
  TokenTree tree;
  tree.scheme = SiblingScheme::iid;
  tree.draft_q.assign(in.logits.size() / V, {});
  std::vector<float> draft_logits(V);
  std::vector<int32_t> frontier = {0};
  uint64_t draw = first_draw;
  const uint64_t draft_stream = philox_stream(0, RandomRole::draft);
  for (int32_t width : widths) {
    std::vector<int32_t> next;
    for (int32_t row : frontier) {
      const float* target = in.logits.data() + row * V;
      gaussian_row(kSeed, philox_stream(static_cast<uint64_t>(row), RandomRole::draft), kDraftNoiseSigma, in.vocab_size,
                   draft_logits.data());
      for (size_t i = 0; i < V; ++i) draft_logits[i] += target[i];
      TokenHistory h = in.committed;
      for (Token t : tree.path(row - 1)) h = h.extended(t);
      tree.draft_q[row] = in.pipeline->process(draft_logits, h);
      for (int32_t c = 0; c < width; ++c) {
        const Token t =
            sample_categorical(tree.draft_q[row].data(), in.vocab_size, RandomKey{kSeed, draft_stream, draw++});
        tree.add(t, row - 1);
        next.push_back(tree.size());  // the new node's row
      }
    }
    frontier = next;
  }
  return tree;
}

std::shared_ptr<ShapeInputs> make_inputs(const std::string& shape, int32_t vocab_size) {
  auto in = std::make_shared<ShapeInputs>();
  in->vocab_size = vocab_size;
  in->pipeline = std::make_unique<SamplerPipeline>(all_stages_params(), vocab_size);
  const std::vector<int32_t> widths = shape_widths(shape);
  const int32_t rows = static_cast<int32_t>(tree_shape_nodes(widths)) + 1;
  const size_t V = static_cast<size_t>(vocab_size);
  in->logits.resize(rows * V);
  in->probs.resize(rows * V);
  for (int32_t r = 0; r < rows; ++r)
    gaussian_row(kSeed, philox_stream(static_cast<uint64_t>(r), RandomRole::aux), kLogitSigma, vocab_size,
                 in->logits.data() + r * V);

  // The committed history, from row 0's most likely tokens (as generated text would be).
  in->committed = likely_history(in->logits.data(), vocab_size, kSeed, philox_stream(0, RandomRole::tree));

  for (int32_t d = 0; d < kDrafts; ++d) in->drafts.push_back(draw_draft(*in, widths, static_cast<uint64_t>(d) << 16));
  return in;
}

// Builds a shape's inputs on first use, so a filtered-out shape costs nothing.
class LazyInputs {
 public:
  LazyInputs(std::string shape, int32_t vocab_size) : shape_(std::move(shape)), vocab_size_(vocab_size) {}
  ShapeInputs& get() {
    if (!inputs_) inputs_ = make_inputs(shape_, vocab_size_);
    return *inputs_;
  }

 private:
  std::string shape_;
  int32_t vocab_size_;
  std::shared_ptr<ShapeInputs> inputs_;
};

VerifyMethod verify_method_of(const std::string& method) { return parse_verify_method(method); }

// One speculative step: the target rows, then the verifier with the step's own uniforms.
VerifyOutcome verify_step(ShapeInputs& in, VerifyMethod method, uint64_t step) {
  const TokenTree& tree = in.draft(step);
  process_tree_rows(*in.pipeline, in.logits.data(), in.committed, tree, in.probs.data());
  return verify(method, in.probs.data(), tree, in.vocab_size, StepRandom{kSeed, 0, step});
}

std::function<void(ShapeInputs&, uint64_t)> case_body(const std::string& method) {
  if (method == "sampler_passes") {
    return [](ShapeInputs& in, uint64_t iteration) {
      const size_t V = static_cast<size_t>(in.vocab_size);
      for (int32_t r = 0; r < in.rows(); ++r) {
        float* probs = in.probs.data() + r * V;
        in.pipeline->process(in.logits.data() + r * V, in.committed, probs);
        const Token t =
            sample_categorical(probs, in.vocab_size, RandomKey{kSeed, philox_stream(0, RandomRole::sample), iteration});
        benchmark::DoNotOptimize(t);
      }
    };
  }
  const VerifyMethod m = verify_method_of(method);
  return [m](ShapeInputs& in, uint64_t iteration) {
    const VerifyOutcome o = verify_step(in, m, iteration);
    benchmark::DoNotOptimize(o.emitted.data());
  };
}

void run_case(benchmark::State& state, LazyInputs& lazy, const std::function<void(ShapeInputs&, uint64_t)>& body) {
  try {
    ShapeInputs& in = lazy.get();
    uint64_t iteration = 0;
    for (auto _ : state) body(in, iteration++);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

struct CaseSpec {
  std::string method;
  std::string shape;
  int32_t vocab_size;
};

std::string case_name(const CaseSpec& c) {
  return "verify/" + c.method + "/" + c.shape + "/V=" + std::to_string(c.vocab_size);
}

VerifyBenchAcceptance measure_acceptance(const CaseSpec& spec, ShapeInputs& in) {
  VerifyBenchAcceptance a{spec.method, spec.shape, spec.vocab_size, kAcceptanceSteps, 0.0, 0.0};
  for (int32_t step = 0; step < kAcceptanceSteps; ++step) {
    const VerifyOutcome o = verify_step(in, verify_method_of(spec.method), static_cast<uint64_t>(step));
    a.mean_accepted += o.accepted;
    a.all_accepted_rate += o.all_accepted ? 1.0 : 0.0;
  }
  a.mean_accepted /= kAcceptanceSteps;
  a.all_accepted_rate /= kAcceptanceSteps;
  return a;
}

}  // namespace

VerifyBenchResult run_verify_benchmarks(const VerifyBenchOptions& options) {
  BenchmarkCases cases("specula bench verify", options.threads, options.min_time_s, options.filter);
  omp_set_num_threads(options.threads);
  std::vector<std::string> shapes;
  for (int32_t k : kChainLengths) shapes.push_back("K=" + std::to_string(k));
  for (const char* t : kTreeShapes) shapes.push_back(std::string("tree=") + t);

  std::vector<CaseSpec> specs;
  std::map<std::string, std::shared_ptr<LazyInputs>> inputs;  // by "<shape>/V=<V>"
  for (int32_t vocab : kVocabSizes) {
    for (const std::string& shape : shapes) {
      const bool chain = shape.rfind("K=", 0) == 0;
      auto lazy = std::make_shared<LazyInputs>(shape, vocab);
      inputs[shape + "/V=" + std::to_string(vocab)] = lazy;
      for (const std::string& m : verify_bench_methods()) {
        if (m != "sampler_passes" && verifies_trees(parse_verify_method(m)) == chain) continue;
        const CaseSpec spec{m, shape, vocab};
        auto body = case_body(m);
        if (cases.add(case_name(spec), [lazy, body](benchmark::State& state) { run_case(state, *lazy, body); }))
          specs.push_back(spec);
      }
    }
  }
  VerifyBenchResult result;
  for (const CaseRun& run : cases.run()) {
    const auto spec =
        std::find_if(specs.begin(), specs.end(), [&](const CaseSpec& c) { return case_name(c) == run.name; });
    if (spec == specs.end()) fail("benchmark run '", run.name, "' matches no registered case");
    ShapeInputs& in = inputs.at(spec->shape + "/V=" + std::to_string(spec->vocab_size))->get();
    VerifyBenchCase c;
    c.name = run.name;
    c.method = spec->method;
    c.shape = spec->shape;
    c.vocab_size = spec->vocab_size;
    c.positions = in.rows();
    c.iterations = run.iterations;
    c.mean_wall_us = run.mean_wall_us;
    c.mean_cpu_us = run.mean_cpu_us;
    c.mean_us = run.mean_us;
    result.cases.push_back(c);
    if (c.method != "sampler_passes") result.acceptance.push_back(measure_acceptance(*spec, in));
  }
  result.pipeline = SamplerPipeline(all_stages_params(), kVocabSizes[0]).describe();
  result.workload = workload_description();
  return result;
}

}  // namespace specula::bench
