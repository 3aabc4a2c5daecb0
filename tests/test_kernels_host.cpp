// The kernels' host side, on any machine: device selection and its errors, the batch builder's refusals,
// the shared threshold helpers, and the fused sampler's per-row algorithm (run on the CPU through
// HostBlock) against the reference pipeline. The same algorithm runs on the GPU in test_cuda_parity.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "fp_contract_probe.h"
#include "kernel_sampler_cases.h"
#include "kernels/cuda_device.h"
#include "kernels/philox_fill.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"
#include "kernels/shared/sampler_math.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

TEST_CASE("devices have their --device names, and the CPU needs no GPU", "[kernels][device]") {
  CHECK(std::string(device_name(Device::cpu)) == "cpu");
  CHECK(std::string(device_name(Device::cuda)) == "cuda");
  CHECK(std::string(device_name(Device::cuda_host)) == "cuda-host");
  CHECK_NOTHROW(require_device(Device::cpu));
}

TEST_CASE("asking for CUDA without a usable device is a clear error, not a crash", "[kernels][device]") {
  if (cuda_device_count_or_zero() > 0) {
    CHECK_NOTHROW(require_cuda_device());
    CHECK(cuda_unavailable_reason().empty());
    return;
  }
  const std::string reason = cuda_unavailable_reason();
  CHECK_FALSE(reason.empty());
  CHECK_THROWS_WITH(require_cuda_device(), Catch::StartsWith("no CUDA device: ") && Catch::Contains(reason));
  CHECK_THROWS_WITH(require_device(Device::cuda), Catch::StartsWith("no CUDA device: "));
  if (!built_with_cuda()) CHECK_THAT(reason, Catch::Contains("-DSPECULA_CUDA=ON"));

  // The launchers check their params first, then refuse with the same message.
  std::vector<float> logits(8, 0.0f), probs(8);
  std::vector<int32_t> tokens(1), status(1);
  std::vector<SamplerRowParams> rows(1);
  SamplerKernelParams p;
  p.logits = logits.data();
  p.rows = rows.data();
  p.probs = probs.data();
  p.tokens = tokens.data();
  p.status = status.data();
  p.batch = 1;
  p.vocab = 8;
  CHECK_THROWS_WITH(launch_fused_sampler(p), Catch::StartsWith("no CUDA device: "));
  double out = 0;
  CHECK_THROWS_WITH(launch_philox_fill(PhiloxFillParams{1, 2, 3, 1, &out}), Catch::StartsWith("no CUDA device: "));
}

TEST_CASE("kernel params check() names the bad field", "[kernels]") {
  SamplerKernelParams p;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("batch"));
  p.batch = 1;
  p.vocab = 4;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("logits"));
  CHECK_THROWS_WITH(PhiloxFillParams{}.check(), Catch::Contains("count"));
}

TEST_CASE("the fused sampler's dispatch splits large rows over a cluster whose slices fit shared memory", "[kernels]") {
  alignas(16) static float buffer[4];
  SamplerKernelParams p;
  p.logits = buffer;
  p.probs = buffer + 0;
  const auto config = [&](int32_t vocab, int32_t blocks = 0) {
    p.vocab = vocab;
    p.cluster_blocks = blocks;
    return choose_fused_sampler_config(p);
  };
  CHECK(config(1000).ctas == 1);
  CHECK(config(1000).block == 256);
  CHECK(config(16384).ctas == 1);
  CHECK(config(16384).block == 512);
  CHECK(config(32000).ctas == 2);
  CHECK(config(32000).block == 256);
  CHECK(config(128256).ctas == 8);
  CHECK(config(128256).vec == 4);
  CHECK(config(262144).ctas == 8);   // 32K tokens (128 KiB) per block
  CHECK(config(400000).ctas == 1);   // 50K per block would not fit: one block per row, through global memory
  CHECK(config(1000, 3).ctas == 3);  // asked for
  CHECK(config(128256, 1).ctas == 1);
  CHECK(config(128256, 1).block == 512);
  // Slices are whole vectors, cover the row, and may be empty at its end.
  CHECK(cluster_slice_span(128256, 8, 4) == 16032);
  CHECK(cluster_slice_span(7, 8, 1) == 1);
  CHECK(cluster_slice_span(1003, 3, 1) == 335);
  CHECK(cluster_slice_span(1000, 3, 4) == 336);

  p.batch = 1;
  p.vocab = 1000;
  p.rows = reinterpret_cast<const SamplerRowParams*>(buffer);
  p.probs = buffer + 1;
  p.tokens = reinterpret_cast<int32_t*>(buffer + 2);
  p.status = reinterpret_cast<int32_t*>(buffer + 3);
  p.cluster_blocks = 9;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("cluster_blocks must be in [0, 8], got 9"));
  p.vocab = 400000;
  p.cluster_blocks = 8;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("slices of more than 40960 tokens"));
  p.vocab = 1000;
  p.row_exchange = static_cast<RowExchange>(2);
  CHECK_THROWS_WITH(p.check(), Catch::Contains("row_exchange must be automatic (0) or global_memory (1), got 2"));
}

