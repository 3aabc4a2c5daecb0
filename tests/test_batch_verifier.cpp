// BatchVerifier's two places for a step's logits (verify/device/batch_verifier.h): uploaded from the host, or
// already in its device buffer, where a model on the device wrote them (read in place). Both must decide alike,
// the in-place call must move no logits, and rows anywhere else than the buffer's must be refused.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "draft/candidate_sampling.h"
#include "kernels/shared/philox.h"
#include "verify/device/batch_verifier.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/verify_methods.h"

using namespace specula;

namespace {

constexpr int32_t kVocab = 37;

// A softmax row of Philox-random logits: the draft law q a drafter would have recorded.
std::vector<float> random_law(uint64_t seed) {
  std::vector<float> q(kVocab);
  double total = 0.0;
  for (int32_t v = 0; v < kVocab; ++v) total += q[v] = static_cast<float>(std::exp(3.0 * philox_uniform(seed, 3, v)));
  for (float& x : q) x = static_cast<float>(x / total);
  return q;
}

// Three sequences' chains (3, 1 and 2 drafts) with recorded laws, their histories and Philox-random logits.
struct Batch {
  std::vector<TokenTree> trees;
  std::vector<TokenHistory> histories;
  std::vector<float> logits;  // every step's rows in order
  int64_t rows = 0;

  Batch() {
    const std::vector<std::vector<Token>> drafts = {{4, 9, 1}, {30}, {2, 2}};
    for (size_t b = 0; b < drafts.size(); ++b) {
      TokenTree t = TokenTree::chain(drafts[b]);
      for (int32_t r = 0; r < t.size(); ++r) t.draft_q.push_back(random_law(100 * b + r));
      trees.push_back(t);
      histories.push_back(TokenHistory{{1, 2, 3}, {static_cast<Token>(b)}, std::nan("")});
      rows += t.size() + 1;
    }
    logits.resize(static_cast<size_t>(rows) * kVocab);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(4.0 * philox_uniform(77, 5, i) - 2.0);
  }
  // The steps with their rows at `first_row` (consecutive rows of one [rows, V] array).
  std::vector<DeviceStep> steps(const float* first_row) const {
    std::vector<DeviceStep> out;
    const float* row = first_row;
    for (size_t b = 0; b < trees.size(); ++b) {
      out.push_back(DeviceStep{row, &trees[b], &histories[b], StepRandom{9, b, 4}});
      row += static_cast<size_t>(trees[b].size() + 1) * kVocab;
    }
    return out;
  }
};

SamplingParams sampled() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 20;
  s.repetition_penalty = 1.3f;
  return s;
}

}  // namespace

TEST_CASE("a device step reads logits written into the verifier's buffer in place, deciding as uploaded logits",
          "[verify][device]") {
  const Batch batch;
  const SamplerPipeline pipeline(sampled(), kVocab);
  const uint64_t logit_bytes = static_cast<uint64_t>(batch.rows) * kVocab * sizeof(float);
  for (VerifyMethod method : {VerifyMethod::chain, VerifyMethod::block}) {
    INFO(verify_method_name(method));
    BatchVerifier uploaded(Device::cuda_host, pipeline, method), in_place(Device::cuda_host, pipeline, method);
    const std::vector<DeviceStepResult> a = uploaded.verify(batch.steps(batch.logits.data()));
    float* buffer = in_place.device_logits(batch.rows);
    std::memcpy(buffer, batch.logits.data(), logit_bytes);  // what a model on the device writes there
    const std::vector<DeviceStepResult> b = in_place.verify(batch.steps(buffer), LogitsAt::device);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].outcome.emitted == b[i].outcome.emitted);
      CHECK(a[i].outcome.accepted == b[i].outcome.accepted);
      CHECK(a[i].expected_acceptance_sum == b[i].expected_acceptance_sum);
    }
    // The in-place step moved everything but the logits: the uploaded one moved exactly them more.
    CHECK(uploaded.uploaded_bytes() == in_place.uploaded_bytes() + logit_bytes);
    CHECK(uploaded.downloaded_bytes() == in_place.downloaded_bytes());
  }
}

TEST_CASE("device draws read logits written into the verifier's buffer in place", "[verify][device]") {
  const Batch batch;
  const SamplerPipeline pipeline(sampled(), kVocab);
  BatchVerifier uploaded(Device::cuda_host, pipeline, std::nullopt),
      in_place(Device::cuda_host, pipeline, std::nullopt);
  float* buffer = in_place.device_logits(3);
  std::memcpy(buffer, batch.logits.data(), 3 * kVocab * sizeof(float));
  std::vector<DeviceDraw> from_host, from_device;
  for (int32_t r = 0; r < 3; ++r) {
    const RandomKey key{11, 2, static_cast<uint64_t>(r)};
    from_host.push_back(DeviceDraw{batch.logits.data() + r * kVocab, &batch.histories[r], key});
    from_device.push_back(DeviceDraw{buffer + r * kVocab, &batch.histories[r], key});
  }
  CHECK(uploaded.sample(from_host) == in_place.sample(from_device, LogitsAt::device));
  CHECK(uploaded.uploaded_bytes() == in_place.uploaded_bytes() + 3 * kVocab * sizeof(float));
}

TEST_CASE("logits said to be in place but not the verifier's buffer rows in order are refused", "[verify][device]") {
  const Batch batch;
  const SamplerPipeline pipeline(sampled(), kVocab);
  BatchVerifier verifier(Device::cuda_host, pipeline, VerifyMethod::chain);
  float* buffer = verifier.device_logits(batch.rows);
  std::memcpy(buffer, batch.logits.data(), batch.logits.size() * sizeof(float));
  // Host rows, and the buffer's rows shifted by one row.
  CHECK_THROWS_WITH(verifier.verify(batch.steps(batch.logits.data()), LogitsAt::device),
                    Catch::Contains("row 0 of 9 is not row 0 of device_logits"));
  CHECK_THROWS_WITH(verifier.verify(batch.steps(buffer + kVocab), LogitsAt::device),
                    Catch::Contains("is not row 0 of device_logits"));
  CHECK_THROWS_WITH(verifier.device_logits(0), Catch::Contains("at least one row"));
  // The buffer's rows in order are taken.
  CHECK(verifier.verify(batch.steps(buffer), LogitsAt::device).size() == 3);
}

