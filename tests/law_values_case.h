// A random case of the law-values gather (kernels/law_values.h), shared by its host test and its GPU parity test: rows
// of laws, ids with failed draws (-1) among them, entries pointing at any row and id (many at one value).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/law_values.h"

namespace specula::testing {

struct LawValuesCase {
  int64_t rows = 0;
  int32_t vocab = 0;
  std::vector<float> laws;
  std::vector<int32_t> ids;
  std::vector<int64_t> entries;

  LawValuesParams params(const float* laws_at, const int32_t* ids_at, const int64_t* entries_at,
                         float* values_at) const {
    LawValuesParams p;
    p.laws = laws_at;
    p.ids = ids_at;
    p.entries = entries_at;
    p.values = values_at;
    p.n = static_cast<int32_t>(entries.size() / 2);
    p.rows = rows;
    p.vocab = vocab;
    return p;
  }
};

// `n` entries over `rows` rows of V = `vocab`.
inline LawValuesCase law_values_case(uint64_t seed, int64_t rows, int32_t vocab, int32_t n) {
  std::mt19937_64 rng(seed);
  LawValuesCase c;
  c.rows = rows;
  c.vocab = vocab;
  c.laws.resize(static_cast<size_t>(rows) * static_cast<size_t>(vocab));
  for (float& x : c.laws) x = static_cast<float>(rng() % 1000003) / 1000003.0f;
  for (int32_t i = 0; i < 64; ++i)
    c.ids.push_back(i % 16 == 15 ? -1 : static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
  for (int32_t e = 0; e < n; ++e) {
    c.entries.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
    c.entries.push_back(static_cast<int64_t>(rng() % c.ids.size()));
  }
  return c;
}

}  // namespace specula::testing
