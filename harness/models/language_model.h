// A language model as the generation loop sees it: logits for the position after a context and after
// every node of a draft tree, in one call (one "target forward"). Weights are shared by all sessions; a
// session holds one sequence's state (e.g. a KV cache it reuses across calls whose contexts share a
// prefix), so sequences can be generated in parallel, one session each.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "verify/verifiers/token_tree.h"

namespace specula {

// A tree node's token that its tree_logits call reads where a draft's draws left it (TreeLogitsCall::device_tokens),
// not from the host.
constexpr Token kPendingToken = -1;

class ModelSession {
 public:
  virtual ~ModelSession() = default;
  // out [tree.size() + 1, V]: row 0 = logits after `context`; row j + 1 = after context + path(node j).
  virtual void tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) = 0;
  // Logits after `context` only.
  void next_logits(const std::vector<Token>& context, float* out) { tree_logits(context, TokenTree{}, out); }

  // The model's final hidden states (the LM head's input) after each of the positions [0, n) of `tokens`,
  // row-major [n, feature_size()], when this session has already computed them all, e.g. the committed
  // context after a verification call, whose accepted path it may move into place (as its next call would);
  // null otherwise. Valid until the next call. Draft heads (Medusa, EAGLE) read them instead of running the
  // target again.
  virtual const float* context_features(const std::vector<Token>& /*tokens*/, int64_t /*n*/) { return nullptr; }
  // After calls of round `round` whose trees had pending tokens (TreeLogitsCall::device_tokens): the last call's tree,
  // a tree grown from it, or its first nodes (a chain cut to its own K), with them known, so that the session can
  // follow the accepted path next (its remembered nodes' keys and values kept; nodes past a cut stay pending, and no
  // context follows them). A session not told, or told of another round or tree, forgets those nodes.
  virtual void tree_tokens_known(const TokenTree& /*tree*/, uint64_t /*round*/) {}
  virtual int32_t feature_size() const { return 0; }
};

// One ModelSession::tree_logits call, for LanguageModel::batch_tree_logits.
struct TreeLogitsCall {
  ModelSession* session = nullptr;
  const std::vector<Token>* context = nullptr;
  const TokenTree* tree = nullptr;
  float* out = nullptr;  // [tree->size() + 1 - first_row, V]
  // `out` is GPU memory (given only to a model that writes_gpu_logits()); otherwise host memory.
  bool out_on_gpu = false;
  // `out` gets rows [first_row, tree->size() + 1) of the call, in [0, tree->size()]: a drafter that reads only the
  // rows of the nodes its last depth added asks for those (on a GPU, a copy of a few rows a depth, not of the whole
  // tree so far).
  int64_t first_row = 0;
  int64_t rows() const { return tree->size() + 1 - first_row; }
  // For a model that reads_device_tokens(): nodes [device_tokens_from, tree->size()) take their ids from
  // device_tokens[0, ..) (int32: GPU memory for a model on the GPU, else host memory), written by work the model's
  // stream is ordered behind (a draft's draws, BatchVerifier::launch_planned), so the host never waits for them; their
  // tree->tokens are kPendingToken. Nodes before device_tokens_from may be pending too when the session's last call,
  // of the same `pending_round` (a proposal's number, not 0), computed them. An id of -1 (a draw that failed, or a node
  // of a fixed-shape proposal that was never drawn) is read as token 0, and tree_tokens_known is then told 0 for it.
  // Null: every token is on the host.
  const int32_t* device_tokens = nullptr;
  int64_t device_tokens_from = 0;
  uint64_t pending_round = 0;
};

// Throws, naming `model`, unless the call's first_row is one of its rows.
void check_rows_asked(const TreeLogitsCall& call, const std::string& model);

// Ids that came back from the device with -1 where a node was never drawn (siblings without replacement drawn at a full
// shape: BatchVerifier::planned_tokens, or a hole of BatchVerifier::keep_planned_ids), as the forwards that read them
// saw them: -1 read as token 0. What tree_tokens_known is told.
std::vector<Token> with_placeholders(std::vector<Token> ids);
TokenTree with_placeholders(TokenTree tree);

// What a model's step graphs did since it was made (LanguageModel::step_graph_tally): the static-shape steps run, of
// those replayed from a captured CUDA graph, the graphs built (each shape once, again after an eviction or a cache that
// grew), and those evicted to make room. On a GPU every shape's first run is eager (its warm-up) and the later ones
// replay, so runs far above replays, or evictions, mean shapes that keep changing.
struct StepGraphTally {
  int64_t runs = 0, replays = 0, built = 0, evicted = 0;
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual int32_t vocab_size() const = 0;
  virtual std::string description() const = 0;
  virtual std::unique_ptr<ModelSession> new_session() const = 0;
  // The most positions a session can hold (context + draft tree depth); 0 = unbounded (table models).
  virtual int64_t max_positions() const { return 0; }

  // Several sessions' calls (sessions of this model, each at most once) with the rows of calling each session's
  // tree_logits in turn (the same bits on the CPU; a GPU's GEMMs may sum a batch in another order; a session's
  // counters may differ, e.g. fresh sessions given one prompt in one batch each run it). A model that
  // batches_forwards() runs them in one forward over its weights (batched lockstep decoding: the weights are read
  // once per step for the whole batch); the default calls them one by one (host outs only).
  virtual void batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const;
  virtual bool batches_forwards() const { return false; }
  // Bytes one session may hold at most (a KV cache and its rows; 0: negligible), so that a batch of sessions alive
  // together (lockstep decoding) is bounded before it starts.
  virtual int64_t session_bytes() const { return 0; }
  // Its step graphs' counts so far (zero for a model without them).
  virtual StepGraphTally step_graph_tally() const { return {}; }
  // Whether those bytes are the GPU's (a model on a CUDA device): then the bound is the device's free memory,
  // not the host's.
  virtual bool sessions_in_device_memory() const { return false; }

  // Whether batch_tree_logits may be given outs in GPU memory (a model computing on the GPU), so that a step's
  // logits go straight into the kernels' buffer (BatchVerifier::device_logits) and never through the host.
  virtual bool writes_gpu_logits() const { return false; }
  // For outs in GPU memory: the CUDA stream (a cudaStream_t; null is the legacy default stream) the model's writes
  // are ordered on when batch_tree_logits returns, for the kernels to follow on it; nullopt when the writes are
  // complete on return (the model synchronised).
  virtual std::optional<void*> device_stream() const { return std::nullopt; }
  // Whether batch_tree_logits reads pending tokens where they lie (TreeLogitsCall::device_tokens).
  virtual bool reads_device_tokens() const { return false; }
  // Whether it reads them in GPU memory (`in_gpu_memory`: a verifier's on a GPU, which only a model computing there
  // reads) or in host memory (a verifier's under cuda-host, which only a model on the host reads).
  bool reads_device_tokens_in(bool in_gpu_memory) const {
    return reads_device_tokens() && writes_gpu_logits() == in_gpu_memory;
  }
};

}  // namespace specula