namespace {

// Draft chains drawn on the device over a vocabulary of V (a multiple of 4: 4-wide vector accesses at the mapped
// rows) with `emulation`'s blocks a row.
void check_device_drafts(int32_t V, const EmulationOptions& emulation) {
  constexpr int64_t B = 3;
  constexpr int32_t K = 2;
  const SamplerPipeline target(sampled(), V);
  SamplingParams draft_params = sampled();
  draft_params.temperature = 1.1f;
  const SamplerPipeline draft(draft_params, V);
  BatchVerifier on_device(Device::cuda_host, target, VerifyMethod::chain, emulation),
      uploaded(Device::cuda_host, target, VerifyMethod::chain, emulation);
  float* laws = on_device.draft_laws(B, K);
  BatchVerifier from_host(Device::cuda_host, target, VerifyMethod::chain, emulation);  // the rows uploaded instead
  const float* host_laws = from_host.draft_laws(B, K);
  std::vector<TokenHistory> committed;
  std::vector<StepRandom> rng;
  for (int64_t b = 0; b < B; ++b) {
    committed.push_back(TokenHistory{{1, 2, 3}, {static_cast<Token>(b)}, std::nan("")});
    rng.push_back(StepRandom{9, static_cast<uint64_t>(b), 4});
  }
  std::vector<std::vector<Token>> chains(B);
  std::vector<std::vector<std::vector<float>>> cpu_laws(B);
  for (int32_t d = 0; d < K; ++d) {
    // The model writes every sequence's d + 1 rows; the last of each is drawn from.
    const int64_t rows = d + 1;
    float* buffer = on_device.device_logits(B * rows);
    std::vector<TokenHistory> histories;
    histories.reserve(B);
    std::vector<DraftDraw> draws;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < rows * V; ++i)
        buffer[b * rows * V + i] = static_cast<float>(4.0 * philox_uniform(31, 10 * b + d, i) - 2.0);
      TokenHistory h = committed[b];
      for (Token t : chains[b]) h = draft.advance(h, t, nullptr);
      histories.push_back(h);
      draws.push_back(DraftDraw{
          DeviceDraw{buffer + (b * rows + d) * V, &histories.back(), rng[b].key(RandomRole::draft, d)}, b, d});
    }
    const std::vector<Token> tokens = on_device.draw_drafts(draft, draws, LogitsAt::device);
    std::vector<std::vector<float>> host_rows;
    std::vector<DraftDraw> host_draws = draws;
    host_rows.reserve(B);
    for (int64_t b = 0; b < B; ++b) {
      host_rows.emplace_back(draws[b].draw.logits, draws[b].draw.logits + V);
      host_draws[b].draw.logits = host_rows.back().data();
    }
    CHECK(from_host.draw_drafts(draft, host_draws, LogitsAt::host) == tokens);
    for (int64_t b = 0; b < B; ++b) {
      // The CPU path: the draft's pipeline on the row, sample_categorical with the same key.
      std::vector<float> q(V);
      draft.process(draws[b].draw.logits, histories[b], q.data());
      INFO("sequence " << b << ", draft " << d);
      CHECK(tokens[b] == sample_categorical(q.data(), V, draws[b].draw.key));
      const float* kept = laws + (b * (K + 1) + d) * V;
      for (int32_t x = 0; x < V; ++x) CHECK(kept[x] == Approx(q[x]).margin(1e-6));
      CHECK(std::equal(kept, kept + V, host_laws + (b * (K + 1) + d) * V));
      chains[b].push_back(tokens[b]);
      cpu_laws[b].emplace_back(kept, kept + V);
    }
  }
  // Verification reading the laws where they are, and the same laws uploaded from the host: the same decisions,
  // and the in-place step moved no law.
  std::vector<TokenTree> trees, host_trees;
  for (int64_t b = 0; b < B; ++b) {
    trees.push_back(TokenTree::chain(chains[b]));
    trees.back().device_q = laws + b * (K + 1) * V;
    host_trees.push_back(TokenTree::chain(chains[b]));
    host_trees.back().draft_q = cpu_laws[b];
  }
  std::vector<float> logits(static_cast<size_t>(B * (K + 1) * V));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(4.0 * philox_uniform(77, 6, i) - 2.0);
  const auto steps = [&](const std::vector<TokenTree>& t) {
    std::vector<DeviceStep> out;
    for (int64_t b = 0; b < B; ++b)
      out.push_back(DeviceStep{logits.data() + b * (K + 1) * V, &t[b], &committed[b], rng[b]});
    return out;
  };
  const uint64_t before = on_device.uploaded_bytes();
  const std::vector<DeviceStepResult> a = on_device.verify(steps(trees)), c = uploaded.verify(steps(host_trees));
  REQUIRE(a.size() == c.size());
  for (size_t b = 0; b < a.size(); ++b) {
    CHECK(a[b].outcome.emitted == c[b].outcome.emitted);
    CHECK(a[b].outcome.accepted == c[b].outcome.accepted);
    CHECK(a[b].expected_acceptance_sum == c[b].expected_acceptance_sum);
  }
  CHECK(uploaded.uploaded_bytes() == on_device.uploaded_bytes() - before + B * (K + 1) * V * sizeof(float));
  // Host code cannot read laws left on the device.
  CHECK_THROWS_WITH(trees[0].q_at_row(0), Catch::Contains("draft laws are in device memory"));
  // Laws at other rows of draft_laws (trees of different sizes) are read where they are: swapped, the
  // steps decide as the host's trees with their laws swapped.
  std::swap(trees[0].device_q, trees[1].device_q);
  std::swap(host_trees[0].draft_q, host_trees[1].draft_q);
  const std::vector<DeviceStepResult> swapped = on_device.verify(steps(trees)),
                                      swapped_host = uploaded.verify(steps(host_trees));
  for (size_t b = 0; b < swapped.size(); ++b) {
    CHECK(swapped[b].outcome.emitted == swapped_host[b].outcome.emitted);
    CHECK(swapped[b].expected_acceptance_sum == swapped_host[b].expected_acceptance_sum);
  }
  // Laws outside draft_laws' rows, and draws past the room made, are refused.
  trees[1].device_q = laws + (B * (K + 1) - K) * V;  // the last row of draft_laws: the chain's rows run past it
  CHECK_THROWS_WITH(on_device.verify(steps(trees)), Catch::Contains("not at its rows of draft_laws"));
  trees[1].device_q = laws + 1;  // not at a row
  CHECK_THROWS_WITH(on_device.verify(steps(trees)), Catch::Contains("not at its rows of draft_laws"));
  const DeviceDraw draw{logits.data(), &committed[0], RandomKey{}};
  CHECK_THROWS_WITH(on_device.draw_drafts(draft, {DraftDraw{draw, 0, K + 1}}, LogitsAt::host),
                    Catch::Contains("at row 3 of sequence 0, but draft_laws made room for 3 drafts of 2 nodes"));
  CHECK_THROWS_WITH(on_device.draw_drafts(draft, {DraftDraw{draw, B, 0}}, LogitsAt::host),
                    Catch::Contains("made room for 3 drafts"));
  CHECK_THROWS_WITH(on_device.draw_drafts(draft, {DraftDraw{draw, 1, 2}, DraftDraw{draw, 1, 2}}, LogitsAt::host),
                    Catch::Contains("two draws keep their laws at row 2 of sequence 1"));
  CHECK_THROWS_WITH(on_device.draw_drafts(draft, {DraftDraw{draw, 0, 0}}, LogitsAt::device),
                    Catch::Contains("draft row 0 said to be in place is not a row of device_logits"));
  CHECK_THROWS_WITH(on_device.draw_drafts(draft, {}, LogitsAt::host), Catch::Contains("needs draws"));
}

