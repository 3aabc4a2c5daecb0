#include "harness/models/transformer/transformer_language_model.h"

#include <torch/torch.h>
#ifdef SPECULA_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/models/transformer/byte_tokenizer.h"
#include "harness/models/transformer/cache_pool.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/memory_budget.h"
#include "harness/models/transformer/step_graph.h"
#include "harness/models/transformer/transformer_model.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"

namespace specula {

// What a fresh session's first call computed for a prompt: the keys and values of its slots, the final hidden
// states of its positions, the features after its last token. Immutable once stored.
struct PromptCacheEntry {
  std::vector<Token> tokens;
  torch::Tensor keys, values;  // [layers, 1, heads, n, head_dim]
  torch::Tensor hidden;        // [n, d]
  torch::Tensor last_hidden;   // [d]
  torch::Tensor last_logits;   // [V], where the model computes
};

// The prompt cache holds at most this many bytes (one entry: keys, values, hidden rows and the last row): a longer
// prompt is run by every session, as without the cache.
constexpr int64_t kPromptCacheBytes = int64_t{64} << 20;

// Step graphs (step_graph.h): a lone call of at most this many rows (a decode step, a chain, a tree of up to 63 nodes)
// runs as one, and so do a batch's calls of at most this many rows each (cache_pool.h); a session keeps at most
// StepGraphSet::kMaxGraphs shapes (rows and a bucket of its length: a run's steps take a few).
constexpr int64_t kMaxStepGraphRows = 64;

// The slots of a row of a batch's cache pool (cache_pool.h): the positions, and a pooled step's rows on top of the
// tree nodes a call may keep from the last (both at most kMaxStepGraphRows), so a pooled session never grows out.
int64_t pool_row_slots(const TransformerConfig& c) { return int64_t{c.max_seq_len} + 2 * kMaxStepGraphRows; }

struct TransformerModelState {
  std::string kind = "transformer";  // the model spec's kind: "transformer" or "hf"
  std::string dir;
  Transformer model{nullptr};
  CheckpointConfig config;
  std::shared_ptr<const Tokenizer> tokenizer;
  // The last prompt a fresh session ran alone. The next fresh session given the same prompt copies it instead
  // of running it again (--num-samples N over one prompt; a paired baseline and speculative run of one prompt).
  // Only a first call with no tree (the context alone, run in one forward) is stored or served, so a copy is
  // the result of the very computation a miss would run: its bits equal a recomputation's.
  std::mutex prompt_mutex;
  std::shared_ptr<const PromptCacheEntry> prompt;
  // Lone calls of a few rows run as static-shape steps (step_graph.h), captured as CUDA graphs where possible.
  bool step_graphs = false;
  bool capture_graphs = false;
  // Every step graph's runs, replays, builds and evictions, over the sessions' sets and the batches' pools.
  mutable StepGraphCounters graph_counters;
};

namespace {

// The model made ready to compute on `device` (see the header): packed for the decoding step, moved to the GPU, or
// left to LibTorch's operations on the CPU.
void place_for_inference(Transformer& model, const std::string& device) {
  if (device == "cpu") {
    pack_matrices_for_decoding(*model);
    return;
  }
  place_for_libtorch_operations(model, device == "libtorch" ? torch::Device(torch::kCPU) : torch_device_named(device));
}

}  // namespace

bool step_graphs_wanted() {
  const char* value = std::getenv("SPECULA_STEP_GRAPHS");
  if (!value || std::string(value) == "on") return true;
  if (std::string(value) == "off") return false;
  fail("SPECULA_STEP_GRAPHS must be on or off, got '", value, "'");
}

TransformerLanguageModel::TransformerLanguageModel(const std::string& checkpoint_dir, const std::string& weights_dtype,
                                                   const std::string& device)
    : state_(std::make_shared<TransformerModelState>()) {
  if (device != "cpu" && device != "libtorch") torch_device_named(device);  // refused before the weights are read
  const bool wanted = step_graphs_wanted();  // a bad value refused on any device, as a typo should be
  const bool graphs = device != "cpu" && wanted;
  LoadedCheckpoint loaded = load_checkpoint(checkpoint_dir, weights_dtype);
  place_for_inference(loaded.model, device);
  state_->dir = checkpoint_dir;
  state_->model = loaded.model;
  state_->config = loaded.config;
  state_->tokenizer = with_source(checkpoint_dir, [&] { return make_tokenizer(loaded.config.tokenizer); });
  set_step_graphs(graphs);
}

void TransformerLanguageModel::set_step_graphs(bool on) {
  if (on && state_->model->decode_step())
    fail(description(), ": step graphs run LibTorch's operations; the model is on the CPU's decoding step");
  state_->step_graphs = on;
  state_->capture_graphs = on && step_graphs_capture(state_->model->embedding->weight.device());
}

bool TransformerLanguageModel::step_graphs() const { return state_->step_graphs; }
bool TransformerLanguageModel::captures_step_graphs() const { return state_->capture_graphs; }

TransformerLanguageModel::TransformerLanguageModel(const std::string& kind, const std::string& dir,
                                                   const LoadedCheckpoint& loaded,
                                                   std::shared_ptr<const Tokenizer> tokenizer)
    : state_(std::make_shared<TransformerModelState>()) {
  state_->kind = kind;
  state_->dir = dir;
  state_->model = loaded.model;
  state_->config = loaded.config;
  state_->tokenizer = std::move(tokenizer);
  if (loaded.model->embedding->weight.is_cpu()) {
    pack_matrices_for_decoding(*state_->model);
  } else {  // on a GPU: LibTorch's operations, as transformer: models there
    place_for_libtorch_operations(state_->model, state_->model->embedding->weight.device());
    set_step_graphs(step_graphs_wanted());
  }
}

TransformerLanguageModel::~TransformerLanguageModel() = default;

int32_t TransformerLanguageModel::vocab_size() const { return state_->config.model.vocab_size; }
int32_t TransformerLanguageModel::max_seq_len() const { return state_->config.model.max_seq_len; }
int64_t TransformerLanguageModel::parameter_count() const { return state_->config.model.parameter_count(); }
StepGraphTally TransformerLanguageModel::step_graph_tally() const {
  const StepGraphCounters& c = state_->graph_counters;
  return StepGraphTally{c.runs.load(), c.replays.load(), c.built.load(), c.evicted.load()};
}

int64_t TransformerLanguageModel::session_bytes() const {
  const TransformerConfig& c = state_->model->config();
  // The KV cache, the linear prefix's hidden states, and their host copy (context_features).
  int64_t bytes = plan_model_memory(c).kv_cache_bytes + 2 * int64_t{c.max_seq_len} * c.d_model * 4;
  if (state_->step_graphs) {
    // Each step graph keeps its inputs, outputs and (captured) the memory of its intermediates: at most one layer's
    // live at a time, per row two copies of the attention's scores over the columns (scaled, masked), the residual
    // stream, q/k/v, the MLP's, the logits and the mask. Bounded at the widest shape, 64 rows over twice max_seq_len
    // columns (a tree can double the cache's slots), plus the 20 MiB segment a graph's memory pool may round up to.
    const int64_t columns = 2 * int64_t{c.max_seq_len};
    const int64_t per_row = 2 * int64_t{c.n_heads} * columns + 4 * int64_t{c.d_model} + 3 * int64_t{c.d_ff} +
                            2 * int64_t{c.vocab_size} + 10 * columns;  // the mask, and step_mask's intermediates
    // A session's own graphs, and its share of its batch's pooled ones (cache_pool.h: as many shapes, as many rows
    // a sequence). Upper bounds: a pool's 8 graphs serve all its sequences, yet each is charged 8 segments.
    bytes +=
        2 * static_cast<int64_t>(StepGraphSet::kMaxGraphs) * (kMaxStepGraphRows * per_row * 4 + (int64_t{20} << 20));
    // The session's pool row (its slots and the scratch slot, keys and values, float32), made while its own cache
    // still exists, and the same again for the old pool it stays beside while a batch moves to a smaller one.
    bytes += 2 * 2 * 4 * int64_t{c.n_layers} * c.kv_heads() * c.head_dim() * (pool_row_slots(c) + 1);
  }
  return bytes;
}
bool TransformerLanguageModel::sessions_in_device_memory() const {
  return state_->model->embedding->weight.is_cuda();  // a session's cache lives where the weights do
}
int64_t TransformerLanguageModel::resident_weight_bytes() const { return resident_bytes(*state_->model); }
std::string TransformerLanguageModel::matrices_dtype() const {
  return dtype_string(state_->model->embedding->weight.scalar_type());
}
const Tokenizer& TransformerLanguageModel::tokenizer() const {
  if (!state_->tokenizer) fail(state_->kind, ":", state_->dir, ": the model has no tokenizer");
  return *state_->tokenizer;
}

const std::string& TransformerLanguageModel::kind() const { return state_->kind; }
const std::string& TransformerLanguageModel::checkpoint_dir() const { return state_->dir; }
Transformer transformer_module(const TransformerLanguageModel& model) { return model.state_->model; }

std::string TransformerLanguageModel::description() const {
  std::ostringstream os;
  os << state_->kind << ":" << state_->dir << " (" << state_->config.model.describe();
  const auto& t = state_->config.training;
  if (t.is_object() && t.contains("val_loss") && t["val_loss"].is_number())
    os << ", val loss " << t["val_loss"].get<double>();
  os << ")";
  return os.str();
}

std::shared_ptr<const LanguageModel> load_transformer_language_model(const std::string& checkpoint_dir,
                                                                     const std::string& weights_dtype,
                                                                     const std::string& device) {
  auto model = std::make_shared<TransformerLanguageModel>(checkpoint_dir, weights_dtype, device);
  std::cerr << "transformer:" << checkpoint_dir << ": " << model->parameter_count() << " parameters, "
            << model->matrices_dtype() << " matrices, resident " << format_bytes(model->resident_weight_bytes())
            << (device == "cpu" ? std::string() : ", on " + device)
            << (model->captures_step_graphs() ? ", CUDA graphs"
                : model->step_graphs()        ? ", static-shape steps"
                                              : "")
            << "\n";
  return model;
}

std::unique_ptr<ModelSession> TransformerLanguageModel::new_session() const {
  return std::make_unique<TransformerSession>(state_);
}

// Slots [0, linear.size()) of the KV cache hold `linear`; slots linear.size() + j hold node j of `tree`.
struct TransformerSession::Cache {
  explicit Cache(std::shared_ptr<TransformerModelState> s)
      : state(std::move(s)), kv(state->model->new_cache(1)), graphs(&state->graph_counters) {}
  ~Cache() {
    if (pool) pool->release(kv);
  }

