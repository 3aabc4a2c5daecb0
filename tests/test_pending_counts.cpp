// The pending-counts kernel's host backend (kernels/pending_counts.h, what cuda-host runs): each entry adds one
// occurrence of its id to its row, a failed draw's -1 adds nothing, and bad parameters are refused by name. Against a
// count made here entry by entry in the plainest way.
#include <catch2/catch.hpp>
#include <cstdint>
#include <tuple>
#include <vector>

#include "kernels/pending_counts.h"
#include "pending_counts_case.h"

using namespace specula;
using Catch::Matchers::Contains;

TEST_CASE("pending ids add one occurrence each to their rows' counts, failed draws none", "[kernels][penalties]") {
  for (const auto& [rows, vocab, n] : {std::tuple{1, 1, 1}, std::tuple{3, 37, 50}, std::tuple{8, 4096, 700}}) {
    const testing::PendingCountsCase c = testing::pending_counts_case(static_cast<uint64_t>(vocab + n), rows, vocab, n);
    std::vector<int32_t> expected = c.counts;
    int64_t added = 0;
    for (size_t e = 0; e < c.entries.size(); e += 2) {
      const int32_t id = c.ids[static_cast<size_t>(c.entries[e + 1])];
      if (id == -1) continue;
      ++expected[static_cast<size_t>(c.entries[e]) * static_cast<size_t>(vocab) + static_cast<size_t>(id)];
      ++added;
    }
    std::vector<int32_t> counts = c.counts;
    add_pending_counts_host(c.params(counts.data(), c.ids.data(), c.entries.data()));
    INFO(rows << " rows, V = " << vocab << ", " << n << " entries");
    CHECK(counts == expected);
    if (n > 1) CHECK(added > 0);
  }
}

TEST_CASE("pending counts refuse bad parameters by name", "[kernels][penalties]") {
  const testing::PendingCountsCase c = testing::pending_counts_case(1, 2, 8, 4);
  std::vector<int32_t> counts = c.counts;
  const auto with = [&](auto change) {
    PendingCountsParams p = c.params(counts.data(), c.ids.data(), c.entries.data());
    change(p);
    return p;
  };
  CHECK_THROWS_WITH(add_pending_counts_host(with([](PendingCountsParams& p) { p.n = 0; })), Contains("n must be >= 1"));
  CHECK_THROWS_WITH(add_pending_counts_host(with([](PendingCountsParams& p) { p.rows = 0; })),
                    Contains("rows must be >= 1"));
  CHECK_THROWS_WITH(add_pending_counts_host(with([](PendingCountsParams& p) { p.vocab = 0; })),
                    Contains("vocab must be in [1, 2^30]"));
  CHECK_THROWS_WITH(add_pending_counts_host(with([](PendingCountsParams& p) { p.counts = nullptr; })),
                    Contains("counts [rows, V] is null"));
  CHECK_THROWS_WITH(add_pending_counts_host(with([](PendingCountsParams& p) { p.ids = nullptr; })),
                    Contains("ids is null"));
  CHECK_THROWS_WITH(add_pending_counts_host(with([](PendingCountsParams& p) { p.entries = nullptr; })),
                    Contains("entries [n, 2] is null"));
}
