#include <catch2/catch.hpp>

#include "kernels/shared/philox.h"

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