TEST_CASE("the batch builder refuses what the kernel cannot do, by name", "[kernels]") {
  TokenHistory h;
  const auto build = [&](const SamplingParams& s) { return SamplerBatch(100, {{&s, &h, RandomKey{}}}); };
  const auto refused = [&](const char* field, auto set) {
    SamplingParams s;
    set(s);
    CHECK_THROWS_WITH(build(s), Catch::Contains(std::string("not supported on cuda: ") + field));
  };
  refused("typical_p", [](SamplingParams& s) { s.typical_p = 0.9f; });
  refused("tfs_z", [](SamplingParams& s) { s.tfs_z = 0.9f; });
  refused("mirostat", [](SamplingParams& s) { s.mirostat = 2; });
  refused("dynatemp", [](SamplingParams& s) { s.dynatemp_range = 0.5f; });
  refused("bad_words", [](SamplingParams& s) { s.bad_words = {{3, 4}}; });
  refused("logit_bias", [](SamplingParams& s) { s.logit_bias = {{3, 1.0f}, {3, 2.0f}}; });
  SamplingParams bad;
  bad.top_p = 1.5f;
  CHECK_THROWS_WITH(build(bad), Catch::Contains("row 0") && Catch::Contains("top_p"));
  SamplingParams greedy_typical;  // greedy rows never run the filters: nothing is dropped
  greedy_typical.temperature = 0.0f;
  greedy_typical.typical_p = 0.5f;
  CHECK_NOTHROW(build(greedy_typical));
}

TEST_CASE("float order keys sort like floats and round-trip", "[kernels][math]") {
  std::mt19937 rng(7);
  std::vector<float> v = {
      -std::numeric_limits<float>::infinity(), -1e30f, -2.0f, -1e-40f, -0.0f, 0.0f, 1e-40f, 3.0f, 1e30f,
      std::numeric_limits<float>::infinity()};
  std::normal_distribution<float> n(0.0f, 5.0f);
  for (int i = 0; i < 1000; ++i) v.push_back(n(rng));
  for (float a : v) {
    CHECK(float_bits(float_from_order_key(float_order_key(a))) == float_bits(a));
    for (int j = 0; j < 20; ++j) {
      const float b = v[static_cast<size_t>(j) * 37 % v.size()];
      if (a < b) CHECK(float_order_key(a) < float_order_key(b));
    }
  }
}

TEST_CASE("min_p_threshold is the exact boundary of min_p_keeps", "[kernels][math]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 6.0f);
  for (float min_p : {1e-6f, 0.01f, 0.05f, 0.3f, 0.999f, 1.0f}) {
    for (int trial = 0; trial < 50; ++trial) {
      const float m = n(rng);
      const float t = min_p_threshold(m, min_p);
      CHECK(min_p_keeps(t, m, min_p));
      CHECK_FALSE(min_p_keeps(std::nextafter(t, -std::numeric_limits<float>::infinity()), m, min_p));
      for (int i = 0; i < 50; ++i) {
        const float x = m - std::fabs(n(rng));
        CHECK(min_p_keeps(x, m, min_p) == (x >= t));
      }
    }
  }
}

