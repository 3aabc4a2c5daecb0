// A decoder-only transformer (Llama-style): token embedding, pre-norm blocks of RMSNorm -> multi-head causal
// attention with RoPE -> residual, RMSNorm -> SwiGLU MLP -> residual, a final RMSNorm and a tied or untied LM
// head. Idiomatic LibTorch modules (TORCH_MODULE, register_module), so parameters(), to() and training work.
// Includes LibTorch: only for torch translation units (the torch-free face is transformer_language_model.h).
//
// Attention is described by rows and columns: N new rows (tokens) at given RoPE positions attend to the cache
// slots [0, cache.length()) and to the new rows themselves (columns cache.length() + 0..N-1) through an
// additive mask [N, cache.length() + N] of 0 (visible) and -inf (hidden). A chunk of a sequence is the
// causal case; a token tree is the ancestor-closure case (verify/ALGORITHMS.md §6).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "harness/models/transformer/decode_step.h"
#include "harness/models/transformer/kv_cache.h"
#include "harness/models/transformer/transformer_config.h"

namespace specula {

// RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, no mean subtraction, no bias.
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// Rotary position embedding (Su et al. 2021, RoFormer), "rotate half" pairing (i, i + D/2) as in GPT-NeoX and
// Llama. cos/sin tables are buffers [max_len, D/2] rebuilt from the config, not learned.
struct RotaryEmbeddingImpl : torch::nn::Module {
  RotaryEmbeddingImpl(int64_t head_dim, int64_t max_len, double theta);
  // x [B, H, N, D]; positions [N] int64, the absolute position of each row, or [B, N], each sequence's own.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions);
  torch::Tensor cos, sin;  // [max_len, D/2]
};
TORCH_MODULE(RotaryEmbedding);

// Multi-head or grouped-query attention (Ainslie et al. 2023: query head h reads key/value head
// h / (n_heads / n_kv_heads)); the cache holds the n_kv_heads key/value heads only.
struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const TransformerConfig& c);
  // x [B, N, d]; mask [N, T] additive (undefined: every column visible); with a cache, T = cache.length() + N
  // and this layer's keys/values are written to the cache; without one, T = N.
  // `slots` [B, N] (defined only with a cache): the static-shape form (KVCache::write_at), positions [B, N] and
  // mask [B, N, columns], each sequence of the batch its own.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& mask,
                        KVCache* cache, int64_t layer, const torch::Tensor& slots = torch::Tensor());
  // forward between its two projections: heads = qkv(x) [B, N, (H + 2 Hkv) D] in, the attention's output before
  // `out` [B, N, H D] back (a batch of sequences projects all its rows at once and attends sequence by sequence).
  torch::Tensor attend(const torch::Tensor& heads, const torch::Tensor& positions, const torch::Tensor& mask,
                       KVCache* cache, int64_t layer, const torch::Tensor& slots = torch::Tensor());
  // qkv [d -> (H + 2 Hkv) D]: q, k, v stacked, head-major within each (bias only with config.qkv_bias);
  // out [d -> d]
  torch::nn::Linear qkv{nullptr}, out{nullptr};
  RotaryEmbedding rope{nullptr};
  int64_t n_heads, n_kv_heads, head_dim;
};
TORCH_MODULE(Attention);

// SwiGLU MLP (Shazeer 2020): down(silu(gate(x)) * up(x)); gate and up share one [d -> 2 * ff] matrix.
struct SwiGLUImpl : torch::nn::Module {
  SwiGLUImpl(int64_t d_model, int64_t d_ff);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_up{nullptr}, down{nullptr};
};
TORCH_MODULE(SwiGLU);

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const TransformerConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& mask,
                        KVCache* cache, int64_t layer, const torch::Tensor& slots = torch::Tensor());
  RMSNorm attn_norm{nullptr}, mlp_norm{nullptr};
  Attention attn{nullptr};
  SwiGLU mlp{nullptr};
};
TORCH_MODULE(Block);

// One sequence's new rows in a forward over several sequences (TransformerImpl::batch_hidden_states).
struct RowSegment {
  torch::Tensor tokens;     // [N] int64
  torch::Tensor positions;  // [N] int64
  torch::Tensor mask;       // [N, cache->length() + N] additive, or undefined: every column visible
  KVCache* cache = nullptr;
  // The same mask in compact form (AttentionLayout::window), [N, 4] int64, for the static-shape steps (step_graph.h,
  // cache_pool.h), which build the additive mask from it on the device; undefined: every column visible. A segment
  // for those steps may leave `mask` undefined when it has a window; the other paths read `mask`.
  torch::Tensor window;
  // Token ids of rows [fed_row, fed_row + fed.numel()) kept where the model computes (int64, in [0, V)), written by
  // work its stream is ordered behind (a draft's draws: TreeLogitsCall::device_tokens); those rows of `tokens` are
  // placeholders. Undefined: `tokens` holds every id. with_fed_tokens gives the ids whole.
  torch::Tensor fed{};
  int64_t fed_row = 0;
};