  std::shared_ptr<TransformerModelState> state;
  KVCache kv;
  // The pool whose row keeps kv's slots, once a batched call moved them there (cache_pool.h); shared by the sessions
  // of the batch.
  std::shared_ptr<CachePool> pool;
  std::vector<Token> linear;
  // What the model gives after a position: the final hidden state and the logits, both kept where the model
  // computes (on a GPU the logits go from there to the kernels' buffer, device to device, or to the host; hidden
  // states come to the host only when read: last_hidden, context_features).
  torch::Tensor last_hidden;  // [d] after `linear`; undefined when unknown
  torch::Tensor last_logits;  // [V] after `linear`; undefined when unknown
  std::vector<Token> tree_tokens;
  std::vector<int32_t> tree_parents;
  // The round (TreeLogitsCall::pending_round) of the call that left kPendingToken among tree_tokens; 0: none pending.
  uint64_t pending_round = 0;
  torch::Tensor tree_hidden;  // [n, d] after each node of the remembered tree
  torch::Tensor tree_logits;  // [n, V]
  TransformerSessionStats stats;
  int64_t last_call_rows = 0;  // 1 + nodes of the last call (0 before the first)
  StepGraphSet graphs;         // over `kv` (step_graph.h)

  // The step graph for `rows` rows after `kv`'s length (over its length's bucket, step_columns), built on first use
  // (again when kv's storage moved), the least recently used one dropped to make room.
  StepGraph* graph_for(int64_t rows) {
    StepGraph& graph =
        graphs.get(state->model, kv, rows, step_columns(kv.length(), rows, kv.capacity()), state->capture_graphs);
    stats.step_graphs_built = graphs.built();
    stats.step_graphs_evicted = graphs.evicted();
    stats.step_graphs_dropped = graphs.dropped();
    return &graph;
  }