TEST_CASE("fixed-point masses cannot overflow and round to the nearest unit", "[kernels][math]") {
  for (int64_t count : {int64_t(1), int64_t(2), int64_t(1000), int64_t(128256), int64_t(1) << 30}) {
    const int shift = fixed_mass_shift(count);
    const double scale = static_cast<double>(uint64_t(1) << shift);
    // count tokens of mass at most 1 (the maximum) sum below 2^63.
    CHECK(static_cast<double>(count) * scale < 9.3e18);
    CHECK(fixed_mass(0.0f, 0.0f, scale) == uint64_t(1) << shift);
  }
  CHECK(top_p_fixed_target(1000, 0.5f) == 500);
  CHECK(top_p_fixed_target(1001, 0.5f) == 501);  // mass above < 500.5 <=> mass above <= 500 < 501
  CHECK(top_p_fixed_target(10, 1e-9f) == 1);
}

TEST_CASE("float-first masses stay within their error bound of the fixed-point masses", "[kernels][math]") {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  double worst = 0.0;  // the largest |approx - exact| / exact seen over masses of at least 2^30 units
  for (int64_t count : {int64_t(1), int64_t(1000), int64_t(128256)}) {
    const int shift = fixed_mass_shift(count);
    const double scale = static_cast<double>(uint64_t(1) << shift);
    const float approx_scale = static_cast<float>(uint64_t(1) << shift);
    for (int i = 0; i < 200000; ++i) {
      const float max_logit = normal(rng) * 20.0f;
      const float x = max_logit - std::fabs(normal(rng)) * (i % 3 == 0 ? 30.0f : 4.0f);
      const uint64_t exact = fixed_mass(x, max_logit, scale), approx = approx_fixed_mass(x, max_logit, approx_scale);
      const double difference = std::fabs(static_cast<double>(approx) - static_cast<double>(exact));
      REQUIRE(difference <= kApproxMassRelativeError * static_cast<double>(exact) + 3.0);
      if (exact >= (uint64_t(1) << 30)) worst = std::max(worst, difference / static_cast<double>(exact));
    }
    CHECK(approx_fixed_mass(1.5f, 1.5f, approx_scale) == uint64_t(1) << shift);
  }
  INFO("worst relative error " << worst << " against the bound " << kApproxMassRelativeError);
  CHECK(worst < kApproxMassRelativeError / 2);
  const float big = std::numeric_limits<float>::max();
  CHECK(approx_fixed_mass(-big, big, 1024.0f) == 0);  // x - max overflows to -inf: mass 0, as the exact one
  CHECK(approx_fixed_mass(-120.0f, 0.0f, 1024.0f) == 0);
}

TEST_CASE("the guard band certifies only what the bounds prove", "[kernels][math]") {
  const uint64_t z = uint64_t(1) << 62;  // a row total; top_p 0.5 puts the target at 2^61
  const uint64_t band = approx_mass_error(z / 2, 1000);
  CHECK(approx_top_p_certain(z / 4, z / 2 + 4 * band, z, 1000, 0.5f));    // the step clears the band both ways
  CHECK_FALSE(approx_top_p_certain(z / 2 - band / 2, z, z, 1000, 0.5f));  // mass above may reach the target
  CHECK_FALSE(approx_top_p_certain(0, z / 2 + band / 2, z, 1000, 0.5f));  // mass through may fall short of it
  CHECK(approx_mass_error(0, 10) == 30 + 4096);
}

// The share of rows whose float pass cannot decide (top-p over normal logits, standard deviation `spread`,
// top_p 0.9): the exact threshold's group from a sort, its approximate weights, and the guard band's test.
static double float_pass_fallback_rate(int32_t vocab, float spread, int rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  int fallbacks = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> x(static_cast<size_t>(vocab));
    for (float& v : x) v = normal(rng);
    const std::vector<testing::MassGroup> groups = testing::mass_groups(x.data(), vocab);
    const uint64_t target = top_p_fixed_target(groups.back().through, 0.9f);
    uint64_t approx_above = 0;
    for (const testing::MassGroup& g : groups) {
      if (g.through >= target) {  // the crossing group: the exact select's value
        fallbacks +=
            approx_top_p_certain(approx_above, g.approx_through, groups.back().approx_through, vocab, 0.9f) ? 0 : 1;
        break;
      }
      approx_above = g.approx_through;
    }
  }
  return static_cast<double>(fallbacks) / rows;
}