// A segment's token ids whole, where `fed` is: `tokens` with rows [fed_row, ..) taken from `fed` (`tokens` itself when
// nothing is fed).
torch::Tensor with_fed_tokens(const RowSegment& segment);

struct TransformerOutput {
  torch::Tensor hidden;  // [B, N, d] final hidden states (after the final norm: the LM head's input, EAGLE's f)
  torch::Tensor logits;  // [B, N, V]
};

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const TransformerConfig& config);
  // A model whose weights are loaded next: its matrices built in `matrices` (kFloat32, kFloat16 or kBFloat16) one
  // block at a time, so a 16-bit model is never held in float32 (memory_budget.h counts the peak), and no
  // initialisation beyond LibTorch's own.
  TransformerImpl(const TransformerConfig& config, torch::ScalarType matrices);

  // Training and full recompute: tokens [B, N] at positions 0..N-1, causal; logits [B, N, V]. No cache.
  torch::Tensor forward(const torch::Tensor& tokens);
  // A chunk of N new tokens [B, N] after the cache's contents: positions cache.length() + 0..N-1, causal
  // among themselves, every cached slot visible. Appends their keys/values to the cache.
  TransformerOutput forward(const torch::Tensor& tokens, KVCache& cache);
  // Every node of a token tree in one call: tokens [N] (batch 1), parents [N] (-1: child of the cache's last
  // token; parents precede children). Node i sits at position cache.length() + depth(i) - 1 and attends to
  // the whole cache and to itself and its ancestors. Appends node i's keys/values at slot
  // cache.length() + i.
  TransformerOutput forward_tree(const torch::Tensor& tokens, const std::vector<int32_t>& parents, KVCache& cache);

  // The general step: rows tokens [B, N] at positions [N], mask [N, T] (see the file comment; undefined:
  // all visible). Returns the final hidden states [B, N, d]; appends keys/values when `cache` is given.
  // Inputs may live on the CPU: they are moved to the parameters' device.
  torch::Tensor hidden_states(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& mask,
                              KVCache* cache);
  torch::Tensor lm_head(const torch::Tensor& hidden);  // [.., d] -> [.., V]

  // hidden_states with static shapes, the form a CUDA graph captures (step_graph.h): tokens, positions and `slots`
  // [B, N] (row r of sequence b goes to slot slots[b][r] of the cache's batch row b) and mask [B, N, columns]
  // (additive, every slot a row must not see at -inf, unused ones included) on the parameters' device, B the cache's
  // batch; every row attends over its sequence's slots [0, columns), whatever their lengths. Returns the final hidden
  // states [B, N, d]. Reads no tensor's value on the host and does not advance the cache. LibTorch's operations only
  // (a model off the decoding step: set_decode_step(false)).
  torch::Tensor static_hidden_states(const torch::Tensor& tokens, const torch::Tensor& positions,
                                     const torch::Tensor& slots, const torch::Tensor& mask, KVCache& cache);

  // hidden_states for several sequences in one forward (batched lockstep decoding): the final hidden states of
  // every segment's rows, [sum of N, d] in segment order, each segment's keys/values appended to its own cache.
  // Every linear layer runs once over all the rows (the weights are read once for the batch); each segment
  // attends to its own cache. With the decoding step (the CPU) a row's result is bit for bit what hidden_states
  // gives its segment alone (the segments the step does not take, e.g. a long prompt, run alone); LibTorch's GEMMs
  // (another device) may sum in another order for another number of rows.
  torch::Tensor batch_hidden_states(const std::vector<RowSegment>& segments);

  // hidden_states' path for a few rows after a cache at inference (decode_step.h: plain loops, no LibTorch
  // operations per layer); the general path (training, large chunks, other devices) is LibTorch's.
  bool decode_path_applies(const torch::Tensor& tokens, const KVCache* cache) const;
  // Off: every forward takes LibTorch's operations (LibTorchOperationsOnly), and caches made by new_cache move
  // their slots with LibTorch's too: the path a model on a GPU runs (tests run it on the CPU).
  void set_decode_step(bool on) { decode_step_ = on; }
  bool decode_step() const { return decode_step_; }
  torch::Tensor decode_hidden_states(const torch::Tensor& tokens, const torch::Tensor& positions,
                                     const torch::Tensor& mask, KVCache& cache);

  // Token embeddings as float32 [.., d], whatever dtype the embedding matrix is stored in.
  torch::Tensor embed(const torch::Tensor& tokens);

  // A cache sized for this model, on its parameters' device: [n_layers, batch, n_kv_heads, max_seq_len, head_dim].
  KVCache new_cache(int64_t batch = 1) const;
  const TransformerConfig& config() const { return config_; }

  torch::nn::Embedding embedding{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  RMSNorm final_norm{nullptr};
  torch::nn::Linear head{nullptr};  // only when the embeddings are untied

 private:
  TransformerImpl(const TransformerConfig& config, torch::ScalarType matrices, bool initialise);
  // batch_hidden_states' two paths: the decoding step's (segments it takes) and LibTorch's.
  torch::Tensor decode_batch_hidden_states(const std::vector<const RowSegment*>& segments);
  torch::Tensor libtorch_batch_hidden_states(const std::vector<RowSegment>& segments);
  // Token embeddings [n, d] widened to float32 into x, as decode_hidden_states reads them.
  void embed_rows(const int64_t* ids, int64_t n, float* x);
  TransformerConfig config_;
  bool decode_step_ = true;
};
TORCH_MODULE(Transformer);