  void forget_tree() {
    if (!mutant_on(Mutant::kv_cache_keeps_rejected_drafts)) kv.truncate(static_cast<int64_t>(linear.size()));
    tree_tokens.clear();
    tree_parents.clear();
    pending_round = 0;
    tree_hidden = torch::Tensor();
    tree_logits = torch::Tensor();
  }
  void truncate_linear(size_t n) {
    linear.resize(n);
    last_hidden = torch::Tensor();
    last_logits = torch::Tensor();
    forget_tree();
  }
  // The remembered tree's rows when it has none: [0, d] and [0, V] where the model computes.
  void empty_tree_rows() {
    const TransformerConfig& cfg = state->model->config();
    tree_hidden = torch::empty({0, int64_t{cfg.d_model}}, state->model->embedding->weight.device());
    tree_logits = torch::empty({0, int64_t{cfg.vocab_size}}, state->model->embedding->weight.device());
  }

  // Final hidden states of the linear slots, [max_seq_len, d], where the model computes: rows [0, linear.size()) are
  // valid (for draft heads that read the target's features, see context_features). Their readers get a host copy of
  // rows [0, mirrored), brought up to date when read: on a GPU, a step nobody reads them after (a draft model's, an
  // n-gram's) waits for no download between its forward and the kernels that follow it. The CPU keeps the same copy,
  // so that CI runs what a GPU runs.
  torch::Tensor linear_hidden;
  torch::Tensor linear_hidden_host;
  int64_t mirrored = 0;
  // Room for `rows` linear slots (grown like the KV cache when a tree needs more slots than positions).
  void reserve_linear_hidden(int64_t rows) {
    const int64_t have = linear_hidden.defined() ? linear_hidden.size(0) : 0;
    if (rows <= have) return;
    const auto& cfg = state->model->config();
    torch::Tensor grown = torch::empty({std::max({rows, 2 * have, int64_t{cfg.max_seq_len}}), int64_t{cfg.d_model}},
                                       state->model->embedding->weight.device());
    if (have > 0) grown.narrow(0, 0, have).copy_(linear_hidden);
    linear_hidden = grown;
  }
  // Rows [from, ..) of linear_hidden were written: the host copy is current below `from` only.
  void wrote_linear_hidden(int64_t from) { mirrored = std::min(mirrored, from); }
  // Rows [0, n) of linear_hidden on the host (n <= linear.size()).
  const float* host_linear_hidden(int64_t n) {
    if (!linear_hidden_host.defined() || linear_hidden_host.size(0) < linear_hidden.size(0)) {
      torch::Tensor grown = torch::empty(linear_hidden.sizes());
      if (mirrored > 0) grown.narrow(0, 0, mirrored).copy_(linear_hidden_host.narrow(0, 0, mirrored));
      linear_hidden_host = grown;
    }
    if (mirrored < n) {
      linear_hidden_host.narrow(0, mirrored, n - mirrored).copy_(linear_hidden.narrow(0, mirrored, n - mirrored));
      mirrored = n;
    }
    return linear_hidden_host.data_ptr<float>();
  }

  // When the cached tokens are all in `context` and context[linear.size(), upto) continues along a root-to-node
  // path of the remembered tree, makes that path part of the linear prefix: its keys/values are moved into
  // place (they were rotated with their final positions), its features and the last node's row kept.
  // Duplicate siblings have identical keys, so the first match is taken.
  void follow_tree_path(const std::vector<Token>& context, size_t upto) {
    if (tree_tokens.empty() || upto <= linear.size()) return;
    const int64_t L = static_cast<int64_t>(linear.size());
    std::vector<int32_t> path;
    int32_t parent = -1;
    while (L + static_cast<int64_t>(path.size()) < static_cast<int64_t>(upto)) {
      const Token want = context[L + path.size()];
      int32_t next = -1;
      for (int32_t j = parent + 1; j < static_cast<int32_t>(tree_tokens.size()); ++j)
        if (tree_parents[j] == parent && tree_tokens[j] == want) {
          next = j;
          break;
        }
      if (next < 0) break;
      path.push_back(next);
      parent = next;
    }
    if (path.empty()) return;
    std::vector<int64_t> keep(static_cast<size_t>(L) + path.size());
    for (int64_t s = 0; s < L; ++s) keep[s] = s;
    for (size_t i = 0; i < path.size(); ++i) {
      keep[L + i] = L + path[i];
      linear.push_back(tree_tokens[path[i]]);
    }
    kv.compact(keep);
    reserve_linear_hidden(L + static_cast<int64_t>(path.size()));
    // Where the model computes (on a GPU device to device, stream-ordered: no wait).
    for (size_t i = 0; i < path.size(); ++i) linear_hidden[L + static_cast<int64_t>(i)].copy_(tree_hidden[path[i]]);
    wrote_linear_hidden(L);
    last_hidden = tree_hidden[path.back()];
    last_logits = tree_logits[path.back()];
    stats.path_nodes_compacted += static_cast<int64_t>(path.size());
    tree_tokens.clear();
    tree_parents.clear();
    pending_round = 0;
    tree_hidden = torch::Tensor();
    tree_logits = torch::Tensor();
  }

