// A fed proposal's ids kept on the device for verification (BatchVerifier::keep_planned_ids): verify() reads them in
// place and decides exactly as it does for the same trees given on the host, bringing the ids back with its results in
// the step's one wait. On cuda-host, with a 2,1 tree of two sequences drawn depth by depth as a draft model would.
// With penalties, the ids the host has not seen are counted on the device (TokenHistory::pending_ids): the plan's
// second depth reads the first's, the target's rows their paths', and both decide as with the tokens on the host.
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/shared/philox.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/batch_verifier.h"
#include "verify/device/device_sampler.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/target_rows.h"

using namespace specula;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t B = 2;
constexpr int32_t N = 4, V = 37;  // a 2,1 tree: nodes 0 and 1 under the root, node 2 under 0, node 3 under 1
const std::vector<int64_t> kFrontier = {1, 2};  // frontier rows a sequence at depths 0 and 1

// Strong penalties, so that counting a path's token or not changes the draws and decisions.
void penalise(SamplingParams& s) {
  s.repetition_penalty = 1.6f;
  s.frequency_penalty = 0.7f;
  s.presence_penalty = 0.5f;
}

SamplingParams draft_params(bool penalised = false) {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 8;
  if (penalised) penalise(s);
  return s;
}

// min_tokens reads the rows' paths' lengths: the stop token, which leads every target row, is banned at rows 0 to 2
// (depths 0 and 1) and allowed at rows 3 and 4 (depth 2).
SamplingParams target_params(float temperature = 0.8f, bool penalised = false) {
  SamplingParams s;
  s.temperature = temperature;
  s.top_k = 10;
  s.min_tokens = 2;
  s.stop_tokens = {3};
  if (penalised) penalise(s);
  return s;
}

// The draws of depth d of a step (rows written at `rows`), as a draft model's fed proposal plans them: the root's two
// children (the second's law a scratch copy at node 1's row), then one child under each. Frontier row k of sequence b
// is processed with history h[b * kFrontier[d] + k].
std::vector<DraftDraw> depth_draws(const float* rows, int32_t d, uint64_t step, const std::vector<TokenHistory>& h) {
  if (h.size() != static_cast<size_t>(B * kFrontier[d])) throw std::logic_error("depth_draws: a history a row");
  std::vector<DraftDraw> draws;
  for (int64_t b = 0; b < B; ++b) {
    const StepRandom rng{3, static_cast<uint64_t>(b), step};
    for (int64_t k = 0; k < kFrontier[d]; ++k)
      for (int32_t j = 0; j < (d == 0 ? 2 : 1); ++j) {
        const int32_t child = static_cast<int32_t>(k) * (d == 0 ? 2 : 1) + j, slot = 2 * d + child;
        const int32_t law_row = d == 0 ? (j == 0 ? 0 : 2) : 1 + static_cast<int32_t>(k);
        draws.push_back(DraftDraw{
            DeviceDraw{rows + (b * kFrontier[d] + k) * V, &h[b * kFrontier[d] + k], rng.key(RandomRole::draft, slot)},
            b, law_row});
      }
  }
  return draws;
}

// The frontier rows' histories at depth 0 (the committed one) and at depth 1 with their path's ids pending on the
// device: sequence b's node k of depth 0 is the plan's draw b * 2 + k.
const TokenHistory kCommitted{{1, 2}, {}, std::nan("")};
std::vector<TokenHistory> root_histories() { return std::vector<TokenHistory>(B, kCommitted); }
std::vector<TokenHistory> pending_histories(const SamplerPipeline& draft) {
  std::vector<TokenHistory> h;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t k = 0; k < 2; ++k) h.push_back(pending_history(draft, kCommitted, {static_cast<int32_t>(b * 2 + k)}));
  return h;
}

// The 2,1 tree of `tokens` (depth 0's two, depth 1's two).
TokenTree tree_of(const std::vector<Token>& tokens) {
  TokenTree t;
  t.add(tokens[0], -1);
  t.add(tokens[1], -1);
  t.add(tokens[2], 0);
  t.add(tokens[3], 1);
  return t;
}

