#include "harness/bench/constraint_benchmark.h"

#include <malloc.h>
#include <time.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <unordered_set>

#include "harness/bench/bench_workload.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "verify/constraints/json_schema.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/sampling/token_constraint.h"

namespace specula::bench {
namespace {

constexpr int32_t kMinVocab = 1024;     // every byte, the punctuation and some words
constexpr int32_t kMaxVocab = 1 << 20;  // a V-bit set a state: beyond this, memory not time is what is measured
constexpr int32_t kMaxFields = 1000;
constexpr int32_t kMaxRepeats = 100;
constexpr int32_t kMaxOutputTokens = 1 << 20;  // a walk that long means the schema never ends: a bug, not a case
// The JSON pieces of the vocabulary, after the stop token and the 255 bytes; the words follow them.
constexpr const char* kPunctuation[] = {"{\"", "\":", "\",", "\"}", ", \"", "\": \"", "\":\"", "\"\"", "field"};
constexpr uint64_t kSeed = 0xc0257a1;        // vocabulary, bad words, the walk's draws and the logits
constexpr double kCachedWalkSeconds = 0.05;  // the cached walks are repeated for at least this long
constexpr int32_t kRowRounds = 3;            // rounds of the plain and the constrained rows, alternated

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Repeats `pass` (one pass over the output) until kCachedWalkSeconds have gone; the CPU time of one pass.
template <class Pass>
double seconds_per_pass(Pass&& pass) {
  int64_t passes = 0;
  const double start = thread_seconds();
  double elapsed = 0.0;
  do {
    pass();
    ++passes;
    elapsed = thread_seconds() - start;
  } while (elapsed < kCachedWalkSeconds);
  return elapsed / static_cast<double>(passes);
}

std::string case_name(int32_t max_length, int32_t bad_words) {
  return "constraint/json/maxLength=" + std::to_string(max_length) + "/bad_words=" + std::to_string(bad_words);
}

// `count` bad words of two tokens, both words of the vocabulary (not bytes or punctuation), drawn with the fixed seed.
std::vector<std::vector<Token>> bench_bad_words(int32_t count, int32_t first_word_token, int32_t vocab_size) {
  std::mt19937_64 rng(kSeed ^ 0xbad);
  auto word = [&] { return static_cast<Token>(first_word_token + rng() % (vocab_size - first_word_token)); };
  std::vector<std::vector<Token>> words;
  for (int32_t i = 0; i < count; ++i) words.push_back({word(), word()});
  return words;
}

// The output walked: each token drawn uniformly from the state's allowed ones, until the stop token (or the end of
// a match that no token continues). The CPU time of the automaton's calls on the way (allowed(), which builds a state
// on first use, and next_state()) is added to `seconds`; the draws' V-wide scans are not timed.
struct Walk {
  std::vector<Token> tokens;    // the stop token left out
  std::vector<int32_t> states;  // states[i]: before tokens[i]; one more, after the last
};
Walk draw_output(const TokenConstraint& c, const std::string& name, double& seconds) {
  std::mt19937_64 rng(kSeed ^ 0x0a1c);
  Walk walk{{}, {TokenConstraint::kInitial}};
  std::vector<Token> allowed;
  for (;;) {
    double t = thread_seconds();
    const TokenSet* mask = c.allowed(walk.states.back());
    seconds += thread_seconds() - t;
    if (!mask) break;
    allowed.clear();
    for (Token i = 0; i < static_cast<Token>(mask->size()); ++i)
      if (mask->test(i)) allowed.push_back(i);
    const Token token = allowed[rng() % allowed.size()];
    if (token == 0) break;  // the stop token
    t = thread_seconds();
    const int32_t next = c.next_state(walk.states.back(), token);
    seconds += thread_seconds() - t;
    walk.tokens.push_back(token);
    walk.states.push_back(next);
    if (walk.tokens.size() > static_cast<size_t>(kMaxOutputTokens))
      fail(name, ": the output walked has passed ", kMaxOutputTokens, " tokens without an end");
  }
  return walk;
}

}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) fail("median_of: no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void check_constraint_bench_options(const ConstraintBenchOptions& o) {
  if (o.vocab_size < kMinVocab || o.vocab_size > kMaxVocab)
    fail_parameter("vocab_size", " must be in ", kMinVocab, "..", kMaxVocab, ", got ", o.vocab_size);
  if (o.fields < 1 || o.fields > kMaxFields)
    fail_parameter("fields", " must be in 1..", kMaxFields, ", got ", o.fields);
  if (o.repeats < 1 || o.repeats > kMaxRepeats)
    fail_parameter("repeats", " must be in 1..", kMaxRepeats, ", got ", o.repeats);
  for (const int l : o.max_lengths)
    if (l < 1 || l > kMaxBenchMaxLength) fail_parameter("max_length", ": ", l, " is not in 1..", kMaxBenchMaxLength);
  for (const int n : o.bad_words)
    if (n < 0 || n > kMaxBenchBadWords) fail_parameter("bad_words", ": ", n, " is not in 0..", kMaxBenchBadWords);
  if (o.max_lengths.empty()) fail_parameter("max_length", ": no length given");
  if (o.bad_words.empty()) fail_parameter("bad_words", ": no count given");
  // The schema compiles (its automaton has a bounded number of NFA states), before any case is timed.
  for (const int l : o.max_lengths) try {
      compile_json_schema(bench_schema(o.fields, l), "the benchmark's schema");
    } catch (const Error& e) {
      fail_parameter("max_length", ": ", l, " with --fields ", o.fields, " makes a schema too large to compile (",
                     e.what(), ")");
    }
}

