// The drafter interface, modelled on llama.cpp's speculative lifecycle: begin(prompt), propose(...)
// -> a token tree (a chain is a tree) together with the exact law every candidate was drawn from (or
// "point mass" for deterministic drafters), accept(n) after verification.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"
#include "verify/verifiers/token_tree.h"
#include "verify/verifiers/verification.h"

namespace specula {

class LanguageModel;  // harness/models/language_model.h
class ModelSession;   // harness/models/language_model.h
class BatchVerifier;  // verify/device/batch_verifier.h

struct DraftRequest {
  const std::vector<Token>* context = nullptr;  // prompt + committed output
  const TokenHistory* history = nullptr;        // the same, as the draft pipeline sees it
  int32_t num_draft_tokens = 0;                 // chain length K (used when tree_shape is empty)
  std::vector<int32_t> tree_shape;              // branching per depth, e.g. {2, 2, 1}; empty = chain
  SiblingScheme scheme = SiblingScheme::iid;
  // A chain stops after a draft its law gave less than this (0: never; stops_after_doubt, candidate_sampling.h).
  float confidence_threshold = 0.0f;
  StepRandom rng;  // draws use RandomRole::draft
  // The verifier on the device (--device cuda | cuda-host) of a lockstep batch, null on the CPU: a drafter kind that
  // can draw there (a draft model's chains and trees, propose_batch) leaves its laws in the verifier's memory
  // (TokenTree::device_q) instead of bringing them to the host; ranked trees keep none.
  BatchVerifier* device = nullptr;
  // With `device`: the target reads a draft's ids where a fed proposal's draws left them, and so does verification,
  // so a drafter that draws fed may leave them there (TokenTree::device_tokens, BatchVerifier::keep_planned_ids):
  // the step then waits once, for verification, instead of once more for the draft's ids (a chain that may stop on the
  // draft's doubt waits once more, for its drafts' probabilities). Its sessions learn the ids from tokens_known.
  bool ids_may_stay_on_device = false;
};

struct DrafterCounters {
  int64_t n_drafts = 0;        // propose() calls
  int64_t n_draft_tokens = 0;  // candidate tokens proposed
  int64_t n_accepted = 0;      // candidates accepted by the verifier
  int64_t n_forward = 0;       // draft model forward passes
  double t_draft_us = 0.0;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // The generation loop's own target session, before begin(): a drafter that reads the target's features
  // (Medusa, EAGLE) may take them from its verification forwards instead of running the target itself.
  virtual void set_target_session(ModelSession* /*target*/) {}
  virtual void begin(const std::vector<Token>& /*prompt*/) {}
  virtual TokenTree propose(const DraftRequest& request) = 0;
  virtual void accept(int32_t n_accepted) { counters_.n_accepted += n_accepted; }
  // The last proposal's tree with its ids, when it left them on the device (TokenTree::device_tokens) and
  // verification brought them back: before the next proposal, so that the drafter's session keeps the accepted path's
  // nodes (one not told forgets them, and is right, only slower).
  virtual void tokens_known(const TokenTree& /*tree*/) {}
  const DrafterCounters& counters() const { return counters_; }

 protected:
  // Counts one proposal of `tree` that began at `start` (drafts, tokens, draft time) and returns the tree.
  TokenTree counted(TokenTree tree, std::chrono::steady_clock::time_point start) {
    ++counters_.n_drafts;
    counters_.n_draft_tokens += tree.size();
    counters_.t_draft_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    return tree;
  }

  DrafterCounters counters_;
};

// Builds one drafter per sequence being generated (drafters hold per-sequence state).
class DrafterFactory {
 public:
  virtual ~DrafterFactory() = default;
  virtual std::unique_ptr<Drafter> create() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::string description() const = 0;
  // The deepest draft this drafter can propose (Medusa: one level per head), 0 when any depth is possible. The
  // generator refuses a --tree or --num-draft-tokens deeper than it, instead of cutting the draft silently.
  virtual int32_t max_draft_depth() const { return 0; }
  // The model its drafts are drawn from, where one is (a draft model), for what a run reports of it (its step graphs:
  // LanguageModel::step_graph_tally); null otherwise.
  virtual const LanguageModel* draft_model() const { return nullptr; }
  // Proposals of several drafters this factory created (one per sequence of a lockstep batch, each at most once):
  // the trees each drafter's propose() would return, with its counters. A drafter kind that batches_proposals()
  // runs its model once per draft depth for all of them (LanguageModel::batch_tree_logits); the default proposes
  // one by one.
  virtual std::vector<TokenTree> propose_batch(const std::vector<Drafter*>& drafters,
                                               const std::vector<DraftRequest>& requests) const {
    std::vector<TokenTree> out;
    for (size_t i = 0; i < drafters.size(); ++i) out.push_back(drafters[i]->propose(requests[i]));
    return out;
  }
  virtual bool batches_proposals() const { return false; }
  // Whether propose_batch draws these requests on the device they carry (DraftRequest::device): the generator then
  // proposes for the whole batch in one call even when the model does not batch its forwards.
  virtual bool draws_on_device(const std::vector<DraftRequest>& /*requests*/) const { return false; }
  // The sampler settings of the draws this kind may make on the device (draws_on_device), so that a run sizes their
  // buffers before its first step (BatchVerifier::check_fits); nullopt for a kind that never draws there.
  virtual std::optional<SamplingParams> device_draw_params() const { return std::nullopt; }
  // Whether its rows' pipeline is penalised: the generator then keeps a sequence's penalty counts for them
  // (verify/sampling/penalty_counts.h), whether or not the target's pipeline is.
  virtual bool drafts_penalised() const { return false; }
  // Whether the draws it makes on a GPU whose verifier follows `verifier_stream` (the target's stream, or none) read
  // rows its model computed on the host (a draft model off the GPU, or on another stream), uploaded depth by depth
  // through a staging array that a run reserves before its first step (BatchVerifier::reserve).
  virtual bool device_draws_read_host_rows(std::optional<void*> /*verifier_stream*/) const { return false; }
  // Whether its drafts may carry q rows (sampled drafts, verified against their laws), which a run verifying on a
  // device with a method that reads q uploads at every step; false for a kind that proposes point masses alone.
  virtual bool records_draft_laws() const { return true; }
  // Whether its chains honour DraftRequest::confidence_threshold (drafters that draw from a law: a draft model, an
  // n-gram, the synthetic drafter); the generator refuses a threshold for a kind that would ignore it.
  virtual bool stops_on_confidence() const { return false; }
};

// What a drafter kind is built from (draft/registry/drafter_registry.cpp): the --draft spec split at its first
// ':', the draft's sampling parameters, and the target (the vocabulary of prompt lookup, the p of the synthetic
// drafter, the features of Medusa and EAGLE).
struct DrafterSpec {
  std::string spec;  // as written, for error messages
  std::string kind;  // before the first ':'
  std::string rest;  // after it ("" when there is none)
  SamplingParams draft_params;
  std::shared_ptr<const LanguageModel> target;
  SamplingParams target_params;
};

// Builds a drafter factory from its spec; throws Error naming spec.spec on bad input.
using DrafterMaker = std::shared_ptr<const DrafterFactory> (*)(const DrafterSpec& spec);
// Reads a spec of its kind without loading anything (only `spec`, `kind` and `rest` are set); throws Error naming it.
using DrafterSpecCheck = void (*)(const DrafterSpec& spec);

}  // namespace specula
