// The verification kernels' per-row algorithms (kernels/verify_row.h) run on the CPU backend against the
// reference verifiers (verify/verifiers): identical emitted tokens, accepted counts, paths, bonus flags and
// q = 0 counts on thousands of random rows; a deliberately broken variant (residual not subtracted) must
// disagree; the one-position exact law of each kernel (G-test), which the broken variant must fail; and the
// params checks and statuses. The same cases run on the GPU in test_cuda_verify.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "holed_tree_case.h"
#include "kernel_verify_cases.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/sampler_math.h"
#include "kernels/verify_kernels.h"
#include "tests/statistics/goodness_of_fit.h"
#include "tests/support/mutant_switch.h"

using namespace specula;
using namespace specula::testing;

namespace {

struct Agreement {
  int64_t rows = 0, mismatches = 0, rejections = 0, bonus = 0, fallbacks = 0;
  std::string first;
};

// Runs `cases` random batches of `kind` through the CPU backend and compares every row.
Agreement agreement(VerifyKind kind, int32_t cases, VerifyRules rules) {
  Agreement a;
  for (int32_t i = 0; i < cases; ++i) {
    const uint64_t seed = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1) + static_cast<uint64_t>(kind);
    CaseRandom g(seed);
    const int32_t vocab = g.between(1, 64);
    const VerifyCase c = kind == VerifyKind::tree ? random_tree_case(seed, 8, vocab, g.between(0, 12))
                                                  : random_chain_case(seed, kind, 8, vocab, g.between(0, 8));
    const VerifyResult r = run_host(c, rules);
    for (int32_t b = 0; b < c.batch(); ++b) {
      ++a.rows;
      a.bonus += r.bonus[b] == 1;
      a.rejections += r.status[b] == 0 && r.bonus[b] == 0;
      const std::string diff = compare_with_reference(c, b, r);
      if (!diff.empty()) {
        ++a.mismatches;
        if (a.first.empty())
          a.first = std::string(verify_kind_name(kind)) + " case " + std::to_string(i) + " row " + std::to_string(b) +
                    " (V " + std::to_string(vocab) + "): " + diff;
      }
    }
  }
  return a;
}

}  // namespace

TEST_CASE("chain verification on the CPU backend reproduces verify_chain exactly", "[kernels][verify]") {
  const Agreement a = agreement(VerifyKind::chain, 400, VerifyRules::exact);
  INFO(a.first);
  CHECK(a.rows == 3200);
  CHECK(a.mismatches == 0);
  // Both endings are exercised.
  CHECK(a.rejections > 500);
  CHECK(a.bonus > 300);
}

TEST_CASE("block verification on the CPU backend reproduces verify_block exactly", "[kernels][verify]") {
  const Agreement a = agreement(VerifyKind::block, 400, VerifyRules::exact);
  INFO(a.first);
  CHECK(a.rows == 3200);
  CHECK(a.mismatches == 0);
  CHECK(a.rejections > 500);
  CHECK(a.bonus > 300);
}

TEST_CASE("tree verification on the CPU backend reproduces verify_tree exactly (all three sibling schemes)",
          "[kernels][verify]") {
  const Agreement a = agreement(VerifyKind::tree, 400, VerifyRules::exact);
  INFO(a.first);
  CHECK(a.rows == 3200);
  CHECK(a.mismatches == 0);
  CHECK(a.rejections > 500);
  CHECK(a.bonus > 300);
}

TEST_CASE("tree verification on the CPU backend reproduces verify_tree on trees of up to 256 nodes",
          "[kernels][verify]") {
  int64_t rows = 0, mismatches = 0, deepest = 0;
  std::string first;
  for (bool deep : {false, true})
    for (int32_t vocab : {7, 300}) {
      const VerifyCase c = random_tree_case(0x256a + vocab + (deep ? 1 : 0), 6, vocab, kMaxVerifyTreeNodes, deep);
      const VerifyResult r = run_host(c);
      for (int32_t b = 0; b < c.batch(); ++b, ++rows) {
        deepest = std::max<int64_t>(deepest, r.num_accepted[b]);
        const std::string diff = compare_with_reference(c, b, r);
        if (!diff.empty() && mismatches++ == 0)
          first = (deep ? "deep V " : "bushy V ") + std::to_string(vocab) + ": " + diff;
      }
    }
  INFO(first);
  CHECK(rows == 24);
  CHECK(mismatches == 0);
  CHECK(deepest >= 2);  // paths go past the first level
}

