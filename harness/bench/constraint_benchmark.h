// `specula bench constraint`: what constrained decoding (verify/sampling/token_constraint.h) costs at a large
// vocabulary: building the token automaton of a JSON Schema, the first walk of an output through it (each new
// state's allowed-token mask is built on first use), a second walk through the same, now cached, states, and the
// peak memory all that takes. The baseline is the sampler pipeline's row without the constraint, measured in the
// same run on the same rows: the constraint's cost per token is reported as a ratio to it. Torch-free.
//
// The vocabulary is synthetic, shaped like a byte-level BPE one (every byte, JSON punctuation, every two- and
// three-letter word, then distinct words of 4 to 9 letters, half with a leading space), so that a 128k vocabulary
// is available on every machine without a tokenizer file. The output walked is drawn uniformly from each state's
// allowed tokens, with a fixed seed: the same tokens in every repetition and on every machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specula::bench {

inline constexpr int kMaxBenchMaxLength = 10000;   // a string field's maxLength
inline constexpr int kMaxBenchBadWords = 1000000;  // bad words of a case

struct ConstraintBenchOptions {
  int32_t vocab_size = 128256;               // Llama 3's
  std::vector<int> max_lengths = {20, 100};  // maxLength of every string field, one case each
  std::vector<int> bad_words = {0, 1000};    // bad words of two tokens given to the sampler, one case each
  int32_t fields = 12;                       // required string fields of the schema
  int32_t repeats = 3;                       // every case this many times, cases interleaved
};

// Refuses options out of range, naming the flag, before any work.
void check_constraint_bench_options(const ConstraintBenchOptions& options);

// The schema of one case: an object of `fields` required strings field0.., each of at most `max_length` characters.
std::string bench_schema(int32_t fields, int32_t max_length);
// Token 0 is the stop token; see the header comment for the rest. Deterministic; throws Error below 1024 tokens.
std::vector<std::string> synthetic_bpe_vocabulary(int32_t vocab_size);

// One repetition of a case. Times are CPU time of the calling thread.
struct ConstraintBenchSample {
  double build_ms = 0.0;                      // TokenConstraint::from_json_schema
  double first_walk_ms = 0.0;                 // allowed() and next_state() over the output, states built on first use
  double cached_mask_us = 0.0;                // allowed() per token, every state already built
  double cached_step_us = 0.0;                // next_state() per token, the same
  double sampler_row_us = 0.0;                // the pipeline's row without the constraint (the baseline)
  double constrained_row_us = 0.0;            // the same row with it
  long long peak_resident_growth_bytes = -1;  // VmHWM after the first walk less VmRSS before the build; -1: unknown
};

struct ConstraintBenchCase {
  std::string name;  // "constraint/json/maxLength=<L>/bad_words=<N>"
  int32_t max_length = 0;
  int32_t bad_words = 0;
  int32_t tokens = 0;                          // of the output walked (the stop token not counted)
  int32_t output_bytes = 0;                    // its text's length
  int32_t states_built = 0;                    // DFA states after the walk
  std::vector<ConstraintBenchSample> samples;  // one per repetition
};

struct ConstraintBenchResult {
  std::vector<ConstraintBenchCase> cases;
  std::string pipeline;  // the sampler chain, SamplerPipeline::describe()
  std::string workload;  // vocabulary, schema, bad words and output, in words
};

// The median of the values (the mean of the middle two for an even count); throws Error for none.
double median_of(std::vector<double> values);

// Runs every case `repeats` times, the cases interleaved within each repetition. Throws Error where a walk differs
// between repetitions (the automaton would not be deterministic).
ConstraintBenchResult run_constraint_benchmark(const ConstraintBenchOptions& options);

}  // namespace specula::bench
