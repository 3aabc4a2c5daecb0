// A fed proposal's ids kept on the device for verification (BatchVerifier::keep_planned_ids): verify() reads them in
// place and decides exactly as it does for the same trees given on the host, bringing the ids back with its results in
// the step's one wait. On cuda-host, with a 2,1 tree of two sequences drawn depth by depth as a draft model would.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/shared/philox.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/batch_verifier.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t B = 2;
constexpr int32_t N = 4, V = 37;  // a 2,1 tree: nodes 0 and 1 under the root, node 2 under 0, node 3 under 1
const std::vector<int64_t> kFrontier = {1, 2};  // frontier rows a sequence at depths 0 and 1

SamplingParams draft_params() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 8;
  return s;
}

// No penalty, so the ids may stay on the device; min_tokens reads the rows' paths' lengths: the stop token, which leads
// every target row, is banned at rows 0 to 2 (depths 0 and 1) and allowed at rows 3 and 4 (depth 2).
SamplingParams target_params(float temperature = 0.8f) {
  SamplingParams s;
  s.temperature = temperature;
  s.top_k = 10;
  s.min_tokens = 2;
  s.stop_tokens = {3};
  return s;
}

// The draws of depth d of a step (rows written at `rows`), as a draft model's fed proposal plans them: the root's two
// children (the second's law a scratch copy at node 1's row), then one child under each.
std::vector<DraftDraw> depth_draws(const float* rows, int32_t d, uint64_t step, const std::vector<TokenHistory>& h) {
  std::vector<DraftDraw> draws;
  for (int64_t b = 0; b < B; ++b) {
    const StepRandom rng{3, static_cast<uint64_t>(b), step};
    for (int64_t k = 0; k < kFrontier[d]; ++k)
      for (int32_t j = 0; j < (d == 0 ? 2 : 1); ++j) {
        const int32_t child = static_cast<int32_t>(k) * (d == 0 ? 2 : 1) + j, slot = 2 * d + child;
        const int32_t law_row = d == 0 ? (j == 0 ? 0 : 2) : 1 + static_cast<int32_t>(k);
        draws.push_back(
            DraftDraw{DeviceDraw{rows + (b * kFrontier[d] + k) * V, &h[b * 2 + d], rng.key(RandomRole::draft, slot)}, b,
                      law_row});
      }
  }
  return draws;
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
int64_t differing_steps(int steps, float target_temperature, int64_t* stop_emitted = nullptr) {
  const SamplerPipeline draft(draft_params(), V), target(target_params(target_temperature), V);
  BatchVerifier kept(Device::cuda_host, target, VerifyMethod::tree),
      host(Device::cuda_host, target, VerifyMethod::tree);
  std::vector<TokenHistory> histories;  // [b * 2 + d]: a frontier row's history at depth d: its path's length
  for (int64_t b = 0; b < B; ++b)
    for (int32_t d = 0; d < 2; ++d) histories.push_back(TokenHistory{{1, 2}, std::vector<Token>(d, 0), std::nan("")});
  const TokenHistory committed{{1, 2}, {}, std::nan("")};
  int64_t differing = 0;
  for (int step = 0; step < steps; ++step) {
    const float* kept_laws = kept.draft_laws(B, N);
    const float* host_laws = host.draft_laws(B, N);
    kept.plan_drafts(draft, {depth_draws(kept.device_logits(B * 2), 0, step, histories),
                             depth_draws(kept.device_logits(B * 2), 1, step, histories)});
    std::vector<Token> drawn;  // depth by depth, sequence by sequence
    for (int32_t d = 0; d < 2; ++d) {
      float* rows = kept.device_logits(B * kFrontier[d]);
      float* other = host.device_logits(B * kFrontier[d]);
      write_rows(rows, other, B * kFrontier[d], 100 * step + d);
      kept.launch_planned(static_cast<size_t>(d));
      const std::vector<Token> t = host.draw_drafts(draft, depth_draws(other, d, step, histories), LogitsAt::device);
      drawn.insert(drawn.end(), t.begin(), t.end());
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

TEST_CASE("kept ids taken from the wrong depth change the verified steps", "[verify][device][mutant]") {
  const ScopedMutant on(Mutant::kept_ids_depths_misplaced);
  CHECK(differing_steps(24, 0.8f) > 0);
}

TEST_CASE("kept ids: bad plans and batches are refused", "[verify][device]") {
  const SamplerPipeline draft(draft_params(), V), target(target_params(), V);
  BatchVerifier v(Device::cuda_host, target, VerifyMethod::tree);
  std::vector<TokenHistory> histories;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t d = 0; d < 2; ++d) histories.push_back(TokenHistory{{1, 2}, std::vector<Token>(d, 0), std::nan("")});
  const TokenHistory committed{{1, 2}, {}, std::nan("")};
  CHECK_THROWS_WITH(v.keep_planned_ids(B), Contains("keep_planned_ids without a plan"));
  const float* laws = v.draft_laws(B, N);
  float* rows = v.device_logits(B * (N + 1));
  std::vector<float> unused(static_cast<size_t>(B * (N + 1) * V));
  write_rows(rows, unused.data(), B * (N + 1), 5);  // every row the plan's depths and the target read
  // Draws out of their sequences' order.
  std::vector<DraftDraw> swapped = depth_draws(rows, 0, 0, histories);
  std::swap(swapped.front(), swapped.back());
  v.plan_drafts(draft, {swapped});
  v.launch_planned(0);
  CHECK_THROWS_WITH(v.keep_planned_ids(B), Contains("depth 0's draw 0 is sequence 1's, not in its place"));
  const auto plan = [&] {
    v.plan_drafts(draft, {depth_draws(v.device_logits(B * 2), 0, 0, histories),
                          depth_draws(v.device_logits(B * 2), 1, 0, histories)});
  };
  plan();
  v.launch_planned(0);
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
  CHECK(v.verify(steps, LogitsAt::device).size() == 2);
  // Once: the kept ids were the verification's.
  CHECK_THROWS_WITH(v.verify(steps, LogitsAt::device), Contains("no plan kept them"));
  // A target whose penalties read the paths' tokens cannot take them.
  SamplingParams penalised = target_params();
  penalised.repetition_penalty = 1.2f;
  const SamplerPipeline penalised_target(penalised, V);
  BatchVerifier p(Device::cuda_host, penalised_target, VerifyMethod::tree);
  p.draft_laws(B, N);
  p.plan_drafts(draft, {depth_draws(p.device_logits(B * 2), 0, 0, histories),
                        depth_draws(p.device_logits(B * 2), 1, 0, histories)});
  p.launch_planned(0);
  p.launch_planned(1);
  const int32_t* p_ids = p.keep_planned_ids(B);
  const float* p_rows = p.device_logits(B * (N + 1));
  for (int64_t b = 0; b < B; ++b) {
    trees[b].device_tokens = p_ids + b * N;
    steps[b].logits = p_rows + b * (N + 1) * V;
  }
  CHECK_THROWS_WITH(p.verify(steps, LogitsAt::device), Contains("penalties read the draft's tokens"));
}