// One depth of draft trees drawn in one launch: B sequences whose trees so far have two frontier nodes (rows 1 and
// 2 of each sequence's 3 rows), two children drawn from each, as the device drafter lays them out (the first child
// keeps the row's law, the second's processed row goes to the row of the node it becomes).
void check_tree_depth_in_one_launch(int32_t V, const EmulationOptions& emulation) {
  constexpr int64_t B = 2, rows = 3;
  constexpr int32_t N = 6;  // a 2,2 tree
  const SamplerPipeline target(sampled(), V);
  SamplingParams draft_params = sampled();
  draft_params.temperature = 0.9f;
  draft_params.repetition_penalty = 1.3f;  // every draw's own history (the path to its row)
  const SamplerPipeline draft(draft_params, V);
  BatchVerifier on_device(Device::cuda_host, target, VerifyMethod::tree, emulation),
      from_host(Device::cuda_host, target, VerifyMethod::tree, emulation);
  float* laws = on_device.draft_laws(B, N);
  const float* host_laws = from_host.draft_laws(B, N);
  float* buffer = on_device.device_logits(B * rows);
  for (int64_t i = 0; i < B * rows * V; ++i) buffer[i] = static_cast<float>(4.0 * philox_uniform(41, 3, i) - 2.0);
  std::vector<TokenHistory> histories;  // [b * 2 + k]: the path to frontier row k of sequence b
  for (int64_t b = 0; b < B; ++b)
    for (int32_t k = 0; k < 2; ++k)
      histories.push_back(TokenHistory{{1, 2}, {static_cast<Token>(b), static_cast<Token>(3 + k)}, std::nan("")});
  std::vector<DraftDraw> draws, host_draws;
  std::vector<std::vector<float>> host_rows;
  host_rows.reserve(B * 2);
  for (int64_t b = 0; b < B; ++b)
    for (int32_t k = 0; k < 2; ++k) {
      const float* row = buffer + (b * rows + 1 + k) * V;
      host_rows.emplace_back(row, row + V);
      for (int32_t j = 0; j < 2; ++j) {
        const StepRandom rng{5, static_cast<uint64_t>(b), 7};
        const DeviceDraw d{row, &histories[b * 2 + k], rng.key(RandomRole::draft, 2 + 2 * k + j)};
        const int32_t law_row = j == 0 ? 1 + k : 3 + 2 * k + j;
        draws.push_back(DraftDraw{d, b, law_row});
        host_draws.push_back(DraftDraw{DeviceDraw{host_rows.back().data(), d.history, d.key}, b, law_row});
      }
    }
  const uint64_t downloads = on_device.downloads(), uploaded = on_device.uploaded_bytes();
  const uint64_t host_uploaded = from_host.uploaded_bytes();
  const std::vector<Token> tokens = on_device.draw_drafts(draft, draws, LogitsAt::device);
  CHECK(on_device.downloads() == downloads + 2);  // one launch: its tokens and statuses
  CHECK(from_host.draw_drafts(draft, host_draws, LogitsAt::host) == tokens);
  // The host path uploads each frontier row once, not once per child.
  CHECK(from_host.uploaded_bytes() - host_uploaded ==
        on_device.uploaded_bytes() - uploaded + B * 2 * V * sizeof(float));
  // A row's children share its sampler inputs (its history's bitmap and counts: repetition penalty), built and
  // uploaded once: the same draws with a copy of the history each upload every child's, and draw the same tokens.
  std::vector<TokenHistory> copies;
  copies.reserve(draws.size());
  std::vector<DraftDraw> separate = draws;
  for (DraftDraw& d : separate) {
    copies.push_back(*d.draw.history);
    d.draw.history = &copies.back();
  }
  const uint64_t shared_bytes = on_device.uploaded_bytes() - uploaded;
  const uint64_t before_separate = on_device.uploaded_bytes();
  CHECK(on_device.draw_drafts(draft, separate, LogitsAt::device) == tokens);
  const int64_t words = (V + 31) / 32;
  CHECK(on_device.uploaded_bytes() - before_separate == shared_bytes + B * 2 * (words + V) * sizeof(int32_t));
  for (size_t r = 0; r < draws.size(); ++r) {
    const DraftDraw& d = draws[r];
    std::vector<float> q(V);
    draft.process(d.draw.logits, *d.draw.history, q.data());
    INFO("sequence " << d.sequence << ", draw " << r);
    CHECK(tokens[r] == sample_categorical(q.data(), V, d.draw.key));
    const float* kept = laws + (d.sequence * (N + 1) + d.law_row) * V;
    for (int32_t x = 0; x < V; ++x) CHECK(kept[x] == Approx(q[x]).margin(1e-6));
    CHECK(std::equal(kept, kept + V, host_laws + (d.sequence * (N + 1) + d.law_row) * V));
  }
}