std::string bench_schema(int32_t fields, int32_t max_length) {
  std::ostringstream schema, required;
  schema << R"({"type":"object","properties":{)";
  for (int32_t i = 0; i < fields; ++i) {
    schema << (i ? "," : "") << R"("field)" << i << R"(":{"type":"string","maxLength":)" << max_length << "}";
    required << (i ? "," : "") << R"("field)" << i << '"';
  }
  schema << R"(},"required":[)" << required.str() << "]}";
  return schema.str();
}

std::vector<std::string> synthetic_bpe_vocabulary(int32_t vocab_size) {
  if (vocab_size < kMinVocab) fail("synthetic vocabulary: ", vocab_size, " tokens, at least ", kMinVocab, " needed");
  std::vector<std::string> v = {"</s>"};
  for (int b = 1; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  for (const char* piece : kPunctuation) v.push_back(piece);
  std::unordered_set<std::string> seen(v.begin(), v.end());
  auto add = [&](std::string s) {
    if (static_cast<int32_t>(v.size()) < vocab_size && seen.insert(s).second) v.push_back(std::move(s));
  };
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) add(std::string{a, b});
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b)
      for (char c = 'a'; c <= 'z'; ++c) add(std::string{a, b, c});
  std::mt19937_64 rng(kSeed);
  while (static_cast<int32_t>(v.size()) < vocab_size) {
    std::string w = rng() % 2 ? " " : "";
    for (int n = 4 + static_cast<int>(rng() % 6); n > 0; --n) w += static_cast<char>('a' + rng() % 26);
    add(std::move(w));
  }
  return v;
}