namespace {

// Rows of holed trees (holed_tree_case.h) whose outcome differs from the reference's on the trees of their drawn
// nodes; `holes` counts the holes the cases hold, `moved_paths` the accepted nodes placed apart in the two shapes.
struct HoledAgreement {
  int64_t rows = 0, mismatches = 0, holes = 0, moved_paths = 0;
  std::string first;
};
HoledAgreement holed_agreement(int32_t cases) {
  HoledAgreement a;
  for (int32_t i = 0; i < cases; ++i) {
    const uint64_t seed = 0x401e + 7919 * static_cast<uint64_t>(i);
    CaseRandom g(seed);
    const int32_t vocab = g.between(2, 40);
    const HoledTreeCase h = holed_tree_case(seed, 8, vocab, g.between(1, 12), 6);
    const VerifyResult holed = run_host(h.holed), r = at_drawn_nodes(h, holed);
    for (int32_t b = 0; b < h.holed.batch(); ++b) {
      ++a.rows;
      for (int32_t node : h.drawn_node[b]) a.holes += node < 0;
      for (int32_t j = 0; j < holed.num_accepted[b]; ++j)
        a.moved_paths += holed.path[static_cast<size_t>(b) * h.holed.width + j] !=
                         r.path[static_cast<size_t>(b) * h.drawn.width + j];
      const std::string diff = compare_with_reference(h.drawn, b, r);
      if (!diff.empty() && a.mismatches++ == 0)
        a.first = "case " + std::to_string(i) + " row " + std::to_string(b) + ": " + diff;
    }
  }
  return a;
}

}  // namespace

TEST_CASE("a tree with holes is verified as the tree of its drawn nodes, draw for draw", "[kernels][verify]") {
  const HoledAgreement a = holed_agreement(300);
  INFO(a.first);
  CHECK(a.rows == 2400);
  CHECK(a.mismatches == 0);
  CHECK(a.holes > 3000);
  CHECK(a.moved_paths > 100);  // accepted nodes whose place differs between the two shapes
}

TEST_CASE("a tree with holes keyed by its full shape's nodes is caught", "[kernels][verify][mutant]") {
  const ScopedMutant on(Mutant::tree_holes_keyed_by_shape);
  const HoledAgreement a = holed_agreement(300);
  CHECK(a.mismatches > 50);  // the rows whose accepted or rejected nodes come after a hole
}

TEST_CASE("holes out of place, or on a row that may not have them, get a status", "[kernels][verify]") {
  // The root's children: node 0 and a hole; node 0's: node 1; node 1's: a hole. Correct, then broken five ways.
  VerifyCase t = random_tree_case(13, 1, 10, 4);
  t.rows[0].num_draft = 4;
  t.rows[0].flags = kVerifyRowHasQ | kVerifyRowHoles;
  t.rows[0].scheme = static_cast<int32_t>(TreeSiblingScheme::without_replacement);
  const std::vector<int32_t> parents = {-1, 0, -1, 1}, tokens = {3, 5, -1, -1};
  const auto status = [&](std::vector<int32_t> tok, std::vector<int32_t> par, uint32_t flags, int32_t scheme) {
    VerifyCase c = t;
    c.tokens = std::move(tok);
    c.parents = std::move(par);
    c.rows[0].flags = flags;
    c.rows[0].scheme = scheme;
    return static_cast<VerifyRowStatus>(run_host(c).status[0]);
  };
  const uint32_t holes = kVerifyRowHasQ | kVerifyRowHoles;
  const int32_t wr = static_cast<int32_t>(TreeSiblingScheme::without_replacement);
  CHECK(status(tokens, parents, holes, wr) == VerifyRowStatus::ok);
  // A drawn node after a hole under the same parent.
  CHECK(status({3, 5, -1, 4}, {-1, 0, -1, -1}, holes, wr) == VerifyRowStatus::bad_draft_token);
  // A drawn node under a hole.
  CHECK(status({3, -1, 5, 4}, {-1, -1, 1, 0}, holes, wr) == VerifyRowStatus::bad_draft_token);
  // A token below -1.
  CHECK(status({3, 5, -2, -1}, parents, holes, wr) == VerifyRowStatus::bad_draft_token);
  // Holes on a row without the flag, or the flag on another scheme.
  CHECK(status(tokens, parents, kVerifyRowHasQ, wr) == VerifyRowStatus::bad_draft_token);
  CHECK(status(tokens, parents, holes, static_cast<int32_t>(TreeSiblingScheme::iid)) ==
        VerifyRowStatus::bad_row_params);
}

