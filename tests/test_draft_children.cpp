// The draft-children kernels (kernels/draft_children.h) under block emulation, every thread count and schedule.
// Ranked children: each row's `count` most probable tokens, best first, the lowest id on ties, against the order
// draw_children ranks by (computed here by a full sort), on rows built to tie: few distinct values, zeros of both
// signs, rows of one value, V not a multiple of 4 (the scalar dispatch) and a multiple of it (4-wide). Siblings
// without replacement: against draw_children's loop.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/draft_children.h"
#include "kernels/emulated_kernels.h"
#include "sibling_draw_case.h"
#include "tests/support/mutant_switch.h"
#include "verify/sampling/categorical.h"

using namespace specula;

namespace {

// Rows [B, V] of probabilities from a few values, so that most tokens tie with others.
std::vector<float> tied_rows(uint64_t seed, int32_t batch, int32_t vocab) {
  std::mt19937_64 rng(seed);
  // 1e-40 is subnormal: its bits still order it below every normal float.
  const std::vector<float> values = {0.0f, -0.0f, 0.25f, 0.125f, 0.125f, 1e-40f, 0.5f, 3e-8f, 1e-30f};
  std::vector<float> rows(static_cast<size_t>(batch) * static_cast<size_t>(vocab));
  for (float& x : rows) x = values[rng() % values.size()];
  // The first row holds one value alone, so that every child is a tie broken by id.
  std::fill(rows.begin(), rows.begin() + vocab, 0.0625f);
  return rows;
}

// The order of draw_children's ranked siblings: probability descending, id ascending.
std::vector<int32_t> reference_children(const float* q, int32_t vocab, int32_t count) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return q[a] > q[b]; });
  ids.resize(static_cast<size_t>(count));
  return ids;
}

// Aligned like a device buffer, so that a V that is a multiple of 4 takes the 4-wide dispatch.
struct AlignedRows {
  explicit AlignedRows(const std::vector<float>& rows) : storage(rows.size() + 16) {
    const size_t misalignment = reinterpret_cast<uintptr_t>(storage.data()) % 64 / sizeof(float);
    data = storage.data() + (misalignment ? 16 - misalignment : 0);
    std::copy(rows.begin(), rows.end(), data);
  }
  std::vector<float> storage;
  float* data;
};

// Whether every row's children equal the reference at every thread count and schedule; counts the wrong rows.
int64_t wrong_rows(int32_t vocab, int32_t count, uint64_t seed) {
  const int32_t batch = 5;
  const std::vector<float> rows = tied_rows(seed, batch, vocab);
  const AlignedRows aligned(rows);
  int64_t wrong = 0;
  for (int threads : {4, 8, 32})
    for (FiberSchedule schedule : {FiberSchedule::forward, FiberSchedule::reverse, FiberSchedule::rotating}) {
      std::vector<int32_t> tokens(static_cast<size_t>(batch) * static_cast<size_t>(count), -7);
      RankedChildrenParams p;
      p.probs = aligned.data;
      p.tokens = tokens.data();
      p.batch = batch;
      p.vocab = vocab;
      p.count = count;
      emulate_ranked_children(p, EmulationOptions{threads, schedule});
      for (int32_t b = 0; b < batch; ++b) {
        const std::vector<int32_t> expected =
            reference_children(rows.data() + static_cast<size_t>(b) * vocab, vocab, count);
        const bool same = std::equal(expected.begin(), expected.end(), tokens.begin() + static_cast<size_t>(b) * count);
        INFO("V = " << vocab << ", count " << count << ", " << threads << " threads, " << fiber_schedule_name(schedule)
                    << ", row " << b);
        if (active_mutant() == Mutant::none) CHECK(same);
        wrong += same ? 0 : 1;
      }
    }
  return wrong;
}

}  // namespace