// Writes a depth's (or the target's) rows into two buffers alike: token 3 leads every row.
void write_rows(float* a, float* b, int64_t rows, uint64_t seed) {
  for (int64_t i = 0; i < rows * V; ++i)
    a[i] = b[i] = i % V == 3 ? 2.5f : static_cast<float>(4.0 * philox_uniform(seed, 7, i) - 2.0);
}

// `steps` steps on two verifiers: one keeps each proposal's ids for its verification, the other brings them back after
// the draws (draw_drafts) and verifies host trees. Counts the steps whose outcomes, or brought-back ids, differ;
// `stop_emitted` gets the times the stop token was emitted (only from a depth-2 row, whose length min_tokens reads).
// `penalised`: the draft's and the target's pipelines penalise (the host's second depth then reads the first's tokens).
int64_t differing_steps(int steps, float target_temperature, int64_t* stop_emitted = nullptr, bool penalised = false) {
  const SamplerPipeline draft(draft_params(penalised), V), target(target_params(target_temperature, penalised), V);
  BatchVerifier kept(Device::cuda_host, target, VerifyMethod::tree),
      host(Device::cuda_host, target, VerifyMethod::tree);
  const std::vector<TokenHistory> roots = root_histories(), pending = pending_histories(draft);
  const TokenHistory& committed = kCommitted;
  int64_t differing = 0;
  for (int step = 0; step < steps; ++step) {
    const float* kept_laws = kept.draft_laws(B, N);
    const float* host_laws = host.draft_laws(B, N);
    kept.plan_drafts(draft, {depth_draws(kept.device_logits(B * 2), 0, step, roots),
                             depth_draws(kept.device_logits(B * 2), 1, step, pending)});
    std::vector<Token> drawn;                 // depth by depth, sequence by sequence
    std::vector<TokenHistory> known = roots;  // the host's histories of a depth's rows, its paths' tokens known
    for (int32_t d = 0; d < 2; ++d) {
      float* rows = kept.device_logits(B * kFrontier[d]);
      float* other = host.device_logits(B * kFrontier[d]);
      write_rows(rows, other, B * kFrontier[d], 100 * step + d);
      kept.launch_planned(static_cast<size_t>(d));
      const std::vector<Token> t = host.draw_drafts(draft, depth_draws(other, d, step, known), LogitsAt::device);
      drawn.insert(drawn.end(), t.begin(), t.end());
      known.clear();
      for (const Token x : t) known.push_back(kCommitted.extended(x));  // depth 1's frontier: depth 0's nodes
    }
    const uint64_t waits = kept.waits();
    const int32_t* ids = kept.keep_planned_ids(B);
    std::vector<TokenTree> fed_trees, host_trees;
    for (int64_t b = 0; b < B; ++b) {
      host_trees.push_back(tree_of({drawn[b * 2], drawn[b * 2 + 1], drawn[B * 2 + b * 2], drawn[B * 2 + b * 2 + 1]}));
      host_trees.back().device_q = host_laws + b * (N + 1) * V;
      fed_trees.push_back(tree_of({-1, -1, -1, -1}));
      fed_trees.back().device_q = kept_laws + b * (N + 1) * V;
      fed_trees.back().device_tokens = ids + b * N;
    }
    // The target's rows: the same in both.
    float* kept_rows = kept.device_logits(B * (N + 1));
    float* host_rows = host.device_logits(B * (N + 1));
    write_rows(kept_rows, host_rows, B * (N + 1), 1000 + step);
    std::vector<DeviceStep> fed_steps, host_steps;
    for (int64_t b = 0; b < B; ++b) {
      const StepRandom rng{9, static_cast<uint64_t>(b), static_cast<uint64_t>(step)};
      fed_steps.push_back(DeviceStep{kept_rows + b * (N + 1) * V, &fed_trees[b], &committed, rng});
      host_steps.push_back(DeviceStep{host_rows + b * (N + 1) * V, &host_trees[b], &committed, rng});
    }
    const std::vector<DeviceStepResult> a = kept.verify(fed_steps, LogitsAt::device);
    CHECK(kept.waits() == waits + 1);  // the draws' ids came back with verification's results
    const std::vector<DeviceStepResult> e = host.verify(host_steps, LogitsAt::device);
    for (int64_t b = 0; b < B; ++b) {
      const bool same = a[b].outcome.emitted == e[b].outcome.emitted && a[b].outcome.path == e[b].outcome.path &&
                        a[b].outcome.accepted == e[b].outcome.accepted && a[b].draft_tokens == host_trees[b].tokens &&
                        e[b].draft_tokens.empty();
      differing += !same;
      if (stop_emitted)
        for (const Token x : e[b].outcome.emitted) *stop_emitted += x == 3;
    }
  }
  // The plan's staging and verification's are apart: no staging buffer was written while its upload might still run.
  CHECK(kept.staging_waits() == 0);
  CHECK(host.staging_waits() == 0);
  return differing;
}

}  // namespace