TEST_CASE("the guard band is narrow enough for the float pass to decide most rows", "[kernels][math]") {
  // Flat rows are the hard case: the crossing token of a 128K-token row holds ~3e-6 of the mass, while the
  // band is ~2e-7 wide (2 eps top_p (1 - top_p) Z). Measured: 7% of such rows fall back, about 1% of
  // 32K-token rows. Bounding Z apart from its parts (A and Z - A) would widen the band tenfold at top_p 0.9:
  // 45% of the 128K-token rows would fall back.
  const double flat = float_pass_fallback_rate(128256, 2.5f, 60, 3);
  const double small = float_pass_fallback_rate(32000, 2.5f, 60, 4);
  const double peaked = float_pass_fallback_rate(128256, 6.0f, 60, 5);
  INFO("fall-backs: " << flat << " of 128K-token rows, " << small << " of 32K-token rows, " << peaked
                      << " of peaked 128K-token rows");
  CHECK(flat <= 0.2);
  CHECK(small <= 0.05);
  CHECK(peaked <= 0.05);
}

TEST_CASE("the float-first and exact top-p passes give identical rows", "[kernels][sampler]") {
  for (int32_t vocab : {64, 4096}) {
    const testing::SamplerCase c = testing::random_sampler_case(77 + vocab, vocab, 40);
    const SamplerBatch batch(c.vocab, c.rows());
    std::vector<float> probs[2];
    std::vector<int32_t> tokens[2];
    for (int pass = 0; pass < 2; ++pass) {
      probs[pass].resize(c.logits.size());
      tokens[pass].resize(c.batch());
      std::vector<int32_t> status(c.batch());
      SamplerKernelParams p =
          batch.host_params(c.logits.data(), probs[pass].data(), tokens[pass].data(), status.data());
      p.top_p_pass = pass == 0 ? TopPPass::float_first : TopPPass::exact;
      run_fused_sampler_host(p);
    }
    CHECK(probs[0] == probs[1]);
    CHECK(tokens[0] == tokens[1]);
  }
}

TEST_CASE("top-p at a step of the cumulative mass keeps exactly the fixed-point nucleus", "[kernels][sampler]") {
  // Every row's top_p * Z lies within a few float ulps of a step, inside the float pass's error band: the
  // guard band must send these rows to the exact pass. Without it (the mutant) some rows keep a tie group
  // too many or too few; the test's power is that check.
  const testing::SamplerCase c = testing::top_p_boundary_case(23, 1000, 300);
  const SamplerBatch batch(c.vocab, c.rows());
  const auto run = [&](TopPPass pass) {
    std::vector<float> probs(c.logits.size());
    std::vector<int32_t> tokens(c.batch()), status(c.batch());
    SamplerKernelParams p = batch.host_params(c.logits.data(), probs.data(), tokens.data(), status.data());
    p.top_p_pass = pass;
    run_fused_sampler_host(p);
    return testing::count_top_p_boundary_mismatches(c, probs.data());
  };
  CHECK(run(TopPPass::float_first) == 0);
  CHECK(run(TopPPass::exact) == 0);
  ScopedMutant mutant(Mutant::top_p_float_pass_uncertified);
  const int32_t uncertified = run(TopPPass::float_first);
  INFO(uncertified << " of " << c.batch() << " rows differ when the float pass decides alone");
  CHECK(uncertified >= 5);
}

TEST_CASE("the fused sampler algorithm on the CPU matches the reference pipeline", "[kernels][sampler]") {
  for (int32_t vocab : {1, 2, 7, 64, 333, 4096}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const testing::SamplerCase c = testing::random_sampler_case(seed * 1000 + vocab, vocab, 24);
      const SamplerBatch batch(vocab, c.rows());
      std::vector<float> probs(c.logits.size(), std::nanf(""));
      std::vector<int32_t> tokens(c.batch(), -7), status(c.batch(), -7);
      run_fused_sampler_host(batch.host_params(c.logits.data(), probs.data(), tokens.data(), status.data()));
      for (int32_t r = 0; r < c.batch(); ++r) {
        // Same algorithm, float64 sums in the same order as the CPU: only expf vs exp separates them.
        const testing::RowComparison cmp =
            testing::compare_row(c, r, probs.data() + static_cast<size_t>(r) * vocab, tokens[r], status[r], 1e-6);
        INFO("vocab " << vocab << " seed " << seed << ": " << cmp.message);
        CHECK(cmp.ok);
      }
    }
  }
}