TEST_CASE("ranked children on cuda-host are draw_children's ranked siblings, ties by id", "[kernels][emulation]") {
  for (int32_t vocab : {1, 3, 7, 64, 130, 256})
    for (int32_t count : {1, 2, 3, 5, 9, 64, 256})
      if (count <= vocab) CHECK(wrong_rows(vocab, count, 0x5eed + static_cast<uint64_t>(vocab * 1000 + count)) == 0);
  // The 4-wide dispatch is the one these rows take where V % 4 == 0.
  const AlignedRows aligned(tied_rows(1, 1, 64));
  RankedChildrenParams p;
  p.probs = aligned.data;
  p.vocab = 64;
  CHECK(ranked_children_vec(p) == 4);
  p.vocab = 130;
  CHECK(ranked_children_vec(p) == 1);
}

TEST_CASE("ranked children that skip the ties of the child before are caught", "[kernels][emulation][mutant]") {
  ScopedMutant mutant(Mutant::ranked_children_skip_ties);
  CHECK(wrong_rows(64, 5, 0x77) > 0);
  CHECK(wrong_rows(130, 9, 0x78) > 0);
}

TEST_CASE("the ranked-children kernel refuses a count out of range and missing arrays", "[kernels]") {
  std::vector<float> probs(8, 0.125f);
  std::vector<int32_t> tokens(8);
  RankedChildrenParams p;
  p.probs = probs.data();
  p.tokens = tokens.data();
  p.batch = 1;
  p.vocab = 8;
  p.count = 0;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("count must be in [1, min(V, 256)] (V = 8), got 0"));
  p.count = 9;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("got 9"));
  p.count = 2;
  p.tokens = nullptr;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("tokens [B, count] is null"));
  p.tokens = tokens.data();
  p.batch = 0;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("batch must be >= 1, got 0"));
}

namespace {

// Siblings without replacement drawn on the CPU as draw_children draws them (its loop, over a sequence's rows in
// turn): each draw sample_from_weights over the row less its earlier children, a row's draws ending at the first
// that finds no mass, every draw (that one included) taking the sequence's next uniform.
std::vector<int32_t> reference_sibling_draws(const std::vector<float>& probs, const std::vector<int32_t>& rows,
                                             const std::vector<int32_t>& first, const std::vector<double>& uniforms,
                                             int32_t vocab, int32_t count, std::vector<int32_t>& spent) {
  std::vector<int32_t> out(rows.size() * static_cast<size_t>(count), -1);
  spent.assign(rows.size(), 0);
  for (size_t s = 0; s + 1 < first.size(); ++s) {
    int32_t attempt = 0;
    for (int32_t r = first[s]; r < first[s + 1]; ++r) {
      const float* q = probs.data() + static_cast<size_t>(rows[static_cast<size_t>(r)]) * vocab;
      std::vector<float> remaining(q, q + vocab);
      for (int32_t j = 0; j < count; ++j) {
        const int32_t t =
            sample_from_weights(remaining.data(), vocab, uniforms[static_cast<size_t>(first[s] * count + attempt++)]);
        ++spent[static_cast<size_t>(r)];
        out[static_cast<size_t>(r * count + j)] = t;
        if (t < 0) break;
        remaining[static_cast<size_t>(t)] = 0.0f;
      }
    }
  }
  return out;
}

// Counts the sequences whose draws differ from the reference, at every thread count and schedule.
int64_t wrong_sibling_draws(int32_t vocab, int32_t count, uint64_t seed) {
  const testing::SiblingDrawCase c = testing::sibling_draw_case(seed, vocab, count);
  const std::vector<int32_t>& first = c.first;
  const AlignedRows aligned(c.laws);
  std::vector<int32_t> expected_spent;
  const std::vector<int32_t> expected =
      reference_sibling_draws(c.laws, c.rows, first, c.uniforms, vocab, count, expected_spent);
  int64_t wrong = 0;
  for (int threads : {4, 8, 32})
    for (FiberSchedule schedule : {FiberSchedule::forward, FiberSchedule::reverse, FiberSchedule::rotating}) {
      std::vector<int32_t> tokens(expected.size(), -7), spent(c.rows.size(), -7);
      emulate_sibling_draws(
          c.params(aligned.data, c.rows.data(), first.data(), c.uniforms.data(), tokens.data(), spent.data()),
          EmulationOptions{threads, schedule});
      for (size_t s = 0; s + 1 < first.size(); ++s) {
        const auto from = static_cast<size_t>(first[s] * count), to = static_cast<size_t>(first[s + 1] * count);
        const bool same = std::equal(expected.begin() + from, expected.begin() + to, tokens.begin() + from);
        INFO("V = " << vocab << ", count " << count << ", " << threads << " threads, " << fiber_schedule_name(schedule)
                    << ", sequence " << s);
        if (active_mutant() == Mutant::none) CHECK(same);
        wrong += same ? 0 : 1;
      }
      CHECK(spent == expected_spent);  // each row's draws, counted before any was drawn
    }
  return wrong;
}

}  // namespace