// One depth of ranked draft trees (SiblingScheme::deterministic) chosen on the device: B sequences whose frontier is
// rows 1 and 2 of each sequence's 3 rows, three children each. The logits take few values, so that processed
// probabilities tie and the order among them is the ids'.
void check_ranked_depth(int32_t V, const EmulationOptions& emulation) {
  constexpr int64_t B = 2, rows = 3;
  constexpr int32_t children = 3;
  const SamplerPipeline target(sampled(), V);
  SamplingParams ranking_params = sampled();
  ranking_params.temperature = 1.0f;
  ranking_params.repetition_penalty = 1.3f;  // each row its own history
  ranking_params.top_k = 5;                  // a truncated row: its zeros share one key
  const SamplerPipeline ranking(ranking_params, V);
  BatchVerifier on_device(Device::cuda_host, target, VerifyMethod::tree, emulation),
      from_host(Device::cuda_host, target, VerifyMethod::tree, emulation);
  float* buffer = on_device.device_logits(B * rows);
  for (int64_t i = 0; i < B * rows * V; ++i) buffer[i] = static_cast<float>(std::floor(4.0 * philox_uniform(43, 3, i)));
  std::vector<TokenHistory> histories;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t k = 0; k < 2; ++k)
      histories.push_back(TokenHistory{{1, 2}, {static_cast<Token>(b), static_cast<Token>(3 + k)}, std::nan("")});
  std::vector<DeviceDraw> device_rows, host_rows;
  std::vector<std::vector<float>> copies;
  copies.reserve(B * 2);
  for (int64_t b = 0; b < B; ++b)
    for (int32_t k = 0; k < 2; ++k) {
      const float* row = buffer + (b * rows + 1 + k) * V;
      copies.emplace_back(row, row + V);
      device_rows.push_back(DeviceDraw{row, &histories[b * 2 + k], RandomKey{}});
      host_rows.push_back(DeviceDraw{copies.back().data(), &histories[b * 2 + k], RandomKey{}});
    }
  const uint64_t downloads = on_device.downloads();
  const std::vector<Token> tokens = on_device.rank_drafts(ranking, device_rows, children, LogitsAt::device);
  CHECK(on_device.downloads() == downloads + 2);  // the children and the rows' statuses, after one wait
  CHECK(from_host.rank_drafts(ranking, host_rows, children, LogitsAt::host) == tokens);
  REQUIRE(tokens.size() == device_rows.size() * children);
  int64_t tied = 0;
  for (size_t r = 0; r < device_rows.size(); ++r) {
    std::vector<float> q(V);
    ranking.process(device_rows[r].logits, *device_rows[r].history, q.data());
    uint32_t slot = 0;
    const std::vector<Token> expected =
        draw_children(q.data(), V, children, SiblingScheme::deterministic, StepRandom{}, slot);
    INFO("row " << r);
    CHECK(std::vector<Token>(tokens.begin() + r * children, tokens.begin() + (r + 1) * children) == expected);
    for (int32_t j = 1; j < children; ++j) tied += q[expected[j]] == q[expected[j - 1]];
  }
  CHECK(tied > 0);  // the rows test the order among equals
}

}  // namespace

TEST_CASE("draft chains drawn on the device: the CPU's draws, their laws verified where they were left",
          "[verify][device]") {
  check_device_drafts(kVocab, EmulationOptions{});
  // 4-wide vector accesses at the mapped rows, and each row over 3 blocks.
  check_device_drafts(40, EmulationOptions{8, FiberSchedule::rotating, 3});
}