TEST_CASE("failed rows get a status, NaN probabilities and token -1", "[kernels][sampler]") {
  const int32_t vocab = 16;
  SamplingParams plain, masked;
  masked.allowed_tokens = {3};
  masked.min_tokens = 2;
  masked.stop_tokens = {3};
  TokenHistory h;
  std::vector<float> logits(3 * vocab, 0.5f);
  logits[5] = std::nanf("");                                   // row 0: NaN
  logits[vocab + 9] = std::numeric_limits<float>::infinity();  // row 1: +inf
  const SamplerBatch batch(vocab, {{&plain, &h, {}}, {&plain, &h, {}}, {&masked, &h, {}}});
  std::vector<float> probs(logits.size());
  std::vector<int32_t> tokens(3), status(3);
  run_fused_sampler_host(batch.host_params(logits.data(), probs.data(), tokens.data(), status.data()));
  CHECK(status[0] == static_cast<int32_t>(SamplerRowStatus::nan_logit));
  CHECK(status[1] == static_cast<int32_t>(SamplerRowStatus::pos_inf_logit));
  CHECK(status[2] == static_cast<int32_t>(SamplerRowStatus::all_masked));
  for (int32_t t : tokens) CHECK(t == -1);
  for (float p : probs) CHECK(std::isnan(p));
  CHECK_THROWS_WITH(check_sampler_status(status.data(), 3), Catch::Contains("row 0") && Catch::Contains("NaN"));
  // The CPU pipeline refuses the same rows.
  SamplerPipeline pipe(masked, vocab);
  CHECK_THROWS(pipe.process(std::vector<float>(vocab, 0.5f), h));
}

TEST_CASE("a greedy row whose penalties push every logit to -inf emits token 0, as the CPU pipeline",
          "[kernels][sampler]") {
  SamplingParams s;
  s.temperature = 0.0f;
  s.frequency_penalty = 3e38f;  // two occurrences: logit - 6e38 overflows to -inf
  TokenHistory h;
  h.output = {0, 1, 2, 3, 0, 1, 2, 3};
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, -1.0f};
  const std::vector<float> ref = SamplerPipeline(s, 4).process(logits, h);
  REQUIRE(ref[0] == 1.0f);
  const SamplerBatch batch(4, {SamplerBatchRow{&s, &h, RandomKey{1, 2, 3}}});
  std::vector<float> probs(4);
  std::vector<int32_t> token(1), status(1);
  run_fused_sampler_host(batch.host_params(logits.data(), probs.data(), token.data(), status.data()));
  CHECK(status[0] == 0);
  CHECK(token[0] == 0);
  CHECK(probs == ref);
}

TEST_CASE("the shared math is not contracted into FMA on the host, even with FMA instructions enabled",
          "[kernels][math]") {
  if (!__builtin_cpu_supports("fma")) {
    WARN("this CPU has no FMA: the probe cannot run here");
    return;
  }
  // w * p rounds to q exactly, so the two-rounding result is 0; fused, it is the product's lost 2^-60.
  const double w = 1.0 + std::ldexp(1.0, -30), p = w, q = 1.0 + std::ldexp(1.0, -29);
  volatile double product = w * p;  // volatile: rounded on its own
  const double unfused = product - q > 0.0 ? product - q : 0.0;
  CHECK(unfused == 0.0);
  CHECK(testing::block_residual_project_flags(w, p, q) == unfused);
  // The probe can tell: the same code built with -ffp-contract=fast gives the fused value.
  CHECK(testing::block_residual_contracted(w, p, q) == std::ldexp(1.0, -60));
  // float: logit - frequency * count, where 3 * (1 + 2^-23) is not a float.
  const float f = 1.0f + std::ldexp(1.0f, -23);
  volatile float scaled = f * 3.0f;
  const float expected = 3.0f - scaled;
  CHECK(testing::frequency_penalty_project_flags(3.0f, 3, f) == expected);
  CHECK(testing::frequency_penalty_contracted(3.0f, 3, f) != expected);
}
