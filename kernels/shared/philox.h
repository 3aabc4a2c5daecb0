// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// counter-based generator of cuRAND and FlashInfer. A draw is a pure function of (seed, stream, offset),
// so CPU and CUDA produce identical uniforms and any run can be replayed from its seed.
#pragma once

#include <cstdint>

#include "kernels/shared/host_device.h"

namespace specula {

struct PhiloxBlock {
  uint32_t x[4];
};

SPECULA_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 on counter `ctr` with key `key` (constants from Random123).
SPECULA_HD PhiloxBlock philox4x32_10(PhiloxBlock ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = philox_mulhilo(kMul0, ctr.x[0], &hi0);
    const uint32_t lo1 = philox_mulhilo(kMul1, ctr.x[2], &hi1);
    PhiloxBlock next;
    next.x[0] = hi1 ^ ctr.x[1] ^ key0;
    next.x[1] = lo1;
    next.x[2] = hi0 ^ ctr.x[3] ^ key1;
    next.x[3] = lo0;
    ctr = next;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return ctr;
}

// The raw 128-bit block for (seed, stream, offset): key = seed, counter = (offset, stream).
SPECULA_HD PhiloxBlock philox_block(uint64_t seed, uint64_t stream, uint64_t offset) {
  PhiloxBlock ctr;
  ctr.x[0] = static_cast<uint32_t>(offset);
  ctr.x[1] = static_cast<uint32_t>(offset >> 32);
  ctr.x[2] = static_cast<uint32_t>(stream);
  ctr.x[3] = static_cast<uint32_t>(stream >> 32);
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// 52 random bits k -> (2k + 1) / 2^53: exactly representable, strictly inside (0, 1). An open interval
// matters: u = 0 would accept a token whose target probability is 0 (pytorch#16706, verify/ALGORITHMS.md §1).
SPECULA_HD double uniform_open_from_bits(uint32_t hi, uint32_t lo) {
  const uint64_t k = (static_cast<uint64_t>(hi) << 20) | (lo >> 12);  // 52 bits
  return static_cast<double>(2 * k + 1) * 1.1102230246251565404e-16;  // 2^-53
}

// One uniform in (0, 1) for (seed, stream, offset). Uses half of the block; simplicity over throughput.
SPECULA_HD double philox_uniform(uint64_t seed, uint64_t stream, uint64_t offset) {
  const PhiloxBlock b = philox_block(seed, stream, offset);
  return uniform_open_from_bits(b.x[0], b.x[1]);
}

// Names of independent random streams. Each role of a speculative step draws from its own stream so
// that, e.g., the accept test's uniform is never reused to pick the residual token (tests/TESTING.md mutants).
enum class RandomRole : uint32_t {
  sample = 0,    // plain sampling (autoregressive decoding, `specula sample`)
  draft = 1,     // the drafter's own draws
  accept = 2,    // accept/reject tests of the verifier
  residual = 3,  // the token drawn from the residual after a rejection
  bonus = 4,     // the token drawn after a fully accepted draft
  tree = 5,      // tree-shape randomness (sibling order, Gumbel keys)
  aux = 6,       // anything else (bench inputs, tests)
};

// A stream id from (sequence, role): 56 bits of sequence number, 8 bits of role. Streams of different
// sequences never overlap, so results do not depend on how sequences are batched.
SPECULA_HD uint64_t philox_stream(uint64_t sequence, RandomRole role) {
  return (sequence << 8) | static_cast<uint64_t>(role);
}

}  // namespace specula
