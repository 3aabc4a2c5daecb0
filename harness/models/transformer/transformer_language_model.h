// A transformer checkpoint as a specula::LanguageModel (`transformer:PATH`). Torch-free header (pimpl), so
// model_source.cpp and the commands can name it without compiling LibTorch.
//
// A session keeps one sequence's KV cache across calls (verify/ALGORITHMS.md §6). On tree_logits(context, tree):
//   1. keep the longest common prefix of the cached tokens and `context` (truncate the rest);
//   2. if the cached tokens are all kept and `context` continues them along a root-to-node path of the tree of
//      the previous call, compact that path's keys/values into place (they were rotated with their final
//      positions, so nothing is recomputed) — the accepted path of a verification step;
//   3. if `context` is entirely cached and the previous tree is a prefix of this one (a drafter growing its
//      tree one depth per call), keep the old nodes and run only the new ones;
//   4. run the rest of the context and the (new) tree nodes in ONE forward, with an ancestor-closure mask and
//      positions = context length + depth - 1.
// The logits of every row equal a plain forward over context + path(node) up to float rounding.
//
// Where it computes (the model registry's `device`): "cpu", Specula's decoding step (packed matrices, the few-row
// kernel; decode_step.h); "cuda" (or cuda:N), the model on the GPU in its stored dtype with the KV cache there,
// every forward LibTorch's (16-bit GEMMs), each call's hidden rows copied back to the host and its logits kept there
// (written device to device into the kernels' buffer, or copied to a host out);
// "libtorch", the same device-agnostic path on the CPU, so machines without a GPU test it.
// A fresh session's first call for a context alone (a prompt's prefill) is shared through the model: the last
// such prompt's keys, values and rows are kept (up to 64 MiB), and a later fresh session given the same prompt
// copies them instead of running it (bit for bit the same on the CPU's decoding step: the same computation; on
// LibTorch's path a prompt run alone is a static-shape step and one run in a batch is not, which may round apart).
// `--num-samples N` over one prompt, and the paired baseline beside a speculative run, prefill once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "harness/models/language_model.h"
#include "harness/models/tokenizer.h"

namespace specula {

struct TransformerModelState;  // the LibTorch module and checkpoint config (transformer_language_model.cpp)
struct LoadedCheckpoint;       // checkpoint.h
class Transformer;             // transformer_model.h (LibTorch)

class TransformerLanguageModel : public LanguageModel {
 public:
  // Loads the checkpoint folder; throws Error naming the file and problem.
  // weights_dtype: the matrices' dtype in memory, float32 | float16 | bfloat16 | auto (as stored).
  // device: where it computes (place_for_inference).
  explicit TransformerLanguageModel(const std::string& checkpoint_dir, const std::string& weights_dtype = "auto",
                                    const std::string& device = "cpu");
  // A model already in memory, e.g. a Hugging Face checkpoint converted by harness/models/hf: description()
  // calls it "<kind>:<dir>"; `tokenizer` may be null (tokenizer() then throws).
  TransformerLanguageModel(const std::string& kind, const std::string& dir, const LoadedCheckpoint& loaded,
                           std::shared_ptr<const Tokenizer> tokenizer);
  ~TransformerLanguageModel() override;

  int32_t vocab_size() const override;
  std::string description() const override;
  std::unique_ptr<ModelSession> new_session() const override;
  int64_t max_positions() const override { return max_seq_len(); }
  // The sessions' rows in one forward; each session then holds what its own tree_logits would leave. With step graphs
  // and at most 64 rows a call, one static-shape step over the sessions' caches pooled as one tensor's batch rows
  // (cache_pool.h; captured as a CUDA graph on a GPU from a shape's second run); otherwise (a prompt of more rows,
  // SPECULA_STEP_GRAPHS=off) every linear layer once over the batch's rows, each session attending to its own cache
  // (TransformerImpl::batch_hidden_states).
  void batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const override;
  bool batches_forwards() const override { return true; }
  // The KV cache at max_seq_len (float32, wherever the model computes), the hidden rows kept on the host, and with
  // step graphs a bound on what the session's graphs keep.
  int64_t session_bytes() const override;
  StepGraphTally step_graph_tally() const override;
  bool sessions_in_device_memory() const override;
  // A model on the GPU: rows [row 0 | nodes] go from the session's logits there to a GPU out device to device; the
  // hidden states still come to the host (the sessions' features, d floats a row). On a CUDA LibTorch the copies are
  // ordered on LibTorch's current stream (device_stream); otherwise batch_tree_logits synchronises before it returns.
  bool writes_gpu_logits() const override;
  std::optional<void*> device_stream() const override;
  // Pending tokens' ids are copied into the forward's inputs where they lie (RowSegment::fed), stream-ordered.
  bool reads_device_tokens() const override { return true; }