TEST_CASE("siblings drawn without replacement on cuda-host are draw_children's, a sequence's uniforms in turn",
          "[kernels][emulation]") {
  for (int32_t vocab : {5, 37, 64})
    for (int32_t count : {1, 2, 3, 5}) CHECK(wrong_sibling_draws(vocab, count, 0x51b + vocab * 10 + count) == 0);
  // The rows run out of mass: the test sees a row's spent uniform shift the next row's draws.
  const std::vector<float> laws = testing::sibling_draw_case(0x51b + 37 * 10 + 5, 37, 5).laws;
  int64_t short_rows = 0;
  for (int32_t r = 0; r < 9; ++r)
    short_rows += std::count_if(laws.begin() + r * 37, laws.begin() + (r + 1) * 37, [](float x) { return x > 0; }) < 5;
  CHECK(short_rows > 0);
}

TEST_CASE("siblings drawn on the device each from the whole law are caught", "[kernels][emulation][mutant]") {
  ScopedMutant mutant(Mutant::device_siblings_replaced);
  CHECK(wrong_sibling_draws(37, 3, 0x52) > 0);
  CHECK(wrong_sibling_draws(64, 2, 0x53) > 0);
}

// Each row draws in a block of its own, from where its sequence's earlier rows stopped: a row that ran out of mass
// spent fewer uniforms than count, and a later row that ignores it draws from the wrong ones.
TEST_CASE("siblings drawn on the device that ignore what earlier rows spent are caught",
          "[kernels][emulation][mutant]") {
  ScopedMutant mutant(Mutant::device_siblings_skip_spent);
  CHECK(wrong_sibling_draws(37, 5, 0x51b + 37 * 10 + 5) > 0);
  CHECK(wrong_sibling_draws(64, 5, 0x51b + 64 * 10 + 5) > 0);
}