TEST_CASE("a fed proposal's ids kept on the device are verified in place as the host's trees, with one wait",
          "[verify][device]") {
  int64_t stop_emitted = 0;
  CHECK(differing_steps(24, 0.8f, &stop_emitted) == 0);
  CHECK(stop_emitted > 0);                // emitted from depth-2 rows: their paths' lengths were read
  CHECK(differing_steps(24, 0.0f) == 0);  // a greedy target (one-hot rows)
}

TEST_CASE("penalised drafts and targets count a kept proposal's ids on the device, as the host's tokens",
          "[verify][device]") {
  CHECK(differing_steps(24, 0.8f, nullptr, true) == 0);
  CHECK(differing_steps(24, 0.0f, nullptr, true) == 0);
}

TEST_CASE("kept ids taken from the wrong depth change the verified steps", "[verify][device][mutant]") {
  const ScopedMutant on(Mutant::kept_ids_depths_misplaced);
  CHECK(differing_steps(24, 0.8f) > 0);
}

TEST_CASE("pending ids left out of the penalty counts change the drafts and the verified steps",
          "[verify][device][mutant]") {
  const ScopedMutant on(Mutant::pending_counts_skip_newest);
  CHECK(differing_steps(24, 0.8f, nullptr, true) > 0);
  CHECK(differing_steps(24, 0.8f) == 0);  // without penalties no count is read
}