TEST_CASE("the parity check catches a residual that is not subtracted", "[kernels][verify][mutant]") {
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const Agreement a = agreement(kind, 100, VerifyRules::residual_not_subtracted);
    INFO(verify_kind_name(kind));
    CHECK(a.mismatches > 50);
  }
}

TEST_CASE("random cases cover every tree scheme, point masses, empty residuals and q = 0 drafts", "[kernels][verify]") {
  int64_t schemes[3] = {0, 0, 0}, point_mass = 0, q_zero = 0;
  for (int32_t i = 0; i < 50; ++i) {
    const VerifyCase c = random_tree_case(1000 + i, 8, 16, 10);
    const VerifyResult r = run_host(c);
    for (int32_t b = 0; b < c.batch(); ++b) {
      ++schemes[c.rows[b].scheme];
      point_mass += !(c.rows[b].flags & kVerifyRowHasQ);
      q_zero += r.q_zero_errors[b] > 0;
    }
  }
  CHECK(schemes[0] > 50);
  CHECK(schemes[1] > 50);
  CHECK(schemes[2] > 50);
  CHECK(point_mass > 20);
  CHECK(q_zero > 5);

  // Chain rejections whose residual (p - q)+ is empty everywhere (sub-normalised p), so the draw falls
  // back to p: the reference's rarely taken branch.
  int64_t fallbacks = 0;
  for (int32_t i = 0; i < 100; ++i) {
    const VerifyCase c = random_chain_case(2000 + i, VerifyKind::chain, 8, 16, 4);
    const VerifyResult r = run_host(c);
    for (int32_t b = 0; b < c.batch(); ++b) {
      if (r.bonus[b] || !(c.rows[b].flags & kVerifyRowHasQ)) continue;
      const int32_t at = r.num_accepted[b];
      const float* p = c.p_of(b) + static_cast<size_t>(at) * c.vocab;
      const float* q = c.q_row(b, at);
      double residual = 0.0;
      for (int32_t x = 0; x < c.vocab; ++x) residual += residual_weight(p[x], q[x]);
      fallbacks += residual == 0.0;
    }
  }
  CHECK(fallbacks > 20);
}

namespace {

// The first emitted token of `rows` rows of `lc` has its law (G-test) on the CPU backend, and not with the residual
// left unsubtracted. Returns the exact run.
VerifyResult check_first_token_law(const LawCase& lc, int32_t rows) {
  const VerifyResult exact = run_host(lc.c);
  const stats::GofResult good = stats::g_test(first_token_counts(exact, rows, lc.c.vocab), lc.law);
  INFO(good.detail);
  CHECK(good.passed(stats::kAlpha));
  const VerifyResult broken = run_host(lc.c, VerifyRules::residual_not_subtracted);
  const stats::GofResult bad = stats::g_test(first_token_counts(broken, rows, lc.c.vocab), lc.law);
  CHECK_FALSE(bad.passed(stats::kAlpha));
  return exact;
}

}  // namespace

TEST_CASE("the first emitted token of every kernel has the target law; the broken variant does not",
          "[kernels][verify][law]") {
  constexpr int32_t kRows = 60000;
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    INFO(verify_kind_name(kind));
    check_first_token_law(law_case(kind, kRows, 77 + static_cast<uint64_t>(kind)), kRows);
  }
}

TEST_CASE("the first token emitted through a tree with holes has the target law; the broken variant does not",
          "[kernels][verify][law]") {
  constexpr int32_t kRows = 60000;
  const VerifyResult exact = check_first_token_law(holed_law_case(kRows, 78), kRows);
  int64_t second_depth = 0;  // rows that accepted a first-depth node and so tested its child, placed after the hole
  for (int32_t b = 0; b < kRows; ++b) second_depth += exact.num_accepted[b] >= 1;
  CHECK(second_depth > kRows / 4);
}