namespace {

// A tree of shape 3,2 drawn at its full shape for two sequences, a launch a depth: each sequence's uniforms taken in
// turn across the depths (spent_before / spent_after), a row under a node never drawn (-1) drawing nothing. The
// reference is draw_children's loop over the full shape's rows in order, a row under a -1 skipped, so the children that
// are not -1 are the CPU's tree's. Counts the sequences whose draws differ, at every thread count and schedule; `dead`
// gets the rows that drew nothing.
int64_t wrong_fixed_shape_draws(int32_t vocab, uint64_t seed, int64_t* dead = nullptr) {
  const std::vector<int32_t> shape = {3, 2};
  const int32_t S = 2, U = 3 + 3 * 2;  // a sequence draws at most once a node
  const testing::SiblingDrawCase c = testing::sibling_draw_case(seed, vocab, 3);
  const AlignedRows aligned(c.laws);
  // Sequence s's full-shape row k (0: the root; 1 to 3: the root's children) draws from law (4 s + k) % 9.
  const auto law_of = [](int32_t s, int32_t k) { return (4 * s + k) % 9; };
  std::vector<std::vector<int32_t>> rows(2), first(2);
  for (int32_t s = 0; s < S; ++s) {
    rows[0].push_back(law_of(s, 0));
    for (int32_t k = 1; k <= 3; ++k) rows[1].push_back(law_of(s, k));
  }
  first[0] = {0, 1, 2};
  first[1] = {0, 3, 6};
  // The reference: sequence s's full-shape children, depth by depth.
  std::vector<std::vector<int32_t>> expected = {std::vector<int32_t>(S * 3, -1), std::vector<int32_t>(S * 3 * 2, -1)};
  int64_t rows_dead = 0;
  for (int32_t s = 0; s < S; ++s) {
    int32_t attempt = 0;
    for (int32_t d = 0; d < 2; ++d)
      for (int32_t r = first[d][s]; r < first[d][s + 1]; ++r) {
        if (d == 1 && expected[0][static_cast<size_t>(r)] < 0) {
          ++rows_dead;
          continue;
        }
        const float* q = c.laws.data() + static_cast<size_t>(rows[d][static_cast<size_t>(r)]) * vocab;
        std::vector<float> remaining(q, q + vocab);
        for (int32_t j = 0; j < shape[d]; ++j) {
          const int32_t t =
              sample_from_weights(remaining.data(), vocab, c.uniforms[static_cast<size_t>(s * U + attempt++)]);
          expected[d][static_cast<size_t>(r * shape[d] + j)] = t;
          if (t < 0) break;
          remaining[static_cast<size_t>(t)] = 0.0f;
        }
      }
  }
  if (dead) *dead = rows_dead;
  int64_t wrong = 0;
  for (int threads : {4, 8, 32})
    for (FiberSchedule schedule : {FiberSchedule::forward, FiberSchedule::reverse, FiberSchedule::rotating}) {
      std::vector<std::vector<int32_t>> tokens = {std::vector<int32_t>(expected[0].size(), -7),
                                                  std::vector<int32_t>(expected[1].size(), -7)};
      std::vector<int32_t> spent(6, -7), carried(3 * S, -7);
      std::fill(carried.begin(), carried.begin() + S, 0);
      for (int32_t d = 0; d < 2; ++d) {
        SiblingDrawParams p =
            c.params(aligned.data, rows[d].data(), first[d].data(), c.uniforms.data(), tokens[d].data(), spent.data());
        p.sequences = S;
        p.rows_total = static_cast<int32_t>(rows[d].size());
        p.count = shape[d];
        p.uniforms_per_sequence = U;
        p.spent_before = carried.data() + d * S;
        p.spent_after = carried.data() + (d + 1) * S;
        p.row_tokens = d == 0 ? nullptr : tokens[0].data();
        emulate_sibling_draws(p, EmulationOptions{threads, schedule});
      }
      for (int32_t s = 0; s < S; ++s) {
        bool same = true;
        for (int32_t d = 0; d < 2; ++d) {
          const auto from = static_cast<size_t>(first[d][s] * shape[d]),
                     to = static_cast<size_t>(first[d][s + 1] * shape[d]);
          same = same && std::equal(expected[d].begin() + from, expected[d].begin() + to, tokens[d].begin() + from);
        }
        INFO("V = " << vocab << ", " << threads << " threads, " << fiber_schedule_name(schedule) << ", sequence " << s);
        if (active_mutant() == Mutant::none) CHECK(same);
        wrong += same ? 0 : 1;
      }
    }
  return wrong;
}

}  // namespace

TEST_CASE("a fixed-shape tree of siblings without replacement drawn a launch a depth is draw_children's",
          "[kernels][emulation]") {
  int64_t dead = 0;
  for (int32_t vocab : {5, 37, 64})
    for (uint64_t seed : {1, 2, 3, 4}) {
      int64_t d = 0;
      CHECK(wrong_fixed_shape_draws(vocab, 0x5d0 + seed * 100 + vocab, &d) == 0);
      dead += d;
    }
  CHECK(dead > 0);  // some rows lie under a node never drawn
}