// Keeps the model's matrices (the embedding, every projection, an untied LM head) in `dtype` (kFloat32,
// kFloat16 or kBFloat16) as they sit in memory; norm gains, biases and RoPE tables stay float32. The decoding
// step reads 16-bit matrices as they are and widens them in registers (skinny_linear.h), so a step streams
// half the bytes; the LibTorch path (training, long prompts) widens them per call. Inference only: training
// needs float32 parameters.
void store_matrices_as(torch::nn::Module& model, torch::ScalarType dtype);
// Reorders every 2-D matrix of `model` whose output count is a multiple of 16 (on the CPU, fp32/fp16/bf16) into
// panels of 16 outputs, in place: the parameter becomes [out / 16, in, 16] (WeightLayout::panels,
// skinny_linear.h), the layout the few-row kernel reads fastest. Inference only, done once at load: everything
// that reads matrices here (apply_linear, embed, lm_head, the decoding step) reads both layouts; training and
// saving need row-major matrices (save_checkpoint refuses a packed model).
// The packed matrices then move into one HugePageBuffer (huge_page_buffer.h; unless SPECULA_HUGE_PAGES=off or
// they make less than one 2 MB page): the step streams them on 2 MB pages. Returns the bytes moved there.
int64_t pack_matrices_for_decoding(torch::nn::Module& model);
// Moves each tensor's data into one HugePageBuffer, kept alive by the tensors that view it (same values, sizes
// and dtype; contiguous CPU tensors, else Error). Returns the buffer's bytes in use, or 0 where nothing moved:
// under one 2 MB page in all, or a buffer that could not be mapped (a warning; the tensors keep their storage).
int64_t move_to_huge_pages(const std::vector<torch::Tensor>& matrices);
bool has_packed_matrices(const torch::nn::Module& model);
bool is_packed_matrix(const torch::Tensor& w);           // [out / 16, in, 16]
int64_t matrix_outputs(const torch::Tensor& w);          // out, in either layout
torch::Tensor row_major_matrix(const torch::Tensor& w);  // [out, in]: w itself, or a row-major copy of panels
// Whether every element of `t` is finite, checked kLoadChunkElements at a time (memory_budget.h): a check of a whole
// matrix at once would allocate several bytes of temporaries per element.
bool all_finite(const torch::Tensor& t);
// Copies the stored tensor `src` into the parameter `dest` (converted to dest's dtype in place, no float32
// copy), then checks the result: a non-finite value is an error naming `file` and `name`, which says whether
// the file holds it (NaN or inf) or the conversion made it (an overflow of the dtype dest is kept in). The
// source is checked only when the result fails, so a good tensor costs one check.
void copy_finite(torch::Tensor dest, const torch::Tensor& src, const std::string& file, const std::string& name);
// Bytes of the parameters and buffers as they sit in memory.
int64_t resident_bytes(const torch::nn::Module& model);
// The dtype a loader keeps matrices in: "float32" | "float16" | "bfloat16" | "auto" (= `stored`, as the
// weights file holds them). Anything else is a ParameterError for weights_dtype.
torch::ScalarType weights_dtype_for(const std::string& requested, torch::ScalarType stored);
std::string dtype_string(torch::ScalarType dtype);  // "float32" | "float16" | "bfloat16"

// While one lives on this thread (and was made with on = true), apply_linear takes LibTorch's operations on the CPU
// too, a 16-bit matrix the 16-bit GEMM a GPU runs: the GPU's path where there is none (set_decode_step(false)).
class LibTorchOperationsOnly {
 public:
  explicit LibTorchOperationsOnly(bool on);
  ~LibTorchOperationsOnly();
  LibTorchOperationsOnly(const LibTorchOperationsOnly&) = delete;
  LibTorchOperationsOnly& operator=(const LibTorchOperationsOnly&) = delete;
  static bool active();