TEST_CASE("kept ids: bad plans and batches are refused", "[verify][device]") {
  const SamplerPipeline draft(draft_params(), V), target(target_params(), V);
  BatchVerifier v(Device::cuda_host, target, VerifyMethod::tree);
  const std::vector<TokenHistory> roots = root_histories(), pending = pending_histories(draft);
  const TokenHistory& committed = kCommitted;
  CHECK_THROWS_WITH(v.keep_planned_ids(B), Contains("keep_planned_ids without a plan"));
  const float* laws = v.draft_laws(B, N);
  float* rows = v.device_logits(B * (N + 1));
  std::vector<float> unused(static_cast<size_t>(B * (N + 1) * V));
  write_rows(rows, unused.data(), B * (N + 1), 5);  // every row the plan's depths and the target read
  // Draws out of their sequences' order.
  std::vector<DraftDraw> swapped = depth_draws(rows, 0, 0, roots);
  std::swap(swapped.front(), swapped.back());
  v.plan_drafts(draft, {swapped});
  v.launch_planned(0);
  CHECK_THROWS_WITH(v.keep_planned_ids(B), Contains("depth 0's draw 0 is sequence 1's, not in its place"));
  const auto plan = [&] {
    v.plan_drafts(
        draft, {depth_draws(v.device_logits(B * 2), 0, 0, roots), depth_draws(v.device_logits(B * 2), 1, 0, pending)});
  };
  // A depth's rows read only ids drawn before it: the first depth none, the second the first's four.
  CHECK_THROWS_WITH(v.plan_drafts(draft, {depth_draws(v.device_logits(B * 2), 0, 0, {pending[0], pending[1]})}),
                    Contains("row 0's history has pending id 0, but only 0 ids lie on the device before it"));
  std::vector<TokenHistory> too_far = pending;
  too_far[3].pending_ids = {4};
  CHECK_THROWS_WITH(v.plan_drafts(draft, {depth_draws(v.device_logits(B * 2), 0, 0, roots),
                                          depth_draws(v.device_logits(B * 2), 1, 0, too_far)}),
                    Contains("has pending id 4, but only 4 ids lie on the device before it"));
  plan();
  CHECK_THROWS_WITH(v.launch_planned(1), Contains("launch_planned(1) before depth 0"));
  v.launch_planned(0);
  CHECK_THROWS_WITH(v.launch_planned(0), Contains("launch_planned(0) again"));
  CHECK_THROWS_WITH(v.keep_planned_ids(B), Contains("before depth 1 of the plan was launched"));
  v.launch_planned(1);
  CHECK_THROWS_WITH(v.keep_planned_ids(3), Contains("depth 0's 4 planned ids do not split evenly among 3 sequences"));
  CHECK_THROWS_WITH(v.keep_planned_ids(0), Contains("for 0 sequences"));
  const int32_t* ids = v.keep_planned_ids(B);
  CHECK_THROWS_WITH(v.planned_tokens(), Contains("without a plan"));  // keeping the ids ended the plan
  std::vector<TokenTree> trees(B, tree_of({-1, -1, -1, -1}));
  std::vector<DeviceStep> steps;
  for (int64_t b = 0; b < B; ++b) {
    trees[b].device_q = laws + b * (N + 1) * V;
    trees[b].device_tokens = ids + b * N;
    steps.push_back(DeviceStep{rows + b * (N + 1) * V, &trees[b], &committed, StepRandom{9, 0, 0}});
  }
  // A tree whose ids are not its sequence's; a batch of another size; a tree with its ids on the host among them.
  trees[1].device_tokens = ids + 1;
  CHECK_THROWS_WITH(v.verify(steps, LogitsAt::device), Contains("step 1's draft ids are in device memory but not at"));
  trees[1].device_tokens = ids + N;
  CHECK_THROWS_WITH(v.verify({steps[0]}, LogitsAt::device), Contains("where 2 sequences' ids were kept"));
  trees[1].device_tokens = nullptr;
  CHECK_THROWS_WITH(v.verify(steps, LogitsAt::device), Contains("1 of a batch of 2 steps"));
  trees[1].device_tokens = ids + N;
  // The kept ids' values in their laws (kept_law_values): node m of sequence b drawn from row law_row(m) of its laws
  // (on cuda-host the device's memory is the host's); entries outside the laws or the kept ids are refused.
  const auto law_row = [](int32_t m) { return m < 2 ? 0 : m - 1; };
  std::vector<DraftLawEntry> entries;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t m = 0; m < N; ++m) entries.push_back(DraftLawEntry{b, law_row(m), -1, m});
  const std::vector<float> values = v.kept_law_values(entries);
  REQUIRE(values.size() == entries.size());
  for (const DraftLawEntry& e : entries) {
    const Token id = ids[e.sequence * N + e.node];
    CHECK(values[static_cast<size_t>(e.sequence * N + e.node)] == laws[(e.sequence * (N + 1) + e.row) * V + id]);
    CHECK(values[static_cast<size_t>(e.sequence * N + e.node)] > 0.0f);  // a drawn token had mass
  }
  CHECK_THROWS_WITH(v.kept_law_values({DraftLawEntry{0, 0, -1, N}}), Contains("reads node 4 of sequence 0, but 2"));
  CHECK_THROWS_WITH(v.kept_law_values({DraftLawEntry{0, N + 1, -1, 0}}), Contains("a draft law value of row 5"));
  CHECK_THROWS_WITH(v.draft_law_values({DraftLawEntry{0, 0, V, -1}}), Contains("reads token 37, not a token"));
  // A step's tree may be its kept ids' first nodes (a chain cut to its own K, or after the draft's doubt), every
  // step's among them: verification reads the ids at the kept width, their stride.
  std::vector<TokenTree> cut = trees;
  for (TokenTree& t : cut) {
    t.tokens.pop_back();
    t.parent.pop_back();
  }
  // (each step's rows follow the one before's in device_logits: step 1's after step 0's four)
  const std::vector<DeviceStep> narrow = {DeviceStep{rows, &cut[0], &committed, steps[0].rng},
                                          DeviceStep{rows + N * V, &cut[1], &committed, steps[1].rng}};
  const std::vector<DeviceStepResult> cut_results = v.verify(narrow, LogitsAt::device);
  REQUIRE(cut_results.size() == 2);
  CHECK(cut_results[0].draft_tokens == std::vector<Token>(ids, ids + 3));
  CHECK(cut_results[1].draft_tokens == std::vector<Token>(ids + N, ids + N + 3));
  // Once: the kept ids were the verification's.
  CHECK_THROWS_WITH(v.verify(narrow, LogitsAt::device), Contains("no plan kept them"));
  CHECK_THROWS_WITH(v.kept_law_values(entries), Contains("kept_law_values without kept ids"));
  // One step cut, the other whole, from a new plan's kept ids.
  plan();
  v.launch_planned(0);
  v.launch_planned(1);
  const int32_t* again = v.keep_planned_ids(B);
  cut[0].device_tokens = again;
  trees[1].device_tokens = again + N;
  steps[0].tree = &cut[0];
  steps[1].logits = rows + N * V;
  const std::vector<DeviceStepResult> results = v.verify(steps, LogitsAt::device);
  REQUIRE(results.size() == 2);
  // Each step's own nodes' ids come back, from its row of the kept ids.
  CHECK(results[0].draft_tokens == std::vector<Token>(again, again + 3));
  CHECK(results[1].draft_tokens == std::vector<Token>(again + N, again + 2 * N));
  // A failed draw's value (-1) is refused, named by the draw's status as verification names it.
  plan();
  v.device_logits(B * 2)[0] = std::nanf("");  // sequence 0's root row at the first depth
  v.launch_planned(0);
  v.launch_planned(1);
  v.keep_planned_ids(B);
  CHECK_THROWS_WITH(v.kept_law_values(entries), Contains("draft from row 0 of sequence 0: "));
}