TEST_CASE(
    "fixed-shape sibling draws that drop the uniforms spent before a depth, or draw under undrawn nodes, are caught",
    "[kernels][emulation][mutant]") {
  {
    ScopedMutant mutant(Mutant::device_siblings_carry_dropped);
    CHECK(wrong_fixed_shape_draws(37, 0x5d0 + 100 + 37) > 0);
  }
  int64_t wrong = 0;
  ScopedMutant mutant(Mutant::device_siblings_dead_rows_draw);
  for (uint64_t seed : {1, 2, 3, 4}) wrong += wrong_fixed_shape_draws(37, 0x5d0 + seed * 100 + 37);
  CHECK(wrong > 0);
}

namespace {

// A sibling-draw launch over host arrays: one sequence of `rows` rows of `laws`, two draws a row.
struct HostSiblingDraws {
  std::vector<float> laws;
  std::vector<int32_t> rows, first, tokens, spent;
  std::vector<double> uniforms;

  HostSiblingDraws(std::vector<float> row_laws, int32_t vocab, std::vector<double> draws_uniforms)
      : laws(std::move(row_laws)), uniforms(std::move(draws_uniforms)) {
    const int32_t n = static_cast<int32_t>(laws.size()) / vocab;
    for (int32_t r = 0; r < n; ++r) rows.push_back(r);
    first = {0, n};
    tokens.assign(static_cast<size_t>(n) * 2, -7);
    spent.assign(static_cast<size_t>(n), -7);
  }
  SiblingDrawParams params(int32_t vocab) {
    SiblingDrawParams p;
    p.probs = laws.data();
    p.rows = rows.data();
    p.first = first.data();
    p.uniforms = uniforms.data();
    p.tokens = tokens.data();
    p.spent = spent.data();
    p.sequences = 1;
    p.rows_total = static_cast<int32_t>(rows.size());
    p.vocab = vocab;
    p.count = 2;
    return p;
  }
};

}  // namespace

TEST_CASE("the sibling-draw kernel refuses counts out of range and missing arrays", "[kernels]") {
  HostSiblingDraws d(std::vector<float>(8, 0.125f), 8, std::vector<double>(8, 0.5));
  SiblingDrawParams p = d.params(8);
  CHECK_NOTHROW(p.check());
  p.count = 9;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("count must be in [1, min(V, 256)] (V = 8), got 9"));
  p.count = 2;
  p.uniforms = nullptr;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("uniforms [R * count] is null"));
  p.uniforms = d.uniforms.data();
  p.sequences = 0;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("sequences must be >= 1, got 0"));
  p.sequences = 1;
  p.spent = nullptr;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("spent [R] is null"));
  p.spent = d.spent.data();
  p.uniforms_per_sequence = 4;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("uniforms_per_sequence 4 needs spent_before and spent_after"));
}

// A row holding a NaN has no positive total: its first draw finds no mass (-1), and it takes one uniform, so the next
// row of its sequence starts at the second (0.2: token 3 first; from the third, 0.9, token 6 would come first).
TEST_CASE("a sibling row holding a NaN takes one draw and finds no mass", "[kernels][emulation]") {
  const int32_t V = 8;
  std::vector<float> laws(2 * V, 0.0f);
  laws[1] = 0.5f;
  laws[2] = std::nanf("");
  laws[4] = 0.5f;
  laws[V + 3] = laws[V + 6] = 0.5f;  // row 1: two tokens
  HostSiblingDraws d(laws, V, {0.3, 0.2, 0.9, 0.1});
  emulate_sibling_draws(d.params(V), EmulationOptions{4});
  CHECK(d.spent == std::vector<int32_t>{1, 2});
  CHECK(d.tokens == std::vector<int32_t>{-1, -1, 3, 6});
}
