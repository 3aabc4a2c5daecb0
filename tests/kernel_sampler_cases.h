// Random fused-sampler cases shared by the CPU test of the kernel algorithm (test_kernels_host.cpp) and
// the GPU parity test (test_cuda_parity.cpp), plus the comparison against the CPU reference pipeline.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/shared/philox.h"
#include "kernels/shared/sampler_math.h"
#include "verify/device/device_sampler.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula::testing {

struct SamplerCase {
  int32_t vocab = 0;
  std::vector<SamplingParams> params;
  std::vector<TokenHistory> histories;
  std::vector<RandomKey> keys;
  std::vector<float> logits;  // [B, V]

  int32_t batch() const { return static_cast<int32_t>(params.size()); }
  std::vector<SamplerBatchRow> rows() const {
    std::vector<SamplerBatchRow> out;
    for (size_t r = 0; r < params.size(); ++r) out.push_back({&params[r], &histories[r], keys[r]});
    return out;
  }
};

// Rows mixing every supported stage: greedy and sampled, all filter orders, penalties with histories,
// masks, bias (including -inf), min_tokens, and logits with many exact ties (quantised rows).
inline SamplerCase random_sampler_case(uint64_t seed, int32_t vocab, int32_t batch) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](auto... values) {
    using T = std::common_type_t<decltype(values)...>;
    const T options[] = {static_cast<T>(values)...};
    return options[std::uniform_int_distribution<size_t>(0, sizeof...(values) - 1)(rng)];
  };
  const auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  const auto below = [&](int32_t hi) { return std::uniform_int_distribution<int32_t>(0, hi - 1)(rng); };
  const auto token = [&](int32_t hi) {  // a token id below min(hi, vocab)
    return std::uniform_int_distribution<int32_t>(0, std::min(hi, vocab) - 1)(rng);
  };
  std::normal_distribution<float> normal(0.0f, 1.0f);

  SamplerCase c;
  c.vocab = vocab;
  c.logits.resize(static_cast<size_t>(batch) * vocab);
  for (int32_t r = 0; r < batch; ++r) {
    float* row = c.logits.data() + static_cast<size_t>(r) * vocab;
    const int style = below(4);
    const float scale = pick(0.5f, 2.0f, 4.0f, 9.0f);
    for (int32_t i = 0; i < vocab; ++i) {
      float x = normal(rng) * scale;
      if (style == 1) x = std::round(x * 2.0f) / 2.0f;                              // heavy ties
      if (style == 2 && chance(0.01)) x += 12.0f;                                   // a few dominant tokens
      if (style == 3 && chance(0.05)) x = -std::numeric_limits<float>::infinity();  // pre-masked logits
      row[i] = x;
    }
    if (style == 3) row[token(vocab)] = 1.0f;  // keep at least one finite logit

    SamplingParams s;
    s.temperature = chance(0.15) ? 0.0f : pick(0.4f, 0.8f, 1.0f, 1.3f);
    if (chance(0.5)) s.min_p = pick(0.01f, 0.05f, 0.2f, 0.6f);
    if (chance(0.6)) s.top_k = pick(1, 2, 7, 50, vocab / 3, vocab + 3);
    if (chance(0.6)) s.top_p = pick(0.2f, 0.5f, 0.8f, 0.9f, 0.95f, 0.999f);
    if (chance(0.5)) {
      s.order = {FilterStage::min_p, FilterStage::top_k, FilterStage::top_p};
      std::shuffle(s.order.begin(), s.order.end(), rng);
    }
    if (chance(0.4)) s.repetition_penalty = pick(0.8f, 1.2f, 1.7f);
    if (chance(0.4)) s.frequency_penalty = pick(-0.3f, 0.5f, 1.1f);
    if (chance(0.4)) s.presence_penalty = pick(-0.2f, 0.7f);
    if (chance(0.2)) {
      s.banned_tokens = {token(vocab), token(vocab), token(16)};
      std::sort(s.banned_tokens.begin(), s.banned_tokens.end());
      s.banned_tokens.erase(std::unique(s.banned_tokens.begin(), s.banned_tokens.end()), s.banned_tokens.end());
    }
    if (chance(0.15)) {
      s.min_tokens = pick(1, 5, 40);
      s.stop_tokens = {token(vocab), token(8)};
    }
    if (chance(0.15)) {
      for (int32_t i = 0; i < vocab; ++i)
        if (chance(0.5)) s.allowed_tokens.push_back(i);
      s.allowed_tokens.push_back(vocab - 1);  // not banned below
    }
    // One token survives every mask, so the reference never refuses the row.
    const Token keep = s.allowed_tokens.empty() ? vocab - 1 : s.allowed_tokens.back();
    const auto drop = [&](std::vector<Token>& v) { v.erase(std::remove(v.begin(), v.end(), keep), v.end()); };
    drop(s.banned_tokens);
    drop(s.stop_tokens);
    if (style == 3) c.logits[static_cast<size_t>(r) * vocab + keep] = 0.5f;
    if (chance(0.25)) {
      std::vector<Token> biased = {token(vocab), token(vocab), token(32), token(vocab)};
      std::sort(biased.begin(), biased.end());
      biased.erase(std::unique(biased.begin(), biased.end()), biased.end());
      for (Token t : biased) s.logit_bias.push_back({t, pick(-5.0f, 3.0f, 100.0f, -0.5f)});
      if (chance(0.3)) s.logit_bias.back().second = -std::numeric_limits<float>::infinity();
      for (auto& [t, b] : s.logit_bias)  // never bias the surviving token to -inf
        if (t == keep) b = 1.0f;
    }

    TokenHistory h;
    const int32_t prompt_len = below(20), output_len = below(30);
    for (int32_t i = 0; i < prompt_len; ++i) h.prompt.push_back(chance(0.5) ? token(10) : token(vocab));
    for (int32_t i = 0; i < output_len; ++i) h.output.push_back(chance(0.5) ? token(10) : token(vocab));

    c.params.push_back(s);
    c.histories.push_back(h);
    c.keys.push_back(RandomKey{rng(), philox_stream(static_cast<uint64_t>(r), RandomRole::sample), rng() >> 20});
  }
  return c;
}