// A proposal's depths planned at once (plan_drafts) and launched one by one as each depth's rows are written: the
// tokens and laws of draw_drafts depth by depth, with one wait in all. A 2,1 tree for two sequences: the root's two
// children (the second's law a scratch copy at node 1's row, which the next depth rewrites), then one child each.
TEST_CASE("a proposal's draft depths planned at once draw what draw_drafts draws, with one wait", "[verify][device]") {
  constexpr int64_t B = 2;
  constexpr int32_t N = 4, V = kVocab;
  const SamplerPipeline target(sampled(), V);
  SamplingParams draft_params;
  draft_params.temperature = 0.9f;
  draft_params.top_k = 5;
  draft_params.min_tokens = 1;  // the paths' lengths are read: the stop token is banned at depth 0 only
  draft_params.stop_tokens = {3};
  const SamplerPipeline draft(draft_params, V);
  BatchVerifier planned(Device::cuda_host, target, VerifyMethod::tree),
      stepwise(Device::cuda_host, target, VerifyMethod::tree);
  const float* planned_laws = planned.draft_laws(B, N);
  const float* stepwise_laws = stepwise.draft_laws(B, N);
  const std::vector<int64_t> frontier = {1, 2};  // rows a sequence at depth 0 and 1
  float* const buffer = planned.device_logits(B * 2);
  std::vector<TokenHistory> histories;  // [b * 2 + d]: a frontier row's history at depth d
  for (int64_t b = 0; b < B; ++b)
    for (int32_t d = 0; d < 2; ++d) histories.push_back(TokenHistory{{1, 2}, std::vector<Token>(d, 0), std::nan("")});
  const auto depth_draws = [&](const float* rows, int32_t d) {
    std::vector<DraftDraw> draws;
    for (int64_t b = 0; b < B; ++b) {
      const StepRandom rng{3, static_cast<uint64_t>(b), 1};
      for (int64_t k = 0; k < frontier[d]; ++k)
        for (int32_t j = 0; j < (d == 0 ? 2 : 1); ++j) {
          const int32_t child = static_cast<int32_t>(k) * (d == 0 ? 2 : 1) + j, slot = 2 * d + child;
          const int32_t law_row = d == 0 ? (j == 0 ? 0 : 2) : 1 + static_cast<int32_t>(k);
          draws.push_back(DraftDraw{
              DeviceDraw{rows + (b * frontier[d] + k) * V, &histories[b * 2 + d], rng.key(RandomRole::draft, slot)}, b,
              law_row});
        }
    }
    return draws;
  };
  planned.plan_drafts(draft, {depth_draws(buffer, 0), depth_draws(buffer, 1)});
  const uint64_t downloads = planned.downloads();
  std::vector<Token> expected;
  for (int32_t d = 0; d < 2; ++d) {
    // The depth's forward writes its frontier rows, then its draws are launched (in place, at once on cuda-host).
    float* rows = planned.device_logits(B * frontier[d]);
    REQUIRE(rows == buffer);
    float* other = stepwise.device_logits(B * frontier[d]);
    for (int64_t i = 0; i < B * frontier[d] * V; ++i)
      rows[i] = other[i] = i % V == 3 ? 3.0f : static_cast<float>(4.0 * philox_uniform(43, d, i) - 2.0);
    CHECK(planned.launch_planned(static_cast<size_t>(d)) != nullptr);
    const std::vector<Token> tokens = stepwise.draw_drafts(draft, depth_draws(other, d), LogitsAt::device);
    expected.insert(expected.end(), tokens.begin(), tokens.end());
  }
  CHECK(planned.downloads() == downloads);  // no wait between depths
  CHECK(planned.planned_tokens() == expected);
  CHECK(planned.downloads() == downloads + 2);                                     // then one: the tokens and statuses
  CHECK_THROWS_WITH(planned.planned_tokens(), Catch::Contains("without a plan"));  // the plan ended there
  // The laws written (rows 0 to 2 of each sequence; a leaf's row holds none). Token 3, the stop token, leads every
  // row's logits: banned at depth 0 (row 0's law), the most probable at depth 1 (rows 1 and 2).
  for (int64_t b = 0; b < B; ++b) {
    const int64_t first = b * (N + 1) * V;
    CHECK(std::equal(planned_laws + first, planned_laws + first + 3 * V, stepwise_laws + first));
    CHECK(planned_laws[first + 3] == 0.0f);
    CHECK(planned_laws[first + V + 3] > 0.1f);
    CHECK(planned_laws[first + 2 * V + 3] > 0.1f);
  }
  // Bad calls are refused.
  CHECK_THROWS_WITH(planned.launch_planned(2), Catch::Contains("launch_planned(2) without a plan of that depth"));
  CHECK_THROWS_WITH(stepwise.planned_tokens(), Catch::Contains("planned_tokens without a plan"));
  CHECK_THROWS_WITH(planned.plan_drafts(draft, {depth_draws(buffer, 0), {}}), Catch::Contains("a depth of no draws"));
  CHECK_THROWS_WITH(planned.launch_planned(0), Catch::Contains("without a plan"));  // the refused plan replaced it
  const std::vector<DeviceDraw> ranked_rows = {DeviceDraw{buffer, &histories[0], RandomKey{}}};
  CHECK_THROWS_WITH(planned.plan_ranked(draft, {ranked_rows}, {}), Catch::Contains("0 child counts for 1 depths"));
  CHECK_THROWS_WITH(planned.plan_ranked(draft, {ranked_rows}, {V + 1}), Catch::Contains("ranked children a row"));
  // Ranked: the children rank_drafts chooses, depth by depth: 3 of each sequence's row at depth 0 (token 3 banned),
  // 2 of each of its 2 rows at depth 1 (token 3 first).
  const auto ranked_depth = [&](const float* rows, int32_t d) {
    std::vector<DeviceDraw> out;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < frontier[d]; ++k)
        out.push_back(DeviceDraw{rows + (b * frontier[d] + k) * V, &histories[b * 2 + d], RandomKey{}});
    return out;
  };
  planned.plan_ranked(draft, {ranked_depth(buffer, 0), ranked_depth(buffer, 1)}, {3, 2});
  const uint64_t ranked_downloads = planned.downloads();
  std::vector<Token> ranked_expected;
  for (int32_t d = 0; d < 2; ++d) {
    float* rows = planned.device_logits(B * frontier[d]);
    float* other = stepwise.device_logits(B * frontier[d]);
    for (int64_t i = 0; i < B * frontier[d] * V; ++i)
      rows[i] = other[i] = i % V == 3 ? 3.0f : static_cast<float>(4.0 * philox_uniform(47, d, i) - 2.0);
    planned.launch_planned(static_cast<size_t>(d));
    const std::vector<Token> children =
        stepwise.rank_drafts(draft, ranked_depth(other, d), d == 0 ? 3 : 2, LogitsAt::device);
    ranked_expected.insert(ranked_expected.end(), children.begin(), children.end());
  }
  const std::vector<Token> ranked = planned.planned_tokens();
  CHECK(planned.downloads() == ranked_downloads + 2);
  CHECK(ranked == ranked_expected);
  REQUIRE(ranked.size() == static_cast<size_t>(B * 3 + B * 2 * 2));
  for (int64_t b = 0; b < B; ++b) {
    for (int32_t j = 0; j < 3; ++j) CHECK(ranked[b * 3 + j] != 3);
    for (int64_t k = 0; k < 2; ++k) CHECK(ranked[B * 3 + (b * 2 + k) * 2] == 3);
  }
}

TEST_CASE("a depth of draft trees is drawn on the device in one launch: every child the CPU's draw, each law kept",
          "[verify][device]") {
  check_tree_depth_in_one_launch(kVocab, EmulationOptions{});
  check_tree_depth_in_one_launch(40, EmulationOptions{8, FiberSchedule::reverse, 3, RowExchange::global_memory});
}

TEST_CASE("a depth of ranked draft trees is chosen on the device: draw_children's ranked siblings, one wait",
          "[verify][device]") {
  check_ranked_depth(kVocab, EmulationOptions{});
  check_ranked_depth(40, EmulationOptions{32, FiberSchedule::rotating});
  const SamplerPipeline target(sampled(), kVocab);
  BatchVerifier device(Device::cuda_host, target, VerifyMethod::tree);
  const std::vector<float> logits(kVocab, 0.0f);
  const TokenHistory history;
  const DeviceDraw row{logits.data(), &history, RandomKey{}};
  CHECK_THROWS_WITH(device.rank_drafts(target, {row}, 0, LogitsAt::host), Catch::Contains("0 ranked children a row"));
  CHECK_THROWS_WITH(device.rank_drafts(target, {row}, kVocab + 1, LogitsAt::host),
                    Catch::Contains("the device takes 1 to"));
  CHECK_THROWS_WITH(device.rank_drafts(target, {}, 2, LogitsAt::host), Catch::Contains("needs rows"));
  CHECK_THROWS_WITH(device.rank_drafts(target, {row}, 2, LogitsAt::device),
                    Catch::Contains("draft row 0 said to be in place is not a row of device_logits"));
}

