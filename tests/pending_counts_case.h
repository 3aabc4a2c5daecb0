// A random case of the pending-counts kernel (kernels/pending_counts.h), shared by its host test and its GPU parity
// test: rows of counts already holding the host's occurrences, ids with repeats (many entries add to one count at once)
// and failed draws (-1), entries pointing at them.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/pending_counts.h"

namespace specula::testing {

struct PendingCountsCase {
  int32_t rows = 0, vocab = 0;
  std::vector<int32_t> counts, ids, entries;

  PendingCountsParams params(int32_t* counts_at, const int32_t* ids_at, const int32_t* entries_at) const {
    PendingCountsParams p;
    p.counts = counts_at;
    p.ids = ids_at;
    p.entries = entries_at;
    p.n = static_cast<int32_t>(entries.size() / 2);
    p.rows = rows;
    p.vocab = vocab;
    return p;
  }
};

// `n` entries over `rows` rows of V = `vocab`; ids from a few tokens so that entries collide.
inline PendingCountsCase pending_counts_case(uint64_t seed, int32_t rows, int32_t vocab, int32_t n) {
  std::mt19937_64 rng(seed);
  PendingCountsCase c;
  c.rows = rows;
  c.vocab = vocab;
  c.counts.resize(static_cast<size_t>(rows) * static_cast<size_t>(vocab));
  for (int32_t& x : c.counts) x = static_cast<int32_t>(rng() % 3);
  const int32_t few = vocab < 5 ? vocab : 5;
  for (int32_t i = 0; i < 64; ++i)
    c.ids.push_back(i % 16 == 15 ? -1 : static_cast<int32_t>(rng() % static_cast<uint64_t>(few)) * (vocab / few));
  for (int32_t e = 0; e < n; ++e) {
    c.entries.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(rows)));
    c.entries.push_back(static_cast<int32_t>(rng() % c.ids.size()));
  }
  return c;
}

}  // namespace specula::testing