  const Tokenizer& tokenizer() const;
  const std::string& kind() const;  // "transformer" or "hf"
  const std::string& checkpoint_dir() const;
  int32_t max_seq_len() const;
  int64_t parameter_count() const;
  // Bytes the weights and buffers take in memory (16-bit matrices count 2 bytes an element).
  int64_t resident_weight_bytes() const;
  std::string matrices_dtype() const;  // "float32" | "float16" | "bfloat16"

  // Step graphs (step_graph.h): a session's lone call of at most 64 rows runs as a static-shape step over a bucket of
  // its cache's length, captured as a CUDA graph on a GPU (with a CUDA LibTorch) at the second call of that shape
  // (rows and bucket) and replayed at later ones; on the `libtorch` path the same step runs eagerly. On by default
  // off the CPU's decoding step unless the environment says SPECULA_STEP_GRAPHS=off; set_step_graphs(true) on a
  // model on the decoding step throws.
  void set_step_graphs(bool on);
  bool step_graphs() const;
  bool captures_step_graphs() const;

 private:
  friend Transformer transformer_module(const TransformerLanguageModel& model);
  std::shared_ptr<TransformerModelState> state_;
};

// SPECULA_STEP_GRAPHS: unset or "on", step graphs on LibTorch's path (a GPU, `libtorch`); "off", every step on the
// dynamic path (to see what the graphs gain). Anything else throws Error naming the variable and value; loaders ask
// before they read weights, on every device (the CPU's decoding step ignores a valid value).
bool step_graphs_wanted();

// `transformer:DIR` as the model registry loads it: the model, after a line on standard error with its parameter
// count, matrix dtype, resident bytes and device.
std::shared_ptr<const LanguageModel> load_transformer_language_model(const std::string& checkpoint_dir,
                                                                     const std::string& weights_dtype,
                                                                     const std::string& device);

// What a session did, for tests and benchmarks that must see the cache being reused.
struct TransformerSessionStats {
  int64_t calls = 0;
  int64_t rows_run = 0;               // token rows forwarded (context chunk + tree nodes)
  int64_t context_tokens_cached = 0;  // context tokens served from the cache instead of being run
  int64_t path_nodes_compacted = 0;   // tree nodes whose keys/values were moved into the linear prefix
  int64_t tree_nodes_reused = 0;      // nodes of a grown tree served from the previous call
  int64_t prompt_cache_hits = 0;      // first calls served from the model's prompt cache (another session's run)
  int64_t step_graph_calls = 0;       // calls run as a step graph (step_graph.h)
  int64_t step_graphs_built = 0;      // step graphs made (one per row count, again after the cache grew)
  int64_t step_graphs_dropped = 0;    // step graphs dropped because the cache grew (its storage moved)
  int64_t step_graphs_evicted = 0;    // step graphs dropped for room (a session keeps at most 8)
  int64_t pooled_step_calls = 0;      // calls run in one step with a batch's other calls (cache_pool.h)
  int64_t pools_joined = 0;           // times the KV cache moved into a new pool of a batch's caches
};

class TransformerSession : public ModelSession {
 public:
  explicit TransformerSession(std::shared_ptr<TransformerModelState> state);
  ~TransformerSession() override;
  void tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) override;
  const float* context_features(const std::vector<Token>& tokens, int64_t n) override;
  void tree_tokens_known(const TokenTree& tree, uint64_t round) override;
  int32_t feature_size() const override;
  const TransformerSessionStats& stats() const;

  // The final hidden states (after the final norm: the LM head's input, what Medusa heads and EAGLE read) of
  // the rows of the last tree_logits call: out [tree.size() + 1, hidden_size()], rows as in tree_logits.
  void last_hidden(float* out) const;
  int32_t hidden_size() const;

  struct Cache;  // the KV cache and what it holds (transformer_language_model.cpp)

 private:
  friend class TransformerLanguageModel;  // batch_tree_logits runs several sessions' calls together
  std::unique_ptr<Cache> cache_;
};

}  // namespace specula