// One row (3001 tokens, top-k, top-p, a repetition penalty over prompt and output) drawn from 2100 times in
// three chunks by a RowSampler on `device`, beside what the CPU draws with the same keys (seed 8, stream 0 of
// `sample`, offsets 0..2099) and the largest difference between the processed distributions.
struct RowSamplerCheck {
  std::vector<int32_t> drawn, expected;
  double worst_probability_difference = 0.0;
};

inline RowSamplerCheck check_row_sampler(Device device) {
  std::mt19937_64 rng(91);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(3001);
  for (float& x : logits) x = normal(rng);
  SamplingParams s;
  s.temperature = 0.7f;
  s.top_k = 40;
  s.top_p = 0.9f;
  s.repetition_penalty = 1.3f;
  TokenHistory h;
  h.prompt = {5, 17, 2900};
  h.output = {17, 17, 40};
  RowSamplerCheck out;
  RowSampler sampler(device, s, h, logits);
  const uint64_t stream = philox_stream(0, RandomRole::sample);
  for (int32_t first : {0, 700, 1400})  // chunks reuse the uploaded row and the buffers
    for (int32_t t : sampler.draw(8, stream, static_cast<uint64_t>(first), 700)) out.drawn.push_back(t);
  const std::vector<float> ref = SamplerPipeline(s, 3001).process(logits, h);
  for (int32_t i = 0; i < 2100; ++i)
    out.expected.push_back(sample_categorical(ref.data(), 3001, RandomKey{8, stream, static_cast<uint64_t>(i)}));
  const std::vector<float> probs = sampler.distribution();
  for (size_t i = 0; i < ref.size(); ++i)
    out.worst_probability_difference =
        std::max(out.worst_probability_difference, static_cast<double>(std::fabs(probs[i] - ref[i])));
  return out;
}

struct RowComparison {
  bool ok = true;
  std::string message;
};