// A history with pending ids is read only where a device array of them is named: the host's pipeline, a row sampler,
// a batch whose placeholders are fewer than its pending ids, a history grown past them, and one made pending twice are
// refused.
TEST_CASE("histories with ids still in device memory are refused where nothing can count them", "[verify][device]") {
  SamplingParams params = draft_params(true);
  const SamplerPipeline pipeline(params, V);
  const TokenHistory pending = pending_history(pipeline, kCommitted, {0, 1});
  REQUIRE(pending.output.size() == 2);
  const std::vector<float> logits(V, 0.5f);
  CHECK_THROWS_WITH(pipeline.process(logits, pending),
                    Contains("last 2 output tokens are still in device memory; the host cannot read them"));
  CHECK_THROWS_WITH(RowSampler(Device::cuda_host, params, pending, logits),
                    Contains("row sampler: the history has ids still in device memory"));
  TokenHistory short_of = pending;
  short_of.output.resize(1);
  CHECK_THROWS_WITH(SamplerBatch(V, {SamplerBatchRow{&params, &short_of, RandomKey{}}}),
                    Contains("row 0: 2 pending ids for 1 output tokens"));
  CHECK_THROWS_WITH(pending.extended(4), Contains("a token added after ids still in device memory"));
  CHECK_THROWS_WITH(pending_history(pipeline, pending, {2}),
                    Contains("the committed history has ids still in device memory"));
  // The batch counts the known tokens alone: the placeholders (token 0) add nothing, the device adds the ids.
  const TokenHistory known = [] {
    TokenHistory h = kCommitted.extended(5);
    h.output.push_back(0);
    h.pending_ids = {0};
    return h;
  }();
  const SamplerBatch batch(V, {SamplerBatchRow{&params, &known, RandomKey{}}});
  REQUIRE(batch.output_counts.size() == static_cast<size_t>(V));
  CHECK(batch.output_counts[5] == 1);
  CHECK(batch.output_counts[0] == 0);
}