TEST_CASE("a depth of siblings drawn without replacement on the device: one wait, the laws kept, bad calls refused",
          "[verify][device]") {
  constexpr int32_t V = kVocab;
  const SamplerPipeline target(sampled(), V);
  SamplingParams draft_params = sampled();
  draft_params.top_k = 3;  // rows of 3 tokens: the fourth sibling finds no mass
  const SamplerPipeline draft(draft_params, V);
  BatchVerifier on_device(Device::cuda_host, target, VerifyMethod::tree),
      from_host(Device::cuda_host, target, VerifyMethod::tree);
  constexpr int64_t B = 2;
  constexpr int32_t N = 8, children = 4;
  const float* laws = on_device.draft_laws(B, N);
  from_host.draft_laws(B, N);
  float* buffer = on_device.device_logits(B * 3);
  for (int64_t i = 0; i < B * 3 * V; ++i) buffer[i] = static_cast<float>(4.0 * philox_uniform(47, 3, i) - 2.0);
  const TokenHistory history{{1, 2}, {}, std::nan("")};
  // Sequence 0 draws from its rows 1 and 2, sequence 1 from its row 1.
  const std::vector<std::pair<int64_t, int32_t>> at = {{0, 1}, {0, 2}, {1, 1}};
  std::vector<DraftDraw> rows, host_rows;
  std::vector<std::vector<float>> copies;
  copies.reserve(at.size());
  for (const auto& [sequence, row] : at) {
    const float* logits = buffer + (sequence * 3 + row) * V;
    copies.emplace_back(logits, logits + V);
    rows.push_back(DraftDraw{DeviceDraw{logits, &history, RandomKey{}}, sequence, row});
    host_rows.push_back(DraftDraw{DeviceDraw{copies.back().data(), &history, RandomKey{}}, sequence, row});
  }
  std::vector<double> uniforms;
  for (size_t a = 0; a < at.size() * children; ++a) uniforms.push_back(philox_uniform(5, 9, a));
  const uint64_t downloads = on_device.downloads();
  const std::vector<Token> tokens = on_device.draw_siblings(draft, rows, children, uniforms, LogitsAt::device);
  CHECK(on_device.downloads() == downloads + 2);  // the siblings and the rows' statuses, after one wait
  CHECK(from_host.draw_siblings(draft, host_rows, children, uniforms, LogitsAt::host) == tokens);
  // Each row: as many distinct siblings as its law has tokens (at most three: top-k 3), then -1; each kept law the CPU
  // pipeline's row.
  int64_t ran_out = 0;
  for (size_t r = 0; r < at.size(); ++r) {
    INFO("row " << r);
    std::vector<float> q(V);
    draft.process(rows[r].draw.logits, history, q.data());
    const int64_t support = std::count_if(q.begin(), q.end(), [](float x) { return x > 0; });
    std::vector<Token> siblings(tokens.begin() + r * children, tokens.begin() + r * children + support);
    for (int64_t j = support; j < children; ++j) CHECK(tokens[r * children + j] == -1);
    ran_out += support < children;
    for (Token t : siblings) CHECK((t >= 0 && t < V && q[t] > 0));
    std::sort(siblings.begin(), siblings.end());
    CHECK(std::adjacent_find(siblings.begin(), siblings.end()) == siblings.end());
    const float* kept = laws + (at[r].first * (N + 1) + at[r].second) * V;
    for (int32_t x = 0; x < V; ++x) CHECK(kept[x] == Approx(q[x]).margin(1e-6));
  }
  CHECK(ran_out == static_cast<int64_t>(at.size()));
  // Refused: a sequence's rows apart, uniforms of another count, siblings out of range.
  std::vector<DraftDraw> apart = {rows[0], rows[2], rows[1]};
  CHECK_THROWS_WITH(on_device.draw_siblings(draft, apart, children, uniforms, LogitsAt::device),
                    Catch::Contains("sequence 0's rows apart"));
  CHECK_THROWS_WITH(on_device.draw_siblings(draft, rows, children, {0.5}, LogitsAt::device),
                    Catch::Contains("1 uniforms for 3 rows of 4 siblings"));
  CHECK_THROWS_WITH(on_device.draw_siblings(draft, rows, V + 1, uniforms, LogitsAt::device),
                    Catch::Contains("siblings a row; the device draws 1 to"));
}