ConstraintBenchResult run_constraint_benchmark(const ConstraintBenchOptions& options) {
  check_constraint_bench_options(options);
  const int32_t V = options.vocab_size;
  const std::vector<std::string> vocabulary = synthetic_bpe_vocabulary(V);
  const int32_t first_word_token = 256 + static_cast<int32_t>(std::size(kPunctuation));  // after bytes, punctuation
  std::vector<float> logits(V);
  gaussian_row(kSeed, philox_stream(0, RandomRole::aux), kLogitSigma, V, logits.data());
  std::vector<float> probs(V);

  ConstraintBenchResult result;
  for (const int l : options.max_lengths)
    for (const int n : options.bad_words) {
      ConstraintBenchCase c;
      c.name = case_name(l, n);
      c.max_length = l;
      c.bad_words = n;
      result.cases.push_back(c);
    }

  for (int32_t repeat = 0; repeat < options.repeats; ++repeat)
    for (ConstraintBenchCase& c : result.cases) {
      SamplingParams params = all_stages_params();
      params.stop_tokens = {0};
      params.bad_words = bench_bad_words(c.bad_words, first_word_token, V);
      const std::string schema = bench_schema(options.fields, c.max_length);
      ConstraintBenchSample s;

      // What the constraint is handed (its own copy of the token strings, the sampler's masks) is made before the
      // build is timed and the memory measured: the caller has them already.
      SamplerMasks masks = sampler_masks(params, V);
      std::vector<std::string> strings = vocabulary;
      // The memory the last case freed goes back to the kernel first: kept by malloc, it would be reused unseen.
      malloc_trim(0);
      const bool peak_reset = reset_peak_resident();
      const long long resident_before = process_resident_bytes();
      double t = thread_seconds();
      const std::shared_ptr<const TokenConstraint> constraint =
          TokenConstraint::from_json_schema(schema, c.name, std::move(strings), {0}, std::move(masks));
      s.build_ms = 1e3 * (thread_seconds() - t);

      double first_walk_s = 0.0;
      const Walk walk = draw_output(*constraint, c.name, first_walk_s);
      s.first_walk_ms = 1e3 * first_walk_s;
      s.peak_resident_growth_bytes =
          peak_reset && resident_before >= 0 ? process_peak_resident_bytes() - resident_before : -1;
      const std::vector<Token>& output = walk.tokens;
      const std::vector<int32_t>& states = walk.states;
      if (repeat == 0) {
        c.tokens = static_cast<int32_t>(output.size());
        c.output_bytes = static_cast<int32_t>(constraint->text(output).size());
      } else if (static_cast<int32_t>(output.size()) != c.tokens) {
        fail(c.name, ": repetition ", repeat + 1, " walked ", output.size(), " tokens, the first ", c.tokens);
      }
      c.states_built = constraint->states_built();

      const double per_token = 1e6 / static_cast<double>(std::max<size_t>(1, output.size()));
      volatile int64_t sink = 0;
      s.cached_mask_us = per_token * seconds_per_pass([&] {
                           for (size_t i = 0; i < output.size(); ++i)
                             sink = sink + constraint->allowed(states[i])->test(output[i]);
                         });
      s.cached_step_us = per_token * seconds_per_pass([&] {
                           for (size_t i = 0; i < output.size(); ++i)
                             sink = sink + constraint->next_state(states[i], output[i]);
                         });

      // The baseline and the constrained row, on the same histories (the output so far): kRowRounds rounds, each
      // timing one then the other, and the median of each.
      std::vector<TokenHistory> histories(output.size());
      for (size_t i = 0; i < output.size(); ++i) {
        histories[i].output.assign(output.begin(), output.begin() + static_cast<std::ptrdiff_t>(i));
        histories[i].constraint_state = states[i];
      }
      const SamplerPipeline plain(params, V);
      SamplingParams constrained_params = params;
      constrained_params.constraint = constraint;
      const SamplerPipeline constrained(constrained_params, V);
      if (result.pipeline.empty()) result.pipeline = constrained.describe();
      auto rows = [&](const SamplerPipeline& pipeline) {
        return per_token * seconds_per_pass([&] {
                 for (const TokenHistory& h : histories) pipeline.process(logits.data(), h, probs.data());
               });
      };
      std::vector<double> plain_us, constrained_us;
      for (int32_t round = 0; round < kRowRounds; ++round) {
        plain_us.push_back(rows(plain));
        constrained_us.push_back(rows(constrained));
      }
      s.sampler_row_us = median_of(plain_us);
      s.constrained_row_us = median_of(constrained_us);
      c.samples.push_back(s);
    }

  std::ostringstream workload;
  workload << "synthetic byte-level BPE vocabulary of " << V << " tokens (token 0 the stop token </s>; every byte; "
           << "JSON punctuation; every two- and three-letter word; distinct words of 4 to 9 letters, half with a "
           << "leading space; seed " << kSeed << "); schema: an object of " << options.fields
           << " required string fields field0.. of at most maxLength characters; bad words: pairs of word tokens "
           << "drawn with the same seed, given to the sampler (bad_words) and so to the automaton; the output: each "
           << "token drawn uniformly from its state's allowed tokens until the stop token; the rows: one N(0, "
           << kLogitSigma << "^2) logit row, each position's history the output before it";
  result.workload = workload.str();
  return result;
}

}  // namespace specula::bench