  // A fresh session's first call for `context` alone: serves it from the model's prompt cache when that holds
  // the same tokens (true), else leaves the session untouched (false).
  bool load_prompt(const std::vector<Token>& context) {
    std::shared_ptr<const PromptCacheEntry> entry;
    {
      std::lock_guard<std::mutex> lock(state->prompt_mutex);
      entry = state->prompt;
    }
    if (!entry || entry->tokens != context) return false;
    const int64_t n = static_cast<int64_t>(context.size());
    kv.load_prefix(entry->keys, entry->values);
    reserve_linear_hidden(n);
    linear_hidden.narrow(0, 0, n).copy_(entry->hidden);
    wrote_linear_hidden(0);
    linear = context;
    last_hidden = entry->last_hidden;
    last_logits = entry->last_logits;
    tree_tokens.clear();
    tree_parents.clear();
    pending_round = 0;
    empty_tree_rows();
    last_call_rows = 1;
    ++stats.prompt_cache_hits;
    return true;
  }
  // After a fresh session ran `linear` alone: remembers it for the next session (within kPromptCacheBytes).
  void store_prompt() {
    const int64_t n = static_cast<int64_t>(linear.size());
    const int64_t row_bytes =
        static_cast<int64_t>(sizeof(float)) * ((n + 1) * linear_hidden.size(1) + last_logits.numel());
    if (kv.prefix_bytes(n) + row_bytes > kPromptCacheBytes) return;
    {
      // Sessions that missed together all ran the same prompt: the first to store it is enough.
      std::lock_guard<std::mutex> lock(state->prompt_mutex);
      if (state->prompt && state->prompt->tokens == linear) return;
    }
    auto entry = std::make_shared<PromptCacheEntry>();
    entry->tokens = linear;
    std::tie(entry->keys, entry->values) = kv.copy_prefix(n);
    entry->hidden = linear_hidden.narrow(0, 0, n).clone();
    entry->last_hidden = last_hidden.clone();
    entry->last_logits = last_logits.clone();
    std::lock_guard<std::mutex> lock(state->prompt_mutex);
    state->prompt = std::move(entry);
  }
};

namespace {

// Rows [first_row, last_call_rows) of the last call, of width `width`: `row0` (row 0) and then `nodes` (the remembered
// tree's nodes), into `out`: host memory, or the GPU's (`out_on_gpu`). Rows on the host go by memcpy (no LibTorch call,
// the CPU's decoding step); rows on a GPU by one LibTorch copy each of row 0 and the nodes, on its current stream.
void copy_rows(const TransformerSession::Cache& c, const torch::Tensor& row0, const torch::Tensor& nodes, float* out,
               bool out_on_gpu, int64_t first_row = 0) {
  if (c.last_call_rows == 0) fail("transformer session: no call yet");
  if (first_row < 0 || first_row >= c.last_call_rows)
    fail(c.state->dir, ": rows asked from ", first_row, " of a call of ", c.last_call_rows, " rows");
  const int64_t width = row0.size(0), node_rows = c.last_call_rows - 1;
  // The nodes copied: [first_node, node_rows), after row 0 when it is asked for.
  const int64_t first_node = std::max<int64_t>(first_row - 1, 0), copied_nodes = node_rows - first_node;
  const bool with_row0 = first_row == 0;
  float* const nodes_out = out + (with_row0 ? width : 0);
  if (out_on_gpu && !row0.is_cuda())
    fail(c.state->dir, ": logits asked in GPU memory from a model that computes on the ", row0.device().str());
  if (row0.is_cpu()) {
    if (with_row0) std::memcpy(out, row0.data_ptr<float>(), sizeof(float) * width);
    if (copied_nodes > 0)
      std::memcpy(nodes_out, nodes.data_ptr<float>() + first_node * width, sizeof(float) * width * copied_nodes);
    return;
  }
  const torch::Tensor to =
      torch::from_blob(out, {c.last_call_rows - first_row, width},
                       torch::dtype(torch::kFloat32).device(out_on_gpu ? row0.device() : torch::kCPU));
  if (copied_nodes == 0) {
    to[0].copy_(row0);
  } else if (!with_row0) {
    to.copy_(nodes.narrow(0, first_node, copied_nodes));
  } else if (out_on_gpu) {
    to[0].copy_(row0);
    to.narrow(0, 1, copied_nodes).copy_(nodes.narrow(0, 0, copied_nodes));
  } else {  // to the host: one copy
    to.copy_(torch::cat({row0.unsqueeze(0), nodes.narrow(0, 0, copied_nodes)}));
  }
}

void copy_logits(const TransformerSession::Cache& c, float* out, bool out_on_gpu, int64_t first_row) {
  copy_rows(c, c.last_logits, c.tree_logits, out, out_on_gpu, first_row);
}

}  // namespace

TransformerSession::TransformerSession(std::shared_ptr<TransformerModelState> state)
    : cache_(std::make_unique<Cache>(std::move(state))) {}
TransformerSession::~TransformerSession() = default;

const TransformerSessionStats& TransformerSession::stats() const { return cache_->stats; }

namespace {

// A call's tokens are in the vocabulary, its tree well formed, and context + tree depth within the positions.
void check_call(const TransformerModelState& state, const std::vector<Token>& context, const TokenTree& tree,
                bool pending_allowed) {
  const TransformerConfig& config = state.model->config();
  const int32_t V = config.vocab_size;
  const int64_t n_nodes = tree.size();
  if (context.empty()) fail(state.dir, ": a transformer needs at least one context token (give a prompt)");
  for (Token t : context)
    if (t < 0 || t >= V) fail(state.dir, ": context token id ", t, " is outside the vocabulary [0, ", V, ")");
  for (Token t : tree.tokens)
    if ((t < 0 || t >= V) && !(pending_allowed && t == kPendingToken))
      fail(state.dir, ": tree token id ", t, " is outside the vocabulary [0, ", V, ")");
  if (static_cast<int64_t>(tree.parent.size()) != n_nodes)
    fail("token tree: ", n_nodes, " tokens but ", tree.parent.size(), " parents");
  const int64_t positions_needed = static_cast<int64_t>(context.size()) + (n_nodes ? tree.max_depth() : 0);
  if (positions_needed > config.max_seq_len)
    fail(state.dir, ": context of ", context.size(), " tokens + tree depth ", (n_nodes ? tree.max_depth() : 0),
         " exceeds the model's max_seq_len ", config.max_seq_len);
}

}  // namespace

namespace {

// One tree_logits call between its preparation (steps 1-3 of the header's comment) and its forward (step 4), so that
// the calls of several sessions share one forward.
struct PendingCall {
  TransformerSession::Cache* cache = nullptr;
  const std::vector<Token>* context = nullptr;
  const TokenTree* tree = nullptr;
  float* out = nullptr;
  bool out_on_gpu = false;
  int64_t first_row = 0;  // TreeLogitsCall::first_row
  // TreeLogitsCall::device_tokens, device_tokens_from and pending_round
  const int32_t* device_tokens = nullptr;
  int64_t device_tokens_from = 0;
  uint64_t pending_round = 0;
  bool served = false;        // answered from the prompt cache: nothing to run
  bool prompt_alone = false;  // a fresh session's first call for the context alone
  bool all_visible = false;   // its rows see every column (segment: no mask, no window)
  int64_t linear_before = 0, chunk = 0, reused_nodes = 0, rows = 0;
  RowSegment segment;  // the rows to run (rows > 0)
  // After the forward, the rows anyone reads (chunk ? 1 + new nodes : new nodes): hidden states on the host,
  // logits where the model computes.
  torch::Tensor new_hidden, new_logits;
};

// Steps 1-3: reuses what the session's cache holds, and leaves in `call` the rows its forward must run.
void prepare_call(PendingCall& call) {
  TransformerSession::Cache& c = *call.cache;
  const std::vector<Token>& context = *call.context;
  const TokenTree& tree = *call.tree;
  const int64_t n_nodes = tree.size();
  ++c.stats.calls;

  // 1. Keep the longest common prefix of the cached tokens and the context.
  const size_t common = static_cast<size_t>(
      std::mismatch(c.linear.begin(), c.linear.begin() + std::min(c.linear.size(), context.size()), context.begin())
          .first -
      c.linear.begin());
  if (common < c.linear.size()) c.truncate_linear(common);

  // 2. The context continues along a root-to-node path of the remembered tree: move that path's keys/values
  //    into place (verify/ALGORITHMS.md §6 step 5).
  c.follow_tree_path(context, context.size());

  // 3. With the whole context cached, keep the remembered tree if it is a prefix of this one.
  int64_t reused_nodes = 0;
  if (context.size() == c.linear.size() && c.last_logits.defined()) {
    const size_t n_old = c.tree_tokens.size();
    // Pending tokens match only within the round that left them (the same proposal's nodes).
    const bool prefix = n_old <= static_cast<size_t>(n_nodes) &&
                        std::equal(c.tree_tokens.begin(), c.tree_tokens.end(), tree.tokens.begin()) &&
                        std::equal(c.tree_parents.begin(), c.tree_parents.end(), tree.parent.begin()) &&
                        (c.pending_round == 0 || c.pending_round == call.pending_round);
    if (prefix)
      reused_nodes = static_cast<int64_t>(n_old);
    else
      c.forget_tree();
  } else {
    c.forget_tree();
    // Row 0 needs the hidden state of the last context token: run it again when its logits are unknown.
    if (context.size() == c.linear.size()) c.truncate_linear(c.linear.size() - 1);
  }
  // A fresh session's first call for the context alone (a prompt's prefill) may come from the prompt cache.
  call.prompt_alone = c.linear.empty() && c.kv.length() == 0 && n_nodes == 0;
  if (call.prompt_alone && c.load_prompt(context)) {
    copy_logits(c, call.out, call.out_on_gpu, call.first_row);
    call.served = true;
    return;
  }
  const int64_t L = static_cast<int64_t>(c.linear.size());
  call.linear_before = L;
  call.chunk = static_cast<int64_t>(context.size()) - L;
  call.reused_nodes = reused_nodes;
  call.rows = call.chunk + n_nodes - reused_nodes;
  c.stats.context_tokens_cached += L;
  c.stats.tree_nodes_reused += reused_nodes;
  if (call.rows == 0) return;
  c.kv.reserve(c.kv.length() + call.rows);
  std::vector<int64_t> ids;
  ids.reserve(call.rows);
  ids.insert(ids.end(), context.begin() + L, context.end());
  ids.insert(ids.end(), tree.tokens.begin() + reused_nodes, tree.tokens.end());
  // New nodes from device_tokens_from on read their ids where the draws left them; a pending node before it must have
  // been reused.
  const int64_t first_fed = call.device_tokens ? std::max(reused_nodes, call.device_tokens_from) : n_nodes;
  for (int64_t j = reused_nodes; j < first_fed; ++j)
    if (tree.tokens[j] == kPendingToken)
      fail(c.state->dir, ": tree node ", j, "'s token is pending, but neither given nor computed by the last call");
  for (int64_t j = first_fed; j < n_nodes; ++j) ids[call.chunk + (j - reused_nodes)] = 0;  // placeholders
  if (first_fed < n_nodes) {
    const torch::Device device = c.state->model->embedding->weight.device();
    const torch::Tensor fed =
        torch::from_blob(const_cast<int32_t*>(call.device_tokens) + (first_fed - call.device_tokens_from),
                         {n_nodes - first_fed}, torch::dtype(torch::kInt32).device(device));
    // Clamped into the vocabulary: a failed draw's id (-1) must not index the embedding (on a GPU, a device-side
    // assertion); its draw's status fails the proposal once it is read.
    call.segment.fed = fed.clamp(0, c.state->model->config().vocab_size - 1).to(torch::kInt64);
    call.segment.fed_row = call.chunk + (first_fed - reused_nodes);
  }
  // A call that a static-shape step may take gets the mask's compact form alone (the step builds the mask on the
  // device); run_calls builds the full mask if another path takes it after all.
  const bool for_steps = c.state->step_graphs && call.rows <= kMaxStepGraphRows && n_nodes <= kMaskWindow;
  const AttentionLayout layout = tree_layout(c.kv.length(), call.chunk, tree.parent, reused_nodes, !for_steps);
  call.segment.tokens = torch::tensor(ids, torch::kInt64);
  call.segment.positions = layout.positions;
  // One row after the cache sees every column: no mask.
  call.all_visible = call.rows == 1 && reused_nodes == 0;
  call.segment.mask = call.all_visible ? torch::Tensor() : layout.mask;
  call.segment.window = call.all_visible ? torch::Tensor() : layout.window;
  call.segment.cache = &c.kv;
}

// The pool the calls' caches share (cache_pool.h): the one they are in when it holds them all and they are more than
// half its rows, else a new one made for them (its rows are padding in every step: a batch whose sequences finished
// moves into a smaller pool, at most once each time the batch halves).
CachePool& pool_for(const TransformerModelState& state, const std::vector<PendingCall*>& calls) {
  const std::shared_ptr<CachePool> current = calls[0]->cache->pool;
  const bool fits = current && 2 * static_cast<int64_t>(calls.size()) > current->rows() &&
                    std::all_of(calls.begin(), calls.end(), [&](const PendingCall* call) {
                      return call->cache->pool == current && current->holds(call->cache->kv);
                    });
  if (fits) return *current;
  std::vector<KVCache*> caches;
  for (PendingCall* call : calls) {
    if (call->cache->pool) call->cache->pool->release(call->cache->kv);
    caches.push_back(&call->cache->kv);
  }
  auto pool = std::make_shared<CachePool>(state.model, pool_row_slots(state.model->config()), caches,
                                          state.capture_graphs, &state.graph_counters);
  for (PendingCall* call : calls) {
    call->cache->pool = pool;
    ++call->cache->stats.pools_joined;
  }
  return *pool;
}

// Step 4 for every call that has rows to run: one forward over all of them, one LM head over the rows whose logits
// anyone reads, and one copy of the batch's hidden states to the host (a model on a GPU; its logits stay there).
// With step graphs, a lone call of a few rows is its session's step graph, and the calls of a batch (each of a few
// rows, each fitting a pool row) one step over their pooled caches; otherwise (a prompt of more rows, graphs off)
// batch_hidden_states.
void run_calls(TransformerModelState& state, std::vector<PendingCall*>& calls) {
  Transformer& model = state.model;
  // A static-shape step takes calls of a few rows whose masks have their compact form.
  const bool few_rows = std::all_of(calls.begin(), calls.end(), [](const PendingCall* call) {
    return call->rows <= kMaxStepGraphRows && (call->all_visible || call->segment.window.defined());
  });
  const int64_t row_slots = pool_row_slots(model->config());
  const bool fit_pool = std::all_of(calls.begin(), calls.end(), [&](const PendingCall* call) {
    return call->cache->kv.length() + call->rows <= row_slots;
  });
  // The session's step graph (reserved slots: the graph's columns bucket is taken after prepare_call reserved them).
  StepGraph* graph =
      state.step_graphs && few_rows && calls.size() == 1 ? calls[0]->cache->graph_for(calls[0]->rows) : nullptr;
  std::vector<RowSegment> segments;
  for (PendingCall* call : calls) segments.push_back(call->segment);
  torch::Tensor hidden, step_logits;  // step_logits: every row's, when the step gave them
  if (graph) {
    const RowSegment& segment = calls[0]->segment;
    std::vector<FedTokens> fed;
    if (segment.fed.defined()) fed.push_back(FedTokens{segment.fed_row, segment.fed});
    const StepOutputs out = graph->run(segment.tokens, segment.positions, segment.window, fed);
    segment.cache->advance(calls[0]->rows);
    hidden = out.hidden;
    step_logits = out.logits;
    ++calls[0]->cache->stats.step_graph_calls;
  } else if (state.step_graphs && few_rows && fit_pool) {
    const StepOutputs out = pool_for(state, calls).run(segments);
    hidden = out.hidden;
    step_logits = out.logits;
    for (PendingCall* call : calls) ++call->cache->stats.pooled_step_calls;
  } else {
    // The full masks of the calls prepared for a static-shape step (their window alone), and fed ids made whole.
    for (size_t k = 0; k < calls.size(); ++k) {
      if (!calls[k]->all_visible && !segments[k].mask.defined())
        segments[k].mask = mask_from_window(segments[k].window, calls[k]->cache->kv.length() + calls[k]->rows);
      segments[k].tokens = with_fed_tokens(segments[k]);
      segments[k].fed = torch::Tensor();
    }
    // Fed ids lie where the model computes: every segment's ids there, so that a batch's can be joined.
    const bool any_fed =
        std::any_of(calls.begin(), calls.end(), [](const PendingCall* c) { return c->segment.fed.defined(); });
    if (any_fed)
      for (RowSegment& segment : segments) segment.tokens = segment.tokens.to(model->embedding->weight.device());
    hidden = model->batch_hidden_states(segments);
  }
  // The sessions keep their hidden states where the model computes (copied out of the step's tensors there).
  std::vector<torch::Tensor> read;         // the rows whose logits anyone reads
  std::vector<torch::Tensor> read_logits;  // their logits, when the step gave every row's
  int64_t first_row = 0;
  for (PendingCall* call : calls) {
    TransformerSession::Cache& c = *call->cache;
    const torch::Tensor own = hidden.narrow(0, first_row, call->rows);
    if (call->chunk > 0) {
      c.reserve_linear_hidden(call->linear_before + call->chunk);
      c.linear_hidden.narrow(0, call->linear_before, call->chunk).copy_(hidden.narrow(0, first_row, call->chunk));
      c.wrote_linear_hidden(call->linear_before);
    }
    // Only the last context row and the tree rows have logits anyone reads.
    const int64_t first = call->chunk > 0 ? call->chunk - 1 : 0;
    read.push_back(own.narrow(0, first, call->rows - first));
    if (step_logits.defined()) read_logits.push_back(step_logits.narrow(0, first_row + first, call->rows - first));
    first_row += call->rows;
    c.stats.rows_run += call->rows;
  }
  // On the CPU's decoding step each call's rows go through the LM head alone, as tree_logits sends them: a float32
  // row-major head (a vocabulary that is no multiple of 16) takes LibTorch's GEMM above 32 rows, whose sums would
  // make a row's bits depend on the batch. Elsewhere (a GPU) one GEMM serves the batch.
  torch::Tensor logits;
  if (step_logits.defined()) {
    // A graph's own tensor, overwritten by its next run: the read rows copied out, on the device (an index list
    // would have to be uploaded first, which waits for the step).
    logits = torch::cat(read_logits);
  } else if (model->decode_step() && read.size() > 1) {
    std::vector<torch::Tensor> parts;
    for (const torch::Tensor& r : read) parts.push_back(model->lm_head(r));
    logits = torch::cat(parts);
  } else {
    logits = model->lm_head(read.size() == 1 ? read[0] : torch::cat(read));
  }
  // Hidden states and logits where the model computes, as float32 (copies: the step's own tensors are overwritten by
  // its next run).
  const torch::Tensor read_hidden = torch::cat(read);
  logits = logits.to(torch::kFloat32).contiguous();
  int64_t at = 0;
  for (size_t k = 0; k < calls.size(); ++k) {
    calls[k]->new_hidden = read_hidden.narrow(0, at, read[k].size(0));
    calls[k]->new_logits = logits.narrow(0, at, read[k].size(0));
    at += read[k].size(0);
  }
}

// The remembered tree's rows of this call: the `reused` first rows of `old`, then `fresh` (either may be empty).
torch::Tensor tree_rows_of_call(const torch::Tensor& old, int64_t reused, const torch::Tensor& fresh) {
  const bool has_fresh = fresh.defined() && fresh.size(0) > 0;
  if (reused > 0 && has_fresh) return torch::cat({old.narrow(0, 0, reused), fresh});
  if (reused > 0) return old.narrow(0, 0, reused).contiguous();
  return has_fresh ? fresh.contiguous() : torch::Tensor();
}

// After the forward: the session's memory of this call (linear prefix, tree rows, prompt cache) and the rows out.
void finish_call(PendingCall& call) {
  if (call.served) return;
  TransformerSession::Cache& c = *call.cache;
  const std::vector<Token>& context = *call.context;
  const TokenTree& tree = *call.tree;
  torch::Tensor new_hidden = call.new_hidden, new_logits = call.new_logits;
  // Row 0, then the nodes (reused rows first).
  if (call.chunk > 0) {
    c.linear.insert(c.linear.end(), context.begin() + call.linear_before, context.end());
    c.last_hidden = new_hidden[0];
    c.last_logits = new_logits[0];
    new_hidden = new_hidden.narrow(0, 1, new_hidden.size(0) - 1);
    new_logits = new_logits.narrow(0, 1, new_logits.size(0) - 1);
  }
  torch::Tensor hidden = tree_rows_of_call(c.tree_hidden, call.reused_nodes, new_hidden);
  torch::Tensor logits = tree_rows_of_call(c.tree_logits, call.reused_nodes, new_logits);
  c.tree_tokens = tree.tokens;
  c.tree_parents = tree.parent;
  c.pending_round = std::find(tree.tokens.begin(), tree.tokens.end(), kPendingToken) != tree.tokens.end()
                        ? std::max<uint64_t>(call.pending_round, 1)
                        : 0;
  if (hidden.defined()) {
    c.tree_hidden = hidden;
    c.tree_logits = logits;
  } else {
    c.empty_tree_rows();
  }

  c.last_call_rows = 1 + tree.size();
  if (call.prompt_alone) c.store_prompt();
  copy_logits(c, call.out, call.out_on_gpu, call.first_row);
}

// Every call checked first, then prepared, run in one forward and finished.
void run_tree_logits(TransformerModelState& state, std::vector<PendingCall>& calls) {
  c10::InferenceMode inference;
  for (const PendingCall& call : calls) check_call(state, *call.context, *call.tree, call.device_tokens != nullptr);
  std::vector<PendingCall*> to_run;
  for (PendingCall& call : calls) {
    prepare_call(call);
    if (!call.served && call.rows > 0) to_run.push_back(&call);
  }
  if (!to_run.empty()) run_calls(state, to_run);
  for (PendingCall& call : calls) finish_call(call);
}

}  // namespace

void TransformerSession::tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) {
  std::vector<PendingCall> calls(1);
  calls[0].cache = cache_.get();
  calls[0].context = &context;
  calls[0].tree = &tree;
  calls[0].out = out;
  run_tree_logits(*cache_->state, calls);
}