TEST_CASE("verification params check() names the bad field", "[kernels][verify]") {
  VerifyCase c = random_chain_case(5, VerifyKind::chain, 2, 8, 3);
  VerifyResult r(2, 4);
  ChainVerifyParams p = chain_params(c, r);
  CHECK_NOTHROW(p.check());
  ChainVerifyParams bad = p;
  bad.batch = 0;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("batch"));
  bad = p;
  bad.max_draft = kMaxVerifyDraft + 1;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("max_draft"));
  bad = p;
  bad.p = nullptr;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("p [B, K + 1, V]"));
  bad = p;
  bad.out.status = nullptr;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("out.status"));
  bad = p;
  bad.out.bonus = bad.out.num_emitted;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("share"));
  bad = p;
  bad.stage_rows = 2;
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("stage_rows must be 0 or 1, got 2"));
  bad = p;
  bad.row_exchange = static_cast<RowExchange>(7);
  CHECK_THROWS_WITH(bad.check(), Catch::Contains("row_exchange must be automatic (0) or global_memory (1), got 7"));

  VerifyCase t = random_tree_case(6, 2, 8, 5);
  VerifyResult rt(2, 6);
  TreeVerifyParams tp = tree_params(t, rt);
  CHECK_NOTHROW(tp.check());
  tp.max_nodes = kMaxVerifyTreeNodes + 1;
  CHECK_THROWS_WITH(tp.check(), Catch::Contains("max_nodes"));
  tp = tree_params(t, rt);
  tp.parents = nullptr;
  CHECK_THROWS_WITH(tp.check(), Catch::Contains("parents"));
  tp = tree_params(t, rt);
  tp.path = nullptr;
  CHECK_THROWS_WITH(tp.check(), Catch::Contains("path"));
}

TEST_CASE("bad rows get a status, emit nothing, and leave the other rows alone", "[kernels][verify]") {
  VerifyCase c = random_chain_case(11, VerifyKind::chain, 3, 10, 4);
  for (VerifyRowParams& row : c.rows) row.num_draft = 4;
  c.tokens[1] = 10;         // row 0: out of range
  c.rows[1].num_draft = 5;  // row 1: more drafts than K
  VerifyResult r = run_host(c);
  CHECK(r.status[0] == static_cast<int32_t>(VerifyRowStatus::bad_draft_token));
  CHECK(r.status[1] == static_cast<int32_t>(VerifyRowStatus::bad_row_params));
  CHECK(r.status[2] == 0);
  for (int32_t b = 0; b < 2; ++b) {
    CHECK(r.num_emitted[b] == 0);
    for (int32_t j = 0; j < 5; ++j) CHECK(r.emitted[static_cast<size_t>(b) * 5 + j] == -1);
  }
  CHECK(compare_with_reference(c, 2, r).empty());
  CHECK_THROWS_WITH(check_verify_status(r.status.data(), 3), Catch::Contains("row 0"));

  VerifyCase t = random_tree_case(12, 3, 10, 4);
  for (VerifyRowParams& row : t.rows) row.num_draft = 4;
  t.parents[2] = 2;  // row 0: a node that is its own parent
  t.tokens[4] = -1;  // row 1: bad token
  VerifyResult rt = run_host(t);
  CHECK(rt.status[0] == static_cast<int32_t>(VerifyRowStatus::bad_tree));
  CHECK(rt.status[1] == static_cast<int32_t>(VerifyRowStatus::bad_draft_token));
  CHECK(rt.status[2] == 0);
  for (int32_t j = 0; j < 4; ++j) CHECK(rt.path[j] == -1);
}

TEST_CASE("the verification launchers refuse clearly without a CUDA device", "[kernels][verify][device]") {
  if (cuda_device_count_or_zero() > 0) return;
  VerifyCase c = random_chain_case(5, VerifyKind::chain, 2, 8, 3);
  VerifyResult r(2, 4);
  const ChainVerifyParams p = chain_params(c, r);
  CHECK_THROWS_WITH(launch_chain_verify(p), Catch::StartsWith("no CUDA device: "));
  BlockVerifyParams bp;
  static_cast<ChainVerifyParams&>(bp) = p;
  CHECK_THROWS_WITH(launch_block_verify(bp), Catch::StartsWith("no CUDA device: "));
  VerifyCase t = random_tree_case(6, 2, 8, 5);
  VerifyResult rt(2, 6);
  CHECK_THROWS_WITH(launch_tree_verify(tree_params(t, rt)), Catch::StartsWith("no CUDA device: "));
  // The params are checked first.
  ChainVerifyParams bad = p;
  bad.vocab = 0;
  CHECK_THROWS_WITH(launch_chain_verify(bad), Catch::Contains("vocab"));
  bad = p;
  bad.cluster_blocks = 9;
  CHECK_THROWS_WITH(launch_chain_verify(bad), Catch::Contains("cluster_blocks must be in [0, 8], got 9"));
}