// Compares one row of a fused-sampler run with the reference: the processed distribution within `tol`
// (max abs), the same support (a token kept by one side and removed by the other is a filter decision
// mismatch, whatever its mass), the token drawn from the reference distribution, and the token that
// sample_categorical draws from the kernel's own distribution.
inline RowComparison compare_row(const SamplerCase& c, int32_t r, const float* probs, int32_t token, int32_t status,
                                 double tol) {
  std::ostringstream os;
  const int32_t v = c.vocab;
  SamplerPipeline pipeline(c.params[r], v);
  const float* logits = c.logits.data() + static_cast<size_t>(r) * v;
  const std::vector<float> ref = pipeline.process(std::vector<float>(logits, logits + v), c.histories[r]);
  const Token ref_token = sample_categorical(ref.data(), v, c.keys[r]);
  RowComparison out;
  if (status != 0) {
    os << "row " << r << ": status " << status;
    out.ok = false;
  }
  double max_diff = 0.0;
  int32_t support_mismatch = -1;
  for (int32_t i = 0; i < v; ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ref[i]) - probs[i]));
    const bool kept_ref = ref[i] > 0.0f, kept = probs[i] > 0.0f;
    if (kept_ref != kept && std::max(ref[i], probs[i]) > 1e-30f && support_mismatch < 0) support_mismatch = i;
  }
  if (!(max_diff <= tol)) {
    os << "row " << r << ": max |p - p_ref| = " << max_diff << " > " << tol << "; ";
    out.ok = false;
  }
  if (support_mismatch >= 0) {
    os << "row " << r << ": token " << support_mismatch << " kept by one side only (ref " << ref[support_mismatch]
       << ", kernel " << probs[support_mismatch] << "); ";
    out.ok = false;
  }
  if (token != ref_token) {
    os << "row " << r << ": token " << token << " != reference token " << ref_token << "; ";
    out.ok = false;
  }
  const Token own = sample_categorical(probs, v, c.keys[r]);
  if (token != own) {
    os << "row " << r << ": token " << token << " != sample_categorical(kernel probs) " << own << "; ";
    out.ok = false;
  }
  if (!out.ok)
    os << "params: " << c.params[r].describe() << " T=" << c.params[r].temperature << " min_p=" << c.params[r].min_p
       << " top_k=" << c.params[r].top_k << " top_p=" << c.params[r].top_p;
  out.message = os.str();
  return out;
}

// ---- top-p at a step of the cumulative mass (the float-first pass's guard band) ---------------------------

// The tie groups of a row's finite logits, most probable first, with the cumulative fixed-point mass
// through each (fixed_mass, as the kernel's exact pass) and the same for the float-first pass's
// approximations (approx_fixed_mass), at the kernel's scale for that many candidates.
struct MassGroup {
  float value;
  uint64_t through, approx_through;
};

inline std::vector<MassGroup> mass_groups(const float* logits, int32_t vocab) {
  std::vector<float> x;
  for (int32_t i = 0; i < vocab; ++i)
    if (std::isfinite(logits[i])) x.push_back(logits[i]);
  std::sort(x.begin(), x.end(), [](float a, float b) { return a > b; });
  const int shift = fixed_mass_shift(static_cast<int64_t>(x.size()));
  const double scale = static_cast<double>(uint64_t(1) << shift);
  const float approx_scale = static_cast<float>(uint64_t(1) << shift);
  std::vector<MassGroup> groups;
  uint64_t through = 0, approx_through = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    through += fixed_mass(x[i], x.front(), scale);
    approx_through += approx_fixed_mass(x[i], x.front(), approx_scale);
    if (i + 1 == x.size() || x[i + 1] != x[i]) groups.push_back({x[i], through, approx_through});
  }
  return groups;
}

// The kernel's top-p rule computed directly over a row of candidates (finite logits, temperature 1, no
// other stage): fixed_mass masses, tie groups in descending order, the first group whose cumulative mass
// reaches top_p_fixed_target(Z). Returns that group's value, the threshold the kernel must keep from.
inline float fixed_point_top_p_threshold(const float* logits, int32_t vocab, float top_p) {
  const std::vector<MassGroup> groups = mass_groups(logits, vocab);
  const uint64_t target = top_p_fixed_target(groups.back().through, top_p);
  for (const MassGroup& g : groups)
    if (g.through >= target) return g.value;
  return groups.back().value;
}