TEST_CASE("siblings without replacement planned over depths are draw_siblings' a depth at a time; bad plans refused",
          "[verify][device]") {
  constexpr int32_t V = kVocab;
  const SamplerPipeline target(sampled(), V);
  SamplingParams draft_params = sampled();
  draft_params.top_k = 3;  // rows of 3 tokens: the roots' two siblings are drawn, the second depth's fourth is not
  const SamplerPipeline draft(draft_params, V);
  BatchVerifier planned(Device::cuda_host, target, VerifyMethod::tree),
      alone(Device::cuda_host, target, VerifyMethod::tree);
  constexpr int64_t B = 2;
  constexpr int32_t N = 10;
  const float* planned_laws = planned.draft_laws(B, N);
  const float* alone_laws = alone.draft_laws(B, N);
  float* a = planned.device_logits(6);
  float* b = alone.device_logits(6);
  for (int64_t i = 0; i < 6 * V; ++i) a[i] = b[i] = static_cast<float>(4.0 * philox_uniform(53, 1, i) - 2.0);
  const TokenHistory history{{3, 1}, {}, std::nan("")};
  // A 2,4 tree for two sequences. Depth 0: the roots at logits rows 0 and 1; depth 1: the roots' children, sequence 0's
  // nodes 1 and 2 at rows 2 and 3, sequence 1's at rows 4 and 5 (the depth before's children in order).
  const std::vector<std::vector<std::tuple<int64_t, int64_t, int32_t>>> at = {
      {{0, 0, 0}, {1, 1, 0}}, {{2, 0, 1}, {3, 0, 2}, {4, 1, 1}, {5, 1, 2}}};
  const std::vector<int32_t> children = {2, 4};
  std::vector<std::vector<DraftDraw>> depths, alone_depths;
  for (size_t d = 0; d < at.size(); ++d) {
    depths.emplace_back();
    alone_depths.emplace_back();
    for (const auto& [row, sequence, node] : at[d]) {
      depths[d].push_back(DraftDraw{DeviceDraw{a + row * V, &history, RandomKey{}}, sequence, node});
      alone_depths[d].push_back(DraftDraw{DeviceDraw{b + row * V, &history, RandomKey{}}, sequence, node});
    }
  }
  // Each sequence's slots in turn: 2 at the root, then 4 a row (no root runs out, so the second depth's draws are
  // draw_siblings' from the third slot on).
  std::vector<std::vector<double>> uniforms(B);
  for (int64_t s = 0; s < B; ++s)
    for (int32_t u = 0; u < N; ++u) uniforms[s].push_back(philox_uniform(6, s, u));
  planned.plan_siblings(draft, depths, children, uniforms);
  planned.launch_planned(0);
  planned.launch_planned(1);
  const uint64_t waits = planned.waits();
  const std::vector<Token> tokens = planned.planned_tokens();
  CHECK(planned.waits() == waits + 1);
  std::vector<Token> expected;
  for (size_t d = 0; d < at.size(); ++d) {
    std::vector<double> depth_uniforms;
    for (int64_t s = 0; s < B; ++s)
      depth_uniforms.insert(depth_uniforms.end(), uniforms[s].begin() + (d == 0 ? 0 : 2),
                            uniforms[s].begin() + (d == 0 ? 2 : 10));
    const std::vector<Token> depth =
        alone.draw_siblings(draft, alone_depths[d], children[d], depth_uniforms, LogitsAt::device);
    expected.insert(expected.end(), depth.begin(), depth.end());
  }
  CHECK(tokens == expected);
  CHECK(std::count(tokens.begin(), tokens.begin() + 4, Token{-1}) == 0);
  CHECK(std::count(tokens.begin() + 4, tokens.end(), Token{-1}) == 4);  // each second-depth row ran out
  for (const auto& depth : at)
    for (const auto& [row, sequence, node] : depth)
      for (int32_t x = 0; x < V; ++x) {
        const int64_t law = (sequence * (N + 1) + node) * V + x;
        CHECK(planned_laws[law] == alone_laws[law]);
      }
  // The laws moved towards the front, in order; refused out of order, onto one row, backwards, or past the rows.
  std::vector<float> node_2(planned_laws + 2 * V, planned_laws + 3 * V);
  planned.move_draft_laws(0, {{2, 1}});
  CHECK(std::equal(node_2.begin(), node_2.end(), planned_laws + V));
  CHECK_THROWS_WITH(planned.move_draft_laws(0, {{2, 1}, {1, 0}}), Catch::Contains("moves row 1 to row 0"));
  CHECK_THROWS_WITH(planned.move_draft_laws(0, {{1, 1}, {2, 1}}), Catch::Contains("moves row 2 to row 1"));
  CHECK_THROWS_WITH(planned.move_draft_laws(0, {{1, 2}}), Catch::Contains("moves row 1 to row 2"));
  CHECK_THROWS_WITH(planned.move_draft_laws(0, {{N + 1, 0}}), Catch::Contains("moves row 11 to row 0"));
  CHECK_THROWS_WITH(planned.move_draft_laws(B, {}), Catch::Contains("move_draft_laws for sequence 2"));
  // Refused: counts, rows or uniforms that do not fit the depths.
  planned.plan_siblings(draft, depths, children, uniforms);
  planned.launch_planned(0);
  planned.launch_planned(1);
  CHECK(planned.keep_planned_ids(B) != nullptr);  // at the full shape, with holes (test_fed_drafts.cpp)
  CHECK_THROWS_WITH(planned.plan_siblings(draft, depths, {2}, uniforms), Catch::Contains("1 sibling counts"));
  CHECK_THROWS_WITH(planned.plan_siblings(draft, depths, {3, 4}, uniforms),
                    Catch::Contains("depth 1 has 4 rows for the 6 children of the depth before"));
  CHECK_THROWS_WITH(planned.plan_siblings(draft, depths, children, {uniforms[0], std::vector<double>(9, 0.5)}),
                    Catch::Contains("9 uniforms for sequence 1, whose rows may draw 10"));
  CHECK_THROWS_WITH(planned.plan_siblings(draft, {depths[0], {depths[1][2], depths[1][3], depths[1][0], depths[1][1]}},
                                          children, uniforms),
                    Catch::Contains("depth 1 has sequence 1's rows in the place of sequence 0's"));
  CHECK_THROWS_WITH(planned.plan_siblings(draft, {depths[0], {depths[1][0], depths[1][2], depths[1][1], depths[1][3]}},
                                          children, uniforms),
                    Catch::Contains("plan_siblings was given sequence 0's rows apart"));
}

// A run's reservation (BatchVerifier::reserve, before its first step) holds its largest step at a vocabulary whose mask
// bitmaps exceed the per-row floor: draws growing from one row to the reserved rows, with masks and penalties, grow
// no buffer, so no step drains the stream; the same draws without the reservation grow buffers.
TEST_CASE("a reserved run's draws grow no buffer, masks and penalties included", "[verify][device]") {
  const int32_t V = 4096;  // 512 bytes a row of each bitmap, over the 64-byte floor
  SamplingParams params = sampled();
  params.repetition_penalty = 1.2f;
  params.frequency_penalty = 0.1f;
  params.banned_tokens = {7};
  params.logit_bias = {{5, 0.5f}};
  for (Token t = 0; t < V; t += 2) params.allowed_tokens.push_back(t);
  const SamplerPipeline pipeline(params, V);
  const TokenHistory history{{1, 2, 3}, {4}, std::nan("")};
  const int64_t sequences = 3, rows_per_sequence = 4;
  const auto growth = [&](bool reserve) {
    BatchVerifier device(Device::cuda_host, pipeline, std::nullopt);
    if (reserve) device.reserve(StepReservation{sequences, rows_per_sequence});
    for (int64_t rows : {int64_t{1}, int64_t{5}, sequences * rows_per_sequence}) {
      float* logits = device.device_logits(rows);
      std::vector<DeviceDraw> draws;
      for (int64_t r = 0; r < rows; ++r) {
        for (int32_t v = 0; v < V; ++v) logits[r * V + v] = static_cast<float>(philox_uniform(7, r, v));
        draws.push_back(DeviceDraw{logits + r * V, &history, RandomKey{11, 2, static_cast<uint64_t>(r)}});
      }
      CHECK(device.sample(draws, LogitsAt::device).size() == static_cast<size_t>(rows));
    }
    return device.growth_drains();
  };
  CHECK(growth(true) == 0);
  CHECK(growth(false) > 0);
}