 private:
  bool before_;
};

// The LibTorch device named `name` (cpu, cuda, cuda:N); Error when it is no device, or CUDA that this LibTorch
// cannot use (Debian's is built for the CPU only).
torch::Device torch_device_named(const std::string& name);

// An inference model on LibTorch's path, as a model on a GPU runs (and the `libtorch` path on the CPU): off the
// decoding step (set_decode_step(false)) and moved to `device`.
void place_for_libtorch_operations(Transformer& model, const torch::Device& device);

// x [.., in] times a linear layer's weight [out, in] or its panels (+ bias): at inference with at most
// kSkinnyLinearMaxRows rows of float32 on the CPU (weights float32, float16 or bfloat16, either layout),
// skinny_linear (weights read once; see skinny_linear.h), split over LibTorch's threads; also for more rows
// when the matrix is 16-bit or packed, 32 rows at a time; at inference on another device (a GPU) with a 16-bit
// matrix, LibTorch's linear in that dtype (16-bit GEMM, result widened to x's dtype); otherwise LibTorch's own
// linear on a matrix widened to x's dtype (training, large chunks).
torch::Tensor apply_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
inline torch::Tensor apply_linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return apply_linear(x, layer->weight, layer->bias);
}

// The pieces of the LibTorch-free decoding step (decode_step.h), shared with draft heads built from the same
// modules (EAGLE): whether a layer's parameters and a cache qualify (float32, contiguous, CPU; inference;
// batch 1; at most kSkinnyLinearMaxRows rows), a layer's view for decode_rows (attn_norm may be null), and
// one run over x [1, n, d] in place (positions and mask as in hidden_states; the cache advances by n).
bool decode_layer_applies(const AttentionImpl& attn, const RMSNormImpl* attn_norm, const RMSNormImpl& mlp_norm,
                          const SwiGLUImpl& mlp);
bool decode_cache_applies(const KVCache* cache, int64_t rows);
DecodeLayer decode_layer(AttentionImpl& attn, RMSNormImpl* attn_norm, RMSNormImpl& mlp_norm, SwiGLUImpl& mlp,
                         KVCache& cache, int64_t layer);
void run_decode_layers(const TransformerConfig& c, const std::vector<DecodeLayer>& layers, const float* final_norm,
                       torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& mask, KVCache& cache);

// A row's visible columns in compact form, what a static-shape step uploads instead of its mask (a row of floats a
// column): [prefix, used, word 0, word 1] (int64): columns [0, prefix) visible; among [prefix, used) those whose bit
// (column - prefix) is set, bits 0..63 in word 0 and 64..127 in word 1 (a window of kMaskWindow columns); every column
// from `used` on hidden. A tree's row: the context as its prefix, its ancestors as bits.
constexpr int64_t kMaskWindow = 128;

// Positions and attention mask of one step (see the file comment).
struct AttentionLayout {
  torch::Tensor positions;  // [N] int64
  torch::Tensor mask;       // [N, cache_len + N] float, 0 or -inf; undefined when not asked for (tree_layout)
  // [N, 4] int64: the mask's compact form (kMaskWindow); undefined when some row sees columns past its prefix's
  // window (a tree of more than kMaskWindow nodes).
  torch::Tensor window;
};

// The additive mask [N, columns] of `window`'s rows ([N, 4], kMaskWindow), on the host.
torch::Tensor mask_from_window(const torch::Tensor& window, int64_t columns);

// N causal rows after `cache_len` cached slots.
AttentionLayout causal_layout(int64_t cache_len, int64_t n);

// Rows = `chunk` linear tokens followed by the tree nodes cached_nodes..parents.size()-1. The cache holds
// `cache_len` slots, of which the last `cached_nodes` are tree nodes 0..cached_nodes-1 already run (only
// with chunk == 0); the slots before them are the linear prefix, visible to every row. Chunk row r sits at
// position base + r (base = cache_len - cached_nodes); tree node j at base + chunk + depth(j) - 1, seeing the
// prefix, the chunk, itself and its ancestors (verify/ALGORITHMS.md §6: mask[i][j] = 1 iff j is i or an ancestor).
// `full_mask` false: the window alone (a caller that builds the mask only when a step needs it, mask_from_window).
AttentionLayout tree_layout(int64_t cache_len, int64_t chunk, const std::vector<int32_t>& parents,
                            int64_t cached_nodes = 0, bool full_mask = true);

}  // namespace specula
