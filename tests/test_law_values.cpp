// The law-values gather's host backend (kernels/law_values.h, what cuda-host runs): each entry reads its id's value in
// its row, a failed draw's -1 reads -1, and bad parameters are refused by name. Against a read made here entry by
// entry.
#include <catch2/catch.hpp>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kernels/law_values.h"
#include "law_values_case.h"

using namespace specula;
using Catch::Matchers::Contains;

TEST_CASE("law values read each entry's id in its row, a failed draw's as -1", "[kernels]") {
  for (const auto& [rows, vocab, n] : {std::tuple{1, 1, 1}, std::tuple{5, 37, 50}, std::tuple{13, 4096, 700}}) {
    const testing::LawValuesCase c = testing::law_values_case(static_cast<uint64_t>(vocab + n), rows, vocab, n);
    std::vector<float> expected, values(static_cast<size_t>(n), 7.0f);
    int64_t failed = 0;
    for (size_t e = 0; e < c.entries.size(); e += 2) {
      const int32_t id = c.ids[static_cast<size_t>(c.entries[e + 1])];
      failed += id == -1;
      expected.push_back(id == -1 ? -1.0f : c.laws[static_cast<size_t>(c.entries[e] * vocab + id)]);
    }
    read_law_values_host(c.params(c.laws.data(), c.ids.data(), c.entries.data(), values.data()));
    INFO(rows << " rows, V = " << vocab << ", " << n << " entries");
    CHECK(values == expected);
    if (n > 16) CHECK(failed > 0);
  }
}

TEST_CASE("law values refuse bad parameters by name", "[kernels]") {
  const testing::LawValuesCase c = testing::law_values_case(1, 2, 8, 4);
  std::vector<float> values(4);
  const auto with = [&](auto change) {
    LawValuesParams p = c.params(c.laws.data(), c.ids.data(), c.entries.data(), values.data());
    change(p);
    return p;
  };
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.n = 0; })), Contains("n must be >= 1"));
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.rows = 0; })), Contains("rows must be >= 1"));
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.vocab = 0; })),
                    Contains("vocab must be in [1, 2^30]"));
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.laws = nullptr; })),
                    Contains("laws [rows, V] is null"));
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.ids = nullptr; })), Contains("ids is null"));
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.entries = nullptr; })),
                    Contains("entries [n, 2] is null"));
  CHECK_THROWS_WITH(read_law_values_host(with([](LawValuesParams& p) { p.values = nullptr; })),
                    Contains("values [n] is null"));
}