void TransformerLanguageModel::batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const {
  std::vector<PendingCall> pending(calls.size());
  std::set<const TransformerSession::Cache*> seen;
  for (size_t i = 0; i < calls.size(); ++i) {
    auto* session = dynamic_cast<TransformerSession*>(calls[i].session);
    if (!session || session->cache_->state != state_)
      fail(description(), ": batch_tree_logits was given a session of another model");
    if (!seen.insert(session->cache_.get()).second)
      fail(description(), ": batch_tree_logits was given one session twice");
    pending[i].cache = session->cache_.get();
    pending[i].context = calls[i].context;
    pending[i].tree = calls[i].tree;
    pending[i].out = calls[i].out;
    pending[i].out_on_gpu = calls[i].out_on_gpu;
    pending[i].first_row = calls[i].first_row;
    pending[i].device_tokens = calls[i].device_tokens;
    pending[i].device_tokens_from = calls[i].device_tokens_from;
    pending[i].pending_round = calls[i].pending_round;
    check_rows_asked(calls[i], description());
    if (calls[i].device_tokens)
      for (int64_t j = std::max<int64_t>(calls[i].device_tokens_from, 0); j < calls[i].tree->size(); ++j)
        if (calls[i].tree->tokens[j] != kPendingToken)
          fail(description(), ": tree node ", j, " has its token given twice, on the host (", calls[i].tree->tokens[j],
               ") and in device memory");
    if (calls[i].device_tokens && (calls[i].device_tokens_from < 0 ||
                                   calls[i].device_tokens_from > calls[i].tree->size() || calls[i].pending_round == 0))
      fail(description(), ": pending tokens from node ", calls[i].device_tokens_from, " of round ",
           calls[i].pending_round, " of a tree of ", calls[i].tree->size(), " nodes (rounds from 1)");
    if (calls[i].out_on_gpu && !writes_gpu_logits())
      fail(description(), ": logits asked in GPU memory, but the model does not compute on a GPU");
  }
  run_tree_logits(*state_, pending);
  // Writes into GPU memory are complete on return unless the kernels follow them on LibTorch's stream.
  const bool wrote_to_gpu =
      std::any_of(calls.begin(), calls.end(), [](const TreeLogitsCall& c) { return c.out_on_gpu; });
  if (wrote_to_gpu && !device_stream()) torch::cuda::synchronize();
}