TEST_CASE("the dispatch picks the cluster and block size by V and vector loads by alignment", "[kernels][verify]") {
  alignas(16) static float buffer[8];
  CHECK(choose_verify_config(buffer, buffer, 1000).block == 256);
  CHECK(choose_verify_config(buffer, buffer, 1000).ctas == 1);
  CHECK(choose_verify_config(buffer, buffer, 1000).vec == 4);
  CHECK(choose_verify_config(buffer, nullptr, 128256).ctas == 8);
  CHECK(choose_verify_config(buffer, nullptr, 128256).block == 256);
  CHECK(choose_verify_config(buffer, nullptr, 32000).ctas == 2);
  CHECK(choose_verify_config(buffer, nullptr, 128256, 1).ctas == 1);
  CHECK(choose_verify_config(buffer, nullptr, 128256, 1).block == 512);
  CHECK(choose_verify_config(buffer, nullptr, 1000, 3).ctas == 3);
  CHECK(choose_verify_config(buffer, buffer, 1003).vec == 1);
  CHECK(choose_verify_config(buffer + 1, buffer, 1000).vec == 1);
}

// VerifyRowLayout::q_first_row: each batch row's q rows read from wherever they lie (a draft model's laws left in
// draft_laws, for trees of different sizes), in reverse order here and with room between them, decide bit for bit as
// the padded layout does; q_present then indexes q's own rows. Rows whose q rows would run past q_total_rows get a
// status.
TEST_CASE("q rows laid out apart from p's through q_first_row decide as the padded layout", "[kernels][verify]") {
  for (const VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const VerifyCase c =
        kind == VerifyKind::tree ? random_tree_case(31, 4, 9, 5) : random_chain_case(32, kind, 4, 9, 3);
    const VerifyResult expected = run_host(c);
    const int32_t B = c.batch(), Q = c.q_rows(), V = c.vocab, gap = 2;
    std::vector<float> apart(static_cast<size_t>(B) * (Q + gap) * V, std::nanf(""));
    std::vector<int64_t> q_first(static_cast<size_t>(B));
    std::vector<uint8_t> present(apart.size() / V, 0);
    for (int32_t b = 0; b < B; ++b) {
      q_first[static_cast<size_t>(b)] = static_cast<int64_t>(B - 1 - b) * (Q + gap) + 1;
      std::copy(c.q_row(b, 0), c.q_row(b, 0) + static_cast<size_t>(Q) * V,
                apart.begin() + q_first[static_cast<size_t>(b)] * V);
      for (int32_t r = 0; r < Q; ++r) present[static_cast<size_t>(q_first[static_cast<size_t>(b)] + r)] = 1;
    }
    VerifyResult r(B, c.width + 1);
    VerifyRowLayout layout;
    layout.q_first_row = q_first.data();
    layout.q_total_rows = static_cast<int64_t>(present.size());
    layout.q_present = present.data();
    if (kind == VerifyKind::tree) {
      TreeVerifyParams p = tree_params(c, r);
      p.q = apart.data();
      p.layout = layout;
      run_tree_verify_host(p);
    } else {
      ChainVerifyParams p = chain_params(c, r);
      p.q = apart.data();
      p.layout = layout;
      if (kind == VerifyKind::chain) {
        run_chain_verify_host(p);
      } else {
        BlockVerifyParams bp;
        static_cast<ChainVerifyParams&>(bp) = p;
        run_block_verify_host(bp);
      }
    }
    INFO(static_cast<int>(kind));
    CHECK(r.emitted == expected.emitted);
    CHECK(r.num_accepted == expected.num_accepted);
    CHECK(r.status == expected.status);
    // A row whose q rows would end past the last is refused, the others decided as before.
    q_first[0] = layout.q_total_rows;
    VerifyResult past(B, c.width + 1);
    TreeVerifyParams tp = tree_params(c, past);
    ChainVerifyParams cp = chain_params(c, past);
    if (kind == VerifyKind::tree) {
      tp.q = apart.data();
      tp.layout = layout;
      run_tree_verify_host(tp);
    } else {
      cp.q = apart.data();
      cp.layout = layout;
      run_chain_verify_host(cp);
    }
    CHECK(past.status[0] == static_cast<int32_t>(VerifyRowStatus::bad_row_params));
  }
  ChainVerifyParams p;
  VerifyCase c = random_chain_case(5, VerifyKind::chain, 2, 8, 3);
  VerifyResult r(2, 4);
  p = chain_params(c, r);
  const int64_t first[] = {0, 3};
  p.layout.q_first_row = first;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("q_total_rows must be >= 1 with layout.q_first_row, got 0"));
  p.layout.q_first_row = nullptr;
  p.layout.q_total_rows = 6;
  CHECK_THROWS_WITH(p.check(), Catch::Contains("q_total_rows is set but layout.q_first_row is null"));
}
