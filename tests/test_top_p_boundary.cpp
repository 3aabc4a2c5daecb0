// top-p at its exact boundary: rows whose mass above a tie group equals top_p * Z exactly, in the float64
// arithmetic of the CPU pipeline and in the kernels' fixed-point masses alike, not merely within 1e-13 of it.
// The convention (verify/ALGORITHMS.md §2): keep x iff the mass strictly above x is < top_p * Z, so the group
// sitting exactly on the boundary is dropped. Checked on the CPU pipeline, the fused sampler's row code on the
// host, and its block emulation; the mutant that keeps the boundary group fails all three.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/emulated_kernels.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/philox.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

namespace {

// Logits (m, l) whose weight exp(l - m), computed as the pipeline and the kernels compute it (float64 exp of the
// float64 difference of the floats), is exactly the dyadic num / den. Found by searching floats l near m + ln(e)
// for tiny m, whose low bits make l - m land on the one or two doubles whose exp rounds to e.
struct ExactWeight {
  int32_t num = 0, den = 0;
  float max_logit = 0, logit = 0;
};

std::optional<ExactWeight> find_exact_weight() {
  for (int32_t den = 2; den <= 64; den *= 2)
    for (int32_t num = 1; num < den; num += 2) {
      const double e = static_cast<double>(num) / den, x = std::log(e);
      float l = static_cast<float>(x);
      for (int i = 0; i < 40; ++i, l = std::nextafter(l, 0.0f)) {
        float m = static_cast<float>(static_cast<double>(l) - x);
        for (int j = 0; j < 3; ++j, m = std::nextafter(m, 1.0f))
          if (m > l && std::exp(static_cast<double>(l) - static_cast<double>(m)) == e)
            return ExactWeight{num, den, m, l};
      }
    }
  return std::nullopt;
}

// A row with `a` tokens at the maximum (weight 1 each) and `den` tokens of weight num/den, so that Z = a + num is a
// power of two and every probability is a dyadic fraction: the mass above the lower group is exactly a / Z.
struct BoundaryRow {
  std::vector<float> logits;
  int32_t top = 0;        // tokens of the upper group: ids [0, top)
  float boundary = 0.0f;  // a / Z, exactly the mass above the lower group (a float: few bits)
};

BoundaryRow boundary_row(const ExactWeight& w) {
  int32_t z = 1;
  while (z <= w.num) z *= 2;
  BoundaryRow r;
  r.top = z - w.num;
  r.logits.assign(static_cast<size_t>(r.top), w.max_logit);
  r.logits.insert(r.logits.end(), static_cast<size_t>(w.den), w.logit);
  r.logits.push_back(-std::numeric_limits<float>::infinity());  // a masked token: never kept
  r.boundary = static_cast<float>(r.top) / static_cast<float>(z);
  REQUIRE(static_cast<double>(r.boundary) * z == r.top);  // exactly representable
  return r;
}

using KeptSet = std::vector<bool>;

KeptSet kept_by_pipeline(const BoundaryRow& row, float top_p) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = top_p;
  const std::vector<float> probs =
      SamplerPipeline(params, static_cast<int32_t>(row.logits.size())).process(row.logits, {});
  KeptSet kept;
  for (float p : probs) kept.push_back(p > 0.0f);
  return kept;
}

// The fused sampler's row code, on the host (one thread) or under block emulation (several threads).
KeptSet kept_by_kernel(const BoundaryRow& row, float top_p, std::optional<int> emulated_threads) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_p = top_p;
  const int32_t vocab = static_cast<int32_t>(row.logits.size());
  const TokenHistory history;
  const SamplerBatch batch(vocab, {{&params, &history, RandomKey{7, philox_stream(0, RandomRole::sample), 0}}});
  std::vector<float> probs(row.logits.size());
  int32_t token = -1, status = -1;
  const SamplerKernelParams p = batch.host_params(row.logits.data(), probs.data(), &token, &status);
  if (emulated_threads)
    emulate_fused_sampler(p, EmulationOptions{*emulated_threads, FiberSchedule::rotating});
  else
    run_fused_sampler_host(p);
  KeptSet kept;
  for (float q : probs) kept.push_back(q > 0.0f);
  return kept;
}

KeptSet expected(const BoundaryRow& row, bool lower_group_kept) {
  KeptSet kept(row.logits.size(), false);
  for (size_t i = 0; i + 1 < row.logits.size(); ++i) kept[i] = static_cast<int32_t>(i) < row.top || lower_group_kept;
  return kept;
}

}  // namespace

TEST_CASE("top-p drops the group whose preceding mass equals top_p * Z exactly: pipeline and kernels",
          "[exact][sampler][top-p]") {
  const std::optional<ExactWeight> w = find_exact_weight();
  REQUIRE(w);  // this libm's exp rounds some l - m to a dyadic value (the search finds dozens)
  const BoundaryRow row = boundary_row(*w);
  INFO("weight " << w->num << "/" << w->den << ", " << row.top << " tokens above, boundary " << row.boundary);
  const float above = std::nextafter(row.boundary, 1.0f), below = std::nextafter(row.boundary, 0.0f);
  const auto all_backends_give = [&](float top_p, const KeptSet& want) {
    CHECK(kept_by_pipeline(row, top_p) == want);
    CHECK(kept_by_kernel(row, top_p, std::nullopt) == want);
    CHECK(kept_by_kernel(row, top_p, 8) == want);
  };
  SECTION("the boundary itself, and one float either side") {
    all_backends_give(row.boundary, expected(row, false));
    all_backends_give(below, expected(row, false));
    all_backends_give(above, expected(row, true));
  }
  SECTION("mutant: keeping the boundary group is caught on every backend") {
    const ScopedMutant mutant(Mutant::top_p_keeps_boundary_token);
    CHECK(kept_by_pipeline(row, row.boundary) == expected(row, true));
    CHECK(kept_by_kernel(row, row.boundary, std::nullopt) == expected(row, true));
    CHECK(kept_by_kernel(row, row.boundary, 8) == expected(row, true));
    // Away from the boundary the mutant changes nothing: only a row on it tells the conventions apart.
    CHECK(kept_by_pipeline(row, above) == expected(row, true));
    CHECK(kept_by_pipeline(row, below) == expected(row, false));
  }
}