bool TransformerLanguageModel::writes_gpu_logits() const { return sessions_in_device_memory(); }

std::optional<void*> TransformerLanguageModel::device_stream() const {
#ifdef SPECULA_TORCH_CUDA
  // The stream LibTorch enqueues this thread's work on for the model's GPU (its default stream unless a caller set
  // another): the logits' copies into the kernels' buffer are ordered on it.
  const torch::Device device = state_->model->embedding->weight.device();
  if (device.is_cuda()) return static_cast<void*>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
#endif
  return std::nullopt;
}

const float* TransformerSession::context_features(const std::vector<Token>& tokens, int64_t n) {
  c10::InferenceMode inference;
  Cache& c = *cache_;
  if (n <= 0 || n > static_cast<int64_t>(tokens.size())) return nullptr;
  const size_t known = std::min(c.linear.size(), static_cast<size_t>(n));
  if (!std::equal(c.linear.begin(), c.linear.begin() + known, tokens.begin())) return nullptr;
  if (known == c.linear.size()) c.follow_tree_path(tokens, static_cast<size_t>(n));
  if (c.linear.size() < static_cast<size_t>(n) || !c.linear_hidden.defined()) return nullptr;
  return c.host_linear_hidden(n);
}

void TransformerSession::tree_tokens_known(const TokenTree& tree, uint64_t round) {
  Cache& c = *cache_;
  if (c.pending_round == 0) return;
  // The remembered nodes are the given tree's first ones (a drafter's proposal grows past its last forward: the last
  // depth's nodes were drawn after it), of the round that computed them; or the given tree is theirs cut short (a
  // chain drawn at a batch's longest K, cut to its own): the nodes past it stay pending, and no context follows them.
  const size_t n = c.tree_tokens.size(), known = std::min(n, tree.tokens.size());
  const bool grows_it = round == c.pending_round && tree.parent.size() >= known &&
                        std::equal(c.tree_parents.begin(), c.tree_parents.begin() + static_cast<std::ptrdiff_t>(known),
                                   tree.parent.begin());
  if (!grows_it) {
    c.forget_tree();
    return;
  }
  for (size_t j = 0; j < known; ++j) {
    const Token t = tree.tokens[j];
    if (t < 0 || t >= c.state->model->config().vocab_size)
      fail(c.state->dir, ": tree_tokens_known was given token ", t, ", outside the vocabulary");
    if (c.tree_tokens[j] != kPendingToken && c.tree_tokens[j] != t)
      fail(c.state->dir, ": tree_tokens_known was given node ", j, " as ", t, ", computed as ", c.tree_tokens[j]);
  }
  std::copy(tree.tokens.begin(), tree.tokens.begin() + static_cast<std::ptrdiff_t>(known), c.tree_tokens.begin());
  if (known == n) c.pending_round = 0;
}

int32_t TransformerSession::feature_size() const { return cache_->state->model->config().d_model; }

void TransformerSession::last_hidden(float* out) const {
  copy_rows(*cache_, cache_->last_hidden, cache_->tree_hidden, out, false);
}

int32_t TransformerSession::hidden_size() const { return cache_->state->model->config().d_model; }

}  // namespace specula