// The reservation covers what a step stages from the host when its reservation says so: logits a model computed on
// the host (StepReservation::target_rows_from_host) and a host drafter's q rows (host_q). Verifications growing from
// one short chain to the reserved rows, every row of logits and q uploaded, grow no buffer; without either, one does.
TEST_CASE("a reserved run's verification from host logits and host q rows grows no buffer", "[verify][device]") {
  const SamplerPipeline pipeline(sampled(), kVocab);  // 148 bytes a row of logits or q, over the 64-byte floor
  const int64_t sequences = 3, rows_per_sequence = 4;
  const auto growth = [&](bool rows_from_host, bool host_q) {
    BatchVerifier device(Device::cuda_host, pipeline, VerifyMethod::chain);
    StepReservation r{sequences, rows_per_sequence};
    r.target_rows_from_host = rows_from_host;
    r.host_q = host_q;
    device.reserve(r);
    for (int64_t n : {int64_t{1}, int64_t{3}}) {  // sequences of n-draft chains
      std::vector<TokenTree> trees;
      std::vector<TokenHistory> histories;
      for (int64_t b = 0; b < n; ++b) {
        TokenTree t = TokenTree::chain(std::vector<Token>(static_cast<size_t>(n), static_cast<Token>(b + 1)));
        for (int32_t row = 0; row < t.size(); ++row) t.draft_q.push_back(random_law(10 * b + row));
        trees.push_back(t);
        histories.push_back(TokenHistory{{1, 2}, {}, std::nan("")});
      }
      std::vector<float> logits(static_cast<size_t>(n * (n + 1) * kVocab));
      for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(philox_uniform(5, n, i));
      std::vector<DeviceStep> steps;
      for (int64_t b = 0; b < n; ++b)
        steps.push_back(DeviceStep{logits.data() + b * (n + 1) * kVocab, &trees[b], &histories[b],
                                   StepRandom{9, static_cast<uint64_t>(b), 1}});
      CHECK(device.verify(steps, LogitsAt::host).size() == static_cast<size_t>(n));
    }
    return device.growth_drains();
  };
  CHECK(growth(true, true) == 0);
  CHECK(growth(false, true) > 0);
  CHECK(growth(true, false) > 0);
}

// A penalised draft's plan counts each row's pending ids (a path's ids drawn by the depths before it) on the device:
// a long chain's entries exceed the per-row floor. After a short plan, a plan of the reserved depth grows no buffer
// when reserved; without the reservation it does.
TEST_CASE("a reserved run's long penalised plans grow no buffer", "[verify][device]") {
  constexpr int64_t B = 2;
  constexpr int32_t V = kVocab, kLongest = 20;  // entries: B * 190 of 8 bytes, over the floor's B * 21 * 64 bytes
  const SamplerPipeline target(sampled(), V);
  const SamplingParams draft_params = sampled();  // a repetition penalty: pending ids are counted
  const SamplerPipeline draft(draft_params, V);
  const auto growth = [&](bool reserve) {
    BatchVerifier device(Device::cuda_host, target, VerifyMethod::chain);
    if (reserve) device.reserve(StepReservation{B, kLongest + 1, kLongest, &draft_params});
    for (int32_t depths : {2, kLongest}) {
      device.draft_laws(B, depths);
      float* rows = device.device_logits(B);
      for (int64_t i = 0; i < B * V; ++i) rows[i] = static_cast<float>(4.0 * philox_uniform(41, depths, i) - 2.0);
      // Depth d's row of sequence b: its path's d ids still on the device, at the plan's draws e * B + b.
      std::vector<TokenHistory> histories;
      for (int32_t d = 0; d < depths; ++d)
        for (int64_t b = 0; b < B; ++b) {
          TokenHistory h{{1, 2}, std::vector<Token>(static_cast<size_t>(d), 0), std::nan("")};
          for (int32_t e = 0; e < d; ++e) h.pending_ids.push_back(static_cast<int32_t>(e * B + b));
          histories.push_back(h);
        }
      std::vector<std::vector<DraftDraw>> plan(static_cast<size_t>(depths));
      for (int32_t d = 0; d < depths; ++d)
        for (int64_t b = 0; b < B; ++b)
          plan[d].push_back(DraftDraw{DeviceDraw{rows + b * V, &histories[d * B + b],
                                                 StepRandom{3, static_cast<uint64_t>(b), 1}.key(RandomRole::draft, d)},
                                      b, d});
      device.plan_drafts(draft, plan);
      for (int32_t d = 0; d < depths; ++d) device.launch_planned(static_cast<size_t>(d));
      CHECK(device.planned_tokens().size() == static_cast<size_t>(B * depths));
    }
    return device.growth_drains();
  };
  CHECK(growth(true) == 0);
  CHECK(growth(false) > 0);
}

// A draft model off the GPU whose draws are made on it uploads each depth's frontier rows (draw_drafts from the host,
// in its plans' staging): reserved (StepReservation::draft_rows_from_host), a depth widening from one row a sequence to
// the reserved rows grows no buffer; without it, one does.
TEST_CASE("a reserved run's draft draws from host rows grow no buffer", "[verify][device]") {
  constexpr int64_t B = 3;
  constexpr int32_t N = 3, V = kVocab;  // trees of 3 nodes: 4 rows a sequence
  const SamplerPipeline target(sampled(), V);
  const SamplingParams draft_params = sampled();
  const SamplerPipeline draft(draft_params, V);
  const TokenHistory history{{1, 2}, {}, std::nan("")};
  const auto growth = [&](bool reserve) {
    BatchVerifier device(Device::cuda_host, target, VerifyMethod::tree);
    StepReservation r{B, N + 1, N, &draft_params};
    r.draft_rows_from_host = reserve;
    device.reserve(r);
    device.draft_laws(B, N);
    for (int32_t width : {1, N}) {  // rows a sequence
      std::vector<float> rows(static_cast<size_t>(B * width * V));
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(4.0 * philox_uniform(43, width, i) - 2.0);
      std::vector<DraftDraw> draws;
      for (int64_t b = 0; b < B; ++b)
        for (int32_t k = 0; k < width; ++k)
          draws.push_back(DraftDraw{DeviceDraw{rows.data() + (b * width + k) * V, &history,
                                               StepRandom{3, static_cast<uint64_t>(b), 1}.key(RandomRole::draft, k)},
                                    b, k});
      CHECK(device.draw_drafts(draft, draws, LogitsAt::host).size() == draws.size());
    }
    return device.growth_drains();
  };
  CHECK(growth(true) == 0);
  CHECK(growth(false) > 0);
}
