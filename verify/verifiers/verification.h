// Exact (lossless) speculative verification on processed target distributions. Conventions: p = target,
// q = draft; rows follow TokenTree (row 0 = after the committed context, row j + 1 = after node j), and
// p is [rows, V] as produced by the sampler pipeline with each row's own path history
// (verify/verifiers/target_rows.h). verify/ALGORITHMS.md is the reference for every rule here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/categorical.h"
#include "verify/verifiers/token_tree.h"

namespace specula {

// A verification method: a row of the methods' table (verify/verifiers/verify_methods.h), which holds its name,
// its verifier and its traits. A new method is its verifier's file plus one row (a line of the built-in table, or
// add_verify_method); the built-in methods are named here only because code and tests pick them directly (their
// rows are checked against their names).
class VerifyMethod {
 public:
  static const VerifyMethod greedy, chain, tree, block, typical;
  constexpr explicit VerifyMethod(int32_t row) : row_(row) {}
  constexpr int32_t row() const { return row_; }
  constexpr bool operator==(VerifyMethod other) const { return row_ == other.row_; }
  constexpr bool operator!=(VerifyMethod other) const { return row_ != other.row_; }

 private:
  int32_t row_;
};
inline constexpr VerifyMethod VerifyMethod::greedy{0}, VerifyMethod::chain{1}, VerifyMethod::tree{2},
    VerifyMethod::block{3}, VerifyMethod::typical{4};

// The table's traits of a method, which the generation loop and the device path read instead of naming methods.
VerifyMethod parse_verify_method(const std::string& text);
const char* verify_method_name(VerifyMethod m);
// Lossy methods do not preserve the target law; they are labelled as such in every report.
bool is_lossy(VerifyMethod m);
// Whether the method verifies a tree with branching (the others verify one chain of drafted tokens).
bool verifies_trees(VerifyMethod m);
// Whether the method compares the draft with the target's argmax: it is lossless against greedy decoding only,
// so its target sampler runs at temperature 0 unless one is given, and must be greedy.
bool verifies_greedily(VerifyMethod m);
// The CUDA verification kernel (and its host emulation) that runs the method: none (CPU only), the chain kernel
// (draft laws or point masses; greedy methods read no draft law), the block kernel or the tree kernel.
enum class VerifyKernel { none, chain, block, tree };
VerifyKernel device_kernel(VerifyMethod m);
inline bool has_device_kernel(VerifyMethod m) { return device_kernel(m) != VerifyKernel::none; }

// Keys of the Philox draws of one speculative step of one sequence. Every role has its own stream and
// each draw its own slot, so the accept test's uniform never picks a residual token and results do not
// depend on how sequences are batched.
struct StepRandom {
  uint64_t seed = 0;
  uint64_t sequence = 0;
  uint64_t step = 0;
  RandomKey key(RandomRole role, uint32_t slot) const {
    if (slot >= kMaxDrawsPerStep)  // beyond it, this step's draws would reuse the next step's uniforms
      fail("random draw ", slot, " of one speculative step: a step draws at most ", kMaxDrawsPerStep, " uniforms");
    return {seed, philox_stream(sequence, role), step_draw_offset(step, slot)};
  }
};

struct VerifyOutcome {
  std::vector<Token> emitted;  // accepted draft tokens, then the correction or bonus token
  int32_t accepted = 0;        // number of accepted draft tokens
  std::vector<int32_t> path;   // accepted tree nodes, root's child first
  bool all_accepted = false;   // the last emitted token is a bonus token
  int32_t q_zero_errors = 0;   // drafted tokens whose recorded q was 0: a bookkeeping bug upstream
};

// Medusa's typical acceptance thresholds (Cai et al. 2024): epsilon = posterior_threshold,
// delta = posterior_alpha.
struct TypicalAcceptance {
  double epsilon = 0.09;
  double delta = 0.3;
};

// Greedy: accept while the draft equals argmax p (lowest id on ties); emit argmax at the first mismatch.
VerifyOutcome verify_greedy(const float* p, const TokenTree& chain, int32_t vocab_size);
// Token-wise rejection sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023). Rows of chain.draft_q
// that are empty are point masses (accept with p(d), residual = p with d removed).
VerifyOutcome verify_chain(const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng);
// Recursive rejection sampling over a tree (SpecInfer Alg. 2, RSD, EAGLE): see verify/ALGORITHMS.md §3.
VerifyOutcome verify_tree(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng);
// Block verification (Sun et al., ICLR 2025, Alg. 2). Needs every q row; falls back to chain otherwise.
VerifyOutcome verify_block(const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng);
// Medusa typical acceptance: LOSSY. Accept d_i iff p_i(d_i) > min(eps, delta * exp(-H(p_i))), keep the
// longest accepted prefix, then sample the next token from p at the first unaccepted position.
VerifyOutcome verify_typical(const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng,
                             const TypicalAcceptance& params = {});

VerifyOutcome verify(VerifyMethod method, const float* p, const TokenTree& tree, int32_t vocab_size,
                     const StepRandom& rng);

// Draws from norm(weights) where weights are unnormalised and non-negative, falling back to `fallback`
// when every weight is zero (verify/ALGORITHMS.md §1: float32 residuals near 0).
Token sample_residual(const std::vector<double>& weights, const float* fallback, int32_t vocab_size, double u);

// The uniform of an accept test (mutant uniform_closed_at_zero: 8-bit resolution in [0, 1), so u = 0
// happens with probability 1/256, as a float32 torch.rand does with probability 2^-24).
double accept_uniform(const StepRandom& rng, uint32_t slot);

}  // namespace specula
