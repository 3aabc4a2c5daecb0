#include <catch2/catch.hpp>
#include <set>

#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "tests/support/mutant_switch.h"
#include "verify/verifiers/token_tree.h"
#include "verify/verifiers/verification.h"

using namespace specula;

// Known-answer vectors of Philox4x32-10 from Random123's kat_vectors.
TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[philox]") {
  struct Kat {
    PhiloxBlock ctr;
    uint32_t key0, key1;
    PhiloxBlock expected;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const PhiloxBlock out = philox4x32_10(k.ctr, k.key0, k.key1);
    for (int i = 0; i < 4; ++i) CHECK(out.x[i] == k.expected.x[i]);
  }
}

TEST_CASE("uniforms are strictly inside (0, 1) at the extremes of the bit range", "[philox]") {
  CHECK(uniform_open_from_bits(0, 0) > 0.0);
  CHECK(uniform_open_from_bits(0xffffffffu, 0xffffffffu) < 1.0);
  CHECK(uniform_open_from_bits(0, 0) == 1.1102230246251565404e-16);
}

TEST_CASE("streams and offsets give different uniforms; equal keys give equal ones", "[philox]") {
  CHECK(philox_uniform(1, 2, 3) == philox_uniform(1, 2, 3));
  CHECK(philox_uniform(1, 2, 3) != philox_uniform(1, 2, 4));
  CHECK(philox_uniform(1, 2, 3) != philox_uniform(1, 3, 3));
  CHECK(philox_uniform(1, 2, 3) != philox_uniform(2, 2, 3));
}

TEST_CASE("no two draws of different steps share a uniform, up to the per-step bound", "[philox]") {
  // A step that draws 300 times (a 300-node tree's draft, residual and bonus draws) beside its neighbours: every
  // uniform must be distinct. Distinct Philox counters give equal doubles with probability below 1e-9 here (the
  // birthday bound over 2^52 values), while a packing that lets a step's late slots reach the next step's early
  // ones gives exactly equal uniforms, the coupling that breaks exactness across steps and no one-step law sees.
  const auto distinct_uniforms = [] {
    std::set<double> seen;
    size_t draws = 0;
    for (uint64_t step = 0; step < 4; ++step)
      for (RandomRole role : {RandomRole::draft, RandomRole::residual})
        for (uint32_t slot = 0; slot < 300; ++slot, ++draws)
          seen.insert(StepRandom{2026, 3, step}.key(role, slot).uniform());
    return seen.size() == draws;
  };
  CHECK(distinct_uniforms());
  // The packing's own bound: the last slot of a step lies below the first of the next, at small and large steps.
  for (uint64_t step : {uint64_t(0), uint64_t(1), uint64_t(1) << 20, (uint64_t(1) << 47) - 2}) {
    CHECK(step_draw_offset(step, kMaxDrawsPerStep - 1) < step_draw_offset(step + 1, 0));
    if (step > 0) CHECK(step_draw_offset(step, 0) > step_draw_offset(step - 1, kMaxDrawsPerStep - 1));
  }
  // A step may not draw more than the packing holds, and the largest draft tree stays far inside it.
  const StepRandom rng{1, 0, 0};
  CHECK_THROWS_AS(rng.key(RandomRole::residual, kMaxDrawsPerStep), Error);
  CHECK_NOTHROW(rng.key(RandomRole::residual, kMaxDrawsPerStep - 1));
  CHECK_NOTHROW(parse_tree_shape("64,63", "tree"));  // 4096 nodes
  CHECK_THROWS(parse_tree_shape("64,64", "tree"));   // 4160: over the 4096 a step may verify
  CHECK(4096 + 1 < kMaxDrawsPerStep);

  const ScopedMutant mutant(Mutant::step_draws_overlap);
  CHECK_FALSE(distinct_uniforms());
}