// Rows on a knife edge of the top-p rule: top_p * Z lies within ~1e-13 * Z of a step of the cumulative
// fixed-point mass (a tie group's lower edge), far inside the float-first pass's error band, so only the
// exact pass may decide. Built by choosing the step and a top_p near it (up to 3 floats away), then moving
// two tokens below the step (one large, one ~1e-5 as large) float by float until Z is as close as it gets to
// step / top_p. Odd rows have many exact ties (logits on a grid of 1/8).
inline SamplerCase top_p_boundary_case(uint64_t seed, int32_t vocab, int32_t batch) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  SamplerCase c;
  c.vocab = vocab;
  c.logits.resize(static_cast<size_t>(batch) * vocab);
  const double scale = static_cast<double>(uint64_t(1) << fixed_mass_shift(vocab));
  for (int32_t r = 0; r < batch; ++r) {
    float* row = c.logits.data() + static_cast<size_t>(r) * vocab;
    const float spread = 0.5f + 3.0f * static_cast<float>(r % 5) / 4.0f;
    for (int32_t i = 0; i < vocab; ++i) {
      row[i] = normal(rng) * spread + 0.0625f;  // + 1/16: never exactly 0, whose -0/+0 keys differ
      if (r % 2 == 1) row[i] = std::round(row[i] * 8.0f) / 8.0f + 0.0625f;
    }
    const float max_logit = *std::max_element(row, row + vocab);
    const auto mass = [&](float x) { return fixed_mass(x, max_logit, scale); };
    // The step: the cumulative mass through a tie group holding between 2% and 98% of the total.
    const std::vector<MassGroup> groups = mass_groups(row, vocab);
    uint64_t total = groups.back().through;
    struct Step {
      uint64_t through;
      float value, next;  // the group's value, and the next group's
    };
    std::vector<Step> steps;
    for (size_t g = 0; g + 1 < groups.size(); ++g)
      if (groups[g].through > total / 50 && groups[g].through < total - total / 50)
        steps.push_back({groups[g].through, groups[g].value, groups[g + 1].value});
    const Step step = steps[std::uniform_int_distribution<size_t>(0, steps.size() - 1)(rng)];
    float top_p = static_cast<float>(static_cast<long double>(step.through) / static_cast<long double>(total));
    for (int k = std::uniform_int_distribution<int>(-3, 3)(rng); k != 0; k += k > 0 ? -1 : 1)
      top_p = std::nextafter(top_p, k > 0 ? 2.0f : 0.0f);
    // Move Z towards step / top_p with a token of the group just below the step, then a small one; both
    // stay below the step's group, so the mass through it is unchanged.
    const long double wanted = static_cast<long double>(step.through) / static_cast<long double>(top_p);
    int32_t large = -1, small = -1;
    for (int32_t i = 0; i < vocab; ++i) {
      if (row[i] == step.next) large = i;
      if (row[i] < step.next - 11.0f && (small < 0 || row[i] > row[small])) small = i;
    }
    for (int32_t j : {large, small}) {
      if (j < 0) continue;
      const uint64_t others = total - mass(row[j]);
      const long double need = wanted - static_cast<long double>(others);  // the mass token j should have
      if (!(need > 0.0L)) continue;
      const float guess = static_cast<float>(max_logit + std::log(static_cast<double>(need) / scale));
      float best = row[j];
      long double best_gap = std::fabs(static_cast<long double>(others + mass(best)) - wanted);
      for (int64_t d = -64; d <= 64; ++d) {
        const float candidate = float_from_order_key(static_cast<uint32_t>(float_order_key(guess) + d));
        if (!(candidate < step.value)) continue;
        const long double gap = std::fabs(static_cast<long double>(others + mass(candidate)) - wanted);
        if (gap < best_gap) best_gap = gap, best = candidate;
      }
      row[j] = best;
      total = others + mass(best);
    }
    SamplingParams s;
    s.temperature = 1.0f;
    s.top_p = top_p;
    c.params.push_back(s);
    c.histories.emplace_back();
    c.keys.push_back(RandomKey{rng(), philox_stream(static_cast<uint64_t>(r), RandomRole::sample), 0});
  }
  return c;
}

// Rows of a top_p_boundary_case whose kept set (probability > 0) is not {x >= the fixed-point threshold}.
inline int32_t count_top_p_boundary_mismatches(const SamplerCase& c, const float* probs) {
  int32_t rows = 0;
  for (int32_t r = 0; r < c.batch(); ++r) {
    const float* logits = c.logits.data() + static_cast<size_t>(r) * c.vocab;
    const float threshold = fixed_point_top_p_threshold(logits, c.vocab, c.params[r].top_p);
    bool same = true;
    for (int32_t i = 0; i < c.vocab; ++i)
      same = same && (probs[static_cast<size_t>(r) * c.vocab + i] > 0.0f) == (logits[i] >= threshold);
    rows += same ? 0 : 1;
  }
  return rows;
}

}  // namespace specula::testing
