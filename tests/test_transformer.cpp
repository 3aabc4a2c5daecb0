// Transformer models: the KV cache, tree attention and the session's cache reuse against a full recompute,
// checkpoints, the tokenizer, and a short training run. All "[transformer]".
//
// Tolerances. Every comparison is fp32 against fp32 computed by a different route (a chunked or tree forward
// vs one full causal forward): the same math with different matrix shapes, so BLAS sums in a different
// order and the softmax sees extra masked columns (exp(-inf) = 0 exactly, so they add nothing). The test
// models use weights with unit-scale activations (logits up to ~30 in magnitude), where fp32 rounding
// (relative ~1e-7 per operation, a few hundred operations deep) gives absolute logit differences of ~1e-5:
// the largest observed over all comparisons here is 8.6e-6. We allow kTol = 1e-4 absolute (>10x headroom).
// Each test's negative control (a position off by one, a changed token, a wrong path) moves the logits by
// at least 4.8 (observed; checked > 100 * kTol), so the tolerance cannot hide a real bug.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "draft/synthetic_drafter.h"
#include "harness/generation/generator.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
#include "harness/models/transformer/byte_tokenizer.h"
#include "harness/models/transformer/cache_pool.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/decode_step.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/memory_budget.h"
#include "harness/models/transformer/step_graph.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "harness/models/transformer/transformer_model.h"
#include "harness/train/lr_schedule.h"
#include "harness/train/progress_bar.h"
#include "harness/train/trainer.h"
#include "kernels/shared/error.h"
#include "scaled_transformer.h"
#include "tests/support/mutant_switch.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

constexpr double kTol = 1e-4;

TransformerConfig small_config(bool tied = true) {
  TransformerConfig c;
  c.vocab_size = 256;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;  // head_dim 8
  c.d_ff = 48;
  c.max_seq_len = 64;
  c.tie_embeddings = tied;
  return c;
}

torch::Tensor ids(const std::vector<Token>& tokens) {
  return torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), torch::kInt64).unsqueeze(0);
}

std::vector<Token> random_tokens(std::mt19937& rng, int n, int vocab = 256) {
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<Token> out(n);
  for (Token& t : out) t = pick(rng);
  return out;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Logits after the whole sequence (its last row), by one full causal forward: the reference.
torch::Tensor reference_next(Transformer& m, const std::vector<Token>& tokens) {
  torch::NoGradGuard no_grad;
  return m->forward(ids(tokens))[0][-1];
}

// The final hidden state after the whole sequence (the LM head's input), by one full causal forward.
torch::Tensor reference_hidden(Transformer& m, const std::vector<Token>& tokens) {
  torch::NoGradGuard no_grad;
  const AttentionLayout layout = causal_layout(0, static_cast<int64_t>(tokens.size()));
  return m->hidden_states(ids(tokens), layout.positions, layout.mask, nullptr)[0][-1];
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("specula-test-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub = "") const { return (sub.empty() ? path : path / sub).string(); }
};

std::string save_scaled_checkpoint(const TempDir& dir, const std::string& name, const TransformerConfig& c,
                                   uint64_t seed, const std::string& dtype = "float32") {
  Transformer m = scaled_model(c, seed);
  CheckpointConfig cc;
  cc.weights_dtype = dtype;
  save_checkpoint(dir.str(name), m, cc);
  return dir.str(name);
}

}  // namespace

TEST_CASE("KV-cache forward equals a full recompute, chunked and token by token", "[transformer]") {
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    Transformer m = scaled_model(small_config(tied), 7);
    torch::NoGradGuard no_grad;
    std::mt19937 rng(1);
    const std::vector<Token> seq = random_tokens(rng, 40);
    const torch::Tensor full = m->forward(ids(seq))[0];  // [40, V]
    REQUIRE(full.abs().max().item<double>() > 1.0);      // the models are not trivially flat

    SECTION("chunked") {
      KVCache cache = m->new_cache();
      std::vector<torch::Tensor> rows;
      int start = 0;
      for (int len : {7, 1, 12, 3, 17}) {
        const std::vector<Token> chunk(seq.begin() + start, seq.begin() + start + len);
        const TransformerOutput out = m->forward(ids(chunk), cache);
        REQUIRE(out.hidden.sizes() == torch::IntArrayRef({1, len, 32}));
        rows.push_back(out.logits[0]);
        start += len;
      }
      REQUIRE(cache.length() == 40);
      CHECK(max_abs_diff(torch::cat(rows), full) < kTol);
    }
    SECTION("token by token") {
      KVCache cache = m->new_cache();
      std::vector<torch::Tensor> rows;
      for (Token t : seq) rows.push_back(m->forward(ids({t}), cache).logits[0]);
      CHECK(max_abs_diff(torch::cat(rows), full) < kTol);
    }
    SECTION("negative control: a position off by one is caught") {
      KVCache cache = m->new_cache();
      m->forward(ids(std::vector<Token>(seq.begin(), seq.begin() + 20)), cache);
      const std::vector<Token> rest(seq.begin() + 20, seq.end());
      const AttentionLayout wrong = causal_layout(21, 20);  // positions shifted by one, same mask shape
      const torch::Tensor hidden = m->hidden_states(ids(rest), wrong.positions, causal_layout(20, 20).mask, &cache);
      CHECK(max_abs_diff(m->lm_head(hidden)[0], full.narrow(0, 20, 20)) > 100 * kTol);
    }
  }
}

TEST_CASE("decoding steps give a token the same bits alone or beside other rows", "[transformer]") {
  // The LibTorch-free decoding step (decode_step.h) computes every row on its own: three tokens in one call
  // and the same three one call each must agree exactly, not just within rounding.
  for (const bool pack : {false, true}) {
    CAPTURE(pack);
    Transformer m = scaled_model(small_config(), 5);
    if (pack) pack_matrices_for_decoding(*m);
    REQUIRE(has_packed_matrices(*m) == pack);
    c10::InferenceMode inference;
    const std::vector<int64_t> prefix = {3, 1, 4, 1, 5}, rest = {9, 2, 6};
    auto run = [&](KVCache& cache, const std::vector<int64_t>& ids) {
      const int64_t n = static_cast<int64_t>(ids.size());
      const AttentionLayout layout = causal_layout(cache.length(), n);
      return m->hidden_states(torch::tensor(ids).unsqueeze(0), layout.positions, n == 1 ? torch::Tensor() : layout.mask,
                              &cache)[0];
    };
    KVCache together = m->new_cache(1), apart = m->new_cache(1);
    REQUIRE(m->decode_path_applies(torch::tensor(rest).unsqueeze(0), &together));
    run(together, prefix);
    run(apart, prefix);
    const torch::Tensor joint = run(together, rest);
    for (size_t i = 0; i < rest.size(); ++i) {
      const torch::Tensor alone = run(apart, {rest[i]})[0];
      CHECK(torch::equal(alone, joint[static_cast<int64_t>(i)]));
    }
    // Negative control: a different position for the last token changes it.
    KVCache shifted = m->new_cache(1);
    run(shifted, {3, 1, 4, 1, 5, 9, 2, 7});
    CHECK_FALSE(torch::equal(run(shifted, {6})[0], joint[2]));
  }
}

TEST_CASE("decoding steps give the same bits on one compute thread or two", "[transformer]") {
  // The decoding step splits each projection's output columns, and the attention's heads, over the compute
  // threads; every column is one dot product and every (row, head) pair one softmax, so the split must not
  // change a bit.
  TransformerConfig c = small_config();
  c.d_model = 64;
  c.d_ff = 96;
  for (const bool pack : {false, true}) {
    CAPTURE(pack);
    Transformer m = scaled_model(c, 8);
    store_matrices_as(*m, torch::kFloat16);
    if (pack) pack_matrices_for_decoding(*m);
    REQUIRE(has_packed_matrices(*m) == pack);
    const int before = at::get_num_threads();
    auto run = [&](int threads) {
      at::set_num_threads(threads);
      c10::InferenceMode inference;
      KVCache cache = m->new_cache(1);
      m->forward(torch::tensor(std::vector<int64_t>{3, 1, 4, 1, 5}).unsqueeze(0), cache);
      return m->forward(torch::tensor(std::vector<int64_t>{9, 2, 6}).unsqueeze(0), cache).logits;
    };
    const torch::Tensor one = run(1), two = run(2);
    at::set_num_threads(before);
    CHECK(torch::equal(one, two));
  }
}

TEST_CASE("decoding steps split grouped heads over two threads: the same bits, the reference's logits",
          "[transformer]") {
  // Head sizes 96 (value sums of 64 + 32 floats) and 32 (one pass of 32), with grouped keys and values: with 6
  // heads over 3 key/value heads, the two threads' halves [0, 3) and [3, 6) split a group. Enough cached tokens
  // that the attention's work passes kAttentionSplitWork, so the heads really are split. Mutants tried by hand:
  // a thread skipping its last head fails 4 assertions, a wrong stride in the 64-float value pass 1, one
  // scores buffer shared by the threads 5.
  for (const auto& [heads, kv_heads] : {std::pair{2, 1}, std::pair{6, 3}}) {
    CAPTURE(heads, kv_heads);
    TransformerConfig c = small_config();
    c.d_model = 192;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.d_ff = 96;
    c.max_seq_len = 128;
    Transformer m = scaled_model(c, 9);
    std::mt19937 rng(17);
    const std::vector<Token> prefix = random_tokens(rng, 80), rest = {9, 2, 6};
    const int64_t T = static_cast<int64_t>(prefix.size() + rest.size());
    REQUIRE(static_cast<int64_t>(rest.size()) * T * c.d_model >= kAttentionSplitWork);
    struct RestoreThreads {
      int threads = at::get_num_threads();
      ~RestoreThreads() { at::set_num_threads(threads); }
    } restore;
    auto run = [&](int threads, const std::vector<Token>& last) {
      c10::InferenceMode inference;
      KVCache cache = m->new_cache(1);
      at::set_num_threads(1);  // the prefix (80 rows: LibTorch's path, whose BLAS may split sums by thread)
      m->forward(ids(prefix), cache);
      at::set_num_threads(threads);
      REQUIRE(at::get_num_threads() == threads);
      REQUIRE(m->decode_path_applies(ids(last), &cache));
      return m->forward(ids(last), cache).logits[0];
    };
    const torch::Tensor one = run(1, rest), two = run(2, rest), changed = run(2, {9, 2, 7});
    CHECK(torch::equal(one, two));
    std::vector<Token> all = prefix;
    all.insert(all.end(), rest.begin(), rest.end());
    CHECK(max_abs_diff(two[2], reference_next(m, all)) < kTol);
    // Negative control: another last token moves its logits.
    CHECK(max_abs_diff(changed[2], two[2]) > 100 * kTol);
  }
}

TEST_CASE("matrices packed for decoding: the same model through every path, and no save", "[transformer]") {
  // Packing reorders the bytes of every matrix (pack_matrices_for_decoding); every reader of a matrix must
  // follow: the embedding lookup (exact), the decoding step and the LM head (the same math in another
  // summation order), the LibTorch path with gradients (a row-major copy), and the checkpoint writer (refuses).
  TempDir dir("packed");
  for (const bool tied : {true, false})
    for (const torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
      CAPTURE(tied, dtype_string(dtype));
      Transformer plain = scaled_model(small_config(tied), 41), packed = scaled_model(small_config(tied), 41);
      store_matrices_as(*plain, dtype);
      store_matrices_as(*packed, dtype);
      pack_matrices_for_decoding(*packed);
      int64_t matrices = 0;
      for (const auto& p : packed->named_parameters())
        if (p.value().dim() >= 2) {
          ++matrices;
          CHECK(is_packed_matrix(p.value()));
          CHECK(torch::equal(row_major_matrix(p.value()), plain->named_parameters()[p.key()]));
        }
      CHECK(matrices == (tied ? 9 : 10));
      CHECK(resident_bytes(*packed) == resident_bytes(*plain));
      {
        c10::InferenceMode inference;
        const torch::Tensor tokens = torch::randint(256, {2, 40}, torch::kInt64);
        CHECK(torch::equal(packed->embed(tokens), plain->embed(tokens)));
        // The general path (no cache, 80 rows): the kernel on panels against LibTorch's gemm.
        CHECK(torch::allclose(packed->forward(tokens), plain->forward(tokens), 1e-4, 1e-4));
        // The decoding step: a prompt, then steps of 1 and 3 rows.
        KVCache cp = packed->new_cache(1), cr = plain->new_cache(1);
        const torch::Tensor prompt = tokens.narrow(0, 0, 1).narrow(1, 0, 24);
        REQUIRE(packed->decode_path_applies(prompt, &cp));
        CHECK(torch::allclose(packed->forward(prompt, cp).logits, plain->forward(prompt, cr).logits, 1e-4, 1e-4));
        for (int step = 0; step < 4; ++step) {
          const torch::Tensor next = torch::randint(256, {1, step % 2 ? 3 : 1}, torch::kInt64);
          CHECK(torch::allclose(packed->forward(next, cp).logits, plain->forward(next, cr).logits, 1e-4, 1e-4));
        }
      }
      // With gradients the LibTorch path reads a row-major copy.
      const torch::Tensor x = torch::randn({2, 3, 32});
      const torch::Tensor w = packed->blocks->ptr<BlockImpl>(0)->mlp->gate_up->weight;
      const torch::Tensor reference = plain->blocks->ptr<BlockImpl>(0)->mlp->gate_up->weight;
      CHECK(torch::allclose(apply_linear(x, w, torch::Tensor()),
                            torch::nn::functional::linear(x, reference.to(torch::kFloat32)), 1e-5, 1e-5));
      CHECK_THROWS_WITH(save_checkpoint(dir.str("out"), packed, CheckpointConfig{}),
                        Contains("matrices are packed for decoding"));
    }
}

TEST_CASE("packed matrices live in one 2 MB-aligned huge-page buffer, values unchanged", "[transformer]") {
  // pack_matrices_for_decoding moves the packed matrices into one HugePageBuffer (huge_page_buffer.h), each at
  // a 64-byte boundary in parameter order, when they make at least one 2 MB page; the tensors keep the buffer
  // alive. Mutants tried by hand: no move (each matrix in its own LibTorch allocation) fails the placement
  // checks; a deleter that does not hold the buffer unmaps it under the model (the forward below faults).
  HugePageBuffer probe(3 << 20);
  CHECK(reinterpret_cast<uintptr_t>(probe.data()) % (2 << 20) == 0);
  CHECK(probe.size() == (4 << 20));
  CHECK(static_cast<const char*>(probe.data())[probe.size() - 1] == 0);  // mapped, zeroed, readable to the end
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) CHECK(probe.huge_pages_advised());
  const long long granted = process_huge_page_bytes();  // whole 2 MB pages, or -1 where the kernel does not say
  CHECK((granted == -1 || (granted >= 0 && granted % (2 << 20) == 0)));
  CHECK(process_resident_bytes() > 0);

  REQUIRE(decoding_weights_on_huge_pages());  // SPECULA_HUGE_PAGES unset or on
  TransformerConfig c = small_config(false);
  c.d_model = 256;  // 2.9 MB of bf16 matrices: more than one 2 MB page
  c.d_ff = 512;
  Transformer plain = scaled_model(c, 43);
  store_matrices_as(*plain, torch::kBFloat16);
  torch::Tensor logits;
  {
    Transformer packed = scaled_model(c, 43);
    store_matrices_as(*packed, torch::kBFloat16);
    const int64_t moved = pack_matrices_for_decoding(*packed);
    const char *first = nullptr, *expected = nullptr;
    for (const auto& p : packed->named_parameters()) {
      if (!is_packed_matrix(p.value())) continue;
      const char* at = static_cast<const char*>(p.value().data_ptr());
      if (!first)
        CHECK(reinterpret_cast<uintptr_t>(first = at) % (2 << 20) == 0);
      else
        CHECK(at == expected);
      expected = at + (p.value().nbytes() + 63) / 64 * 64;
      CHECK(torch::equal(row_major_matrix(p.value()), plain->named_parameters()[p.key()]));
    }
    REQUIRE(expected != nullptr);
    CHECK(moved == expected - first);
    CHECK(moved > (2 << 20));
    // The loop's handles are gone: the model's parameters alone keep the buffer mapped.
    c10::InferenceMode inference;
    KVCache cache = packed->new_cache(1);
    logits = packed->forward(torch::tensor(std::vector<int64_t>{3, 1, 4}).unsqueeze(0), cache).logits;
  }
  {
    c10::InferenceMode inference;
    KVCache cache = plain->new_cache(1);
    CHECK(torch::allclose(
        logits, plain->forward(torch::tensor(std::vector<int64_t>{3, 1, 4}).unsqueeze(0), cache).logits, 1e-4, 1e-4));
  }
  // Under one huge page nothing moves: the matrices stay in their own allocations.
  Transformer small = scaled_model(small_config(false), 44);
  CHECK(pack_matrices_for_decoding(*small) == 0);
  CHECK(has_packed_matrices(*small));
  CHECK_THROWS_WITH(move_to_huge_pages({torch::zeros({64, 64}).t()}), Contains("not a contiguous CPU tensor"));
}

TEST_CASE("the causal mask hides later tokens", "[transformer]") {
  Transformer m = scaled_model(small_config(), 3);
  torch::NoGradGuard no_grad;
  std::mt19937 rng(2);
  std::vector<Token> a = random_tokens(rng, 30);
  std::vector<Token> b = a;
  b[20] = (b[20] + 1) % 256;
  const torch::Tensor la = m->forward(ids(a))[0], lb = m->forward(ids(b))[0];
  CHECK(max_abs_diff(la.narrow(0, 0, 20), lb.narrow(0, 0, 20)) < 1e-6);
  CHECK(max_abs_diff(la.narrow(0, 20, 10), lb.narrow(0, 20, 10)) > 100 * kTol);
}

TEST_CASE("a tree forward's logits at every node equal a sequential forward along its path", "[transformer]") {
  Transformer m = scaled_model(small_config(), 11);
  torch::NoGradGuard no_grad;
  std::mt19937 rng(5);
  const std::vector<Token> context = random_tokens(rng, 20);
  // Depth 4, uneven branching, and two identical siblings (nodes 0 and 1 share a token: i.i.d. drafts repeat).
  const std::vector<int32_t> parents = {-1, -1, -1, 0, 0, 1, 3, 3, 5, 6, 2};
  std::vector<Token> tokens = random_tokens(rng, static_cast<int>(parents.size()));
  tokens[1] = tokens[0];
  TokenTree tree;
  for (size_t j = 0; j < parents.size(); ++j) tree.add(tokens[j], parents[j]);

  KVCache cache = m->new_cache();
  m->forward(ids(context), cache);
  const TransformerOutput out = m->forward_tree(ids(tokens)[0], parents, cache);
  REQUIRE(cache.length() == 20 + static_cast<int64_t>(parents.size()));
  for (int32_t j = 0; j < tree.size(); ++j) {
    CAPTURE(j);
    std::vector<Token> seq = context;
    for (Token t : tree.path(j)) seq.push_back(t);
    CHECK(max_abs_diff(out.logits[0][j], reference_next(m, seq)) < kTol);
  }
  // Negative control: node 9's row against the path of its sibling's subtree differs.
  std::vector<Token> other = context;
  for (Token t : tree.path(7)) other.push_back(t);
  CHECK(max_abs_diff(out.logits[0][9], reference_next(m, other)) > 100 * kTol);

  SECTION("tree_layout: positions are cache length + depth - 1, the mask is the ancestor closure") {
    const AttentionLayout layout = tree_layout(20, 0, parents);
    const std::vector<int64_t> want_pos = {20, 20, 20, 21, 21, 21, 22, 22, 22, 23, 21};
    for (size_t j = 0; j < parents.size(); ++j) CHECK(layout.positions[j].item<int64_t>() == want_pos[j]);
    for (size_t j = 0; j < parents.size(); ++j)
      for (size_t k = 0; k < parents.size(); ++k) {
        bool ancestor = false;
        for (int32_t a = static_cast<int32_t>(j); a >= 0; a = parents[a]) ancestor |= a == static_cast<int32_t>(k);
        CHECK((layout.mask[j][20 + k].item<float>() == 0.0f) == ancestor);
      }
    CHECK(layout.mask.narrow(1, 0, 20).abs().max().item<float>() == 0.0f);  // the whole cache is visible
  }
}

TEST_CASE("a mask's compact form gives the mask: on the host and as a step builds it", "[transformer]") {
  // Random trees after a chunk or after cached nodes, up to the window's 128 nodes: mask_from_window and step_mask
  // (what a step graph computes from the uploaded windows) against tree_layout's mask, over more columns than used.
  std::mt19937 rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t nodes = trial < 3 ? std::vector<int64_t>{1, 64, 128}[trial] : rng() % 40;
    std::vector<int32_t> parents;
    for (int64_t j = 0; j < nodes; ++j) parents.push_back(static_cast<int32_t>(rng() % (j + 1)) - 1);
    const int64_t cached = trial % 3 == 1 ? std::min<int64_t>(nodes, rng() % 5) : 0;
    const int64_t chunk = cached > 0 ? 0 : rng() % 4;
    const int64_t cache_len = 7 + cached;
    const AttentionLayout layout = tree_layout(cache_len, chunk, parents, cached);
    const int64_t rows = layout.mask.size(0), used = layout.mask.size(1), columns = used + 5;
    if (rows == 0) continue;
    CAPTURE(trial, nodes, cached, chunk);
    REQUIRE(layout.window.defined());
    const torch::Tensor full =
        torch::cat({layout.mask, torch::full({rows, 5}, -std::numeric_limits<float>::infinity())}, 1);
    CHECK(torch::equal(mask_from_window(layout.window, columns), full));
    CHECK(torch::equal(step_mask(layout.window.unsqueeze(0), torch::arange(columns, torch::kInt64))[0], full));
    CHECK_FALSE(tree_layout(cache_len, chunk, parents, cached, /*full_mask=*/false).mask.defined());
  }
  // A tree of more nodes than the window has no compact form.
  CHECK_FALSE(tree_layout(3, 0, std::vector<int32_t>(129, -1)).window.defined());
}

TEST_CASE("KVCache truncate and compact move slots", "[transformer]") {
  KVCache cache(2, 1, 1, 8, 2);
  const torch::Tensor k = torch::arange(12, torch::kFloat32).view({1, 1, 6, 2});
  for (int layer = 0; layer < 2; ++layer) cache.write(layer, k + 100 * layer, -k);
  cache.advance(6);
  cache.compact({0, 1, 3, 5});  // keep the prefix [0, 2) and slots 3, 5
  REQUIRE(cache.length() == 4);
  const auto [keys, values] = cache.write(1, torch::zeros({1, 1, 0, 2}), torch::zeros({1, 1, 0, 2}));
  const std::vector<float> want = {0, 1, 2, 3, 6, 7, 10, 11};
  for (int i = 0; i < 8; ++i) CHECK(keys.reshape(-1)[i].item<float>() == want[i] + 100);
  CHECK(values.reshape(-1)[7].item<float>() == -11);
  cache.truncate(1);
  CHECK(cache.length() == 1);
  CHECK_THROWS_WITH(cache.truncate(2), Contains("cannot truncate"));
  CHECK_THROWS_WITH(cache.compact({1, 0}), Contains("strictly increasing"));
  cache.reserve(20);
  CHECK(cache.capacity() >= 20);
  CHECK(cache.length() == 1);
}

TEST_CASE("a session reuses its KV cache across calls and matches a full recompute", "[transformer]") {
  TempDir dir("session");
  const std::string path = save_scaled_checkpoint(dir, "model", small_config(), 13);
  const TransformerLanguageModel lm(path);
  LoadedCheckpoint ref = load_checkpoint(path);
  const int32_t V = lm.vocab_size();
  auto session_ptr = lm.new_session();
  auto& session = dynamic_cast<TransformerSession&>(*session_ptr);
  std::mt19937 rng(17);

  // Checks every row of one tree_logits call against full recomputes.
  auto check_call = [&](const std::vector<Token>& context, const TokenTree& tree) {
    std::vector<float> out(static_cast<size_t>(tree.size() + 1) * V);
    session.tree_logits(context, tree, out.data());
    const torch::Tensor got = torch::from_blob(out.data(), {tree.size() + 1, V}).clone();
    std::vector<float> hidden(static_cast<size_t>(tree.size() + 1) * session.hidden_size());
    session.last_hidden(hidden.data());
    const torch::Tensor h = torch::from_blob(hidden.data(), {tree.size() + 1, session.hidden_size()}).clone();
    CHECK(max_abs_diff(got[0], reference_next(ref.model, context)) < kTol);
    CHECK(max_abs_diff(h[0], reference_hidden(ref.model, context)) < kTol);
    for (int32_t j = 0; j < tree.size(); ++j) {
      std::vector<Token> seq = context;
      for (Token t : tree.path(j)) seq.push_back(t);
      CHECK(max_abs_diff(got[j + 1], reference_next(ref.model, seq)) < kTol);
      CHECK(max_abs_diff(h[j + 1], reference_hidden(ref.model, seq)) < kTol);
    }
  };
  auto random_tree = [&](int n) {
    TokenTree t;
    std::uniform_int_distribution<int> tok(0, V - 1);
    for (int j = 0; j < n; ++j) t.add(tok(rng), j == 0 ? -1 : std::uniform_int_distribution<int>(-1, j - 1)(rng));
    return t;
  };

  std::vector<Token> context = random_tokens(rng, 10);
  TokenTree tree = random_tree(6);
  check_call(context, tree);
  REQUIRE(session.stats().rows_run == 10 + 6);

  SECTION("accepting a root-to-node path compacts its keys instead of recomputing") {
    // Verification accepted node 5's path, then emitted one more token.
    std::vector<Token> next = context;
    for (Token t : tree.path(5)) next.push_back(t);
    const int64_t path_len = static_cast<int64_t>(tree.path(5).size());
    next.push_back(7);
    const TokenTree tree2 = random_tree(5);
    check_call(next, tree2);
    CHECK(session.stats().path_nodes_compacted == path_len);
    CHECK(session.stats().rows_run == 16 + 1 + 5);  // only the emitted token and the new tree ran
  }
  SECTION("a drafter growing its tree one depth per call runs only the new nodes") {
    TokenTree grown = tree;
    grown.add(3, 5);
    grown.add(4, 6);
    check_call(context, grown);
    CHECK(session.stats().tree_nodes_reused == 6);
    CHECK(session.stats().rows_run == 16 + 2);
  }
  SECTION("the same context with a different tree drops the old nodes") {
    check_call(context, random_tree(4));
    CHECK(session.stats().rows_run == 16 + 4);
    CHECK(session.stats().tree_nodes_reused == 0);
  }
  SECTION("a context that diverges keeps only the common prefix") {
    std::vector<Token> other(context.begin(), context.begin() + 6);
    other.push_back((context[6] + 1) % V);
    check_call(other, random_tree(3));
    CHECK(session.stats().rows_run == 16 + 1 + 3);
  }
  SECTION("a shorter context re-runs its last token") {
    const std::vector<Token> shorter(context.begin(), context.begin() + 7);
    check_call(shorter, TokenTree{});
    CHECK(session.stats().rows_run == 16 + 1);
  }
  SECTION("a random walk of calls (generator- and drafter-like) always matches") {
    for (int step = 0; step < 40; ++step) {
      CAPTURE(step);
      const int what = std::uniform_int_distribution<int>(0, 4)(rng);
      if (what == 0 && tree.size() > 0) {  // accept a path (+ maybe one token)
        const int node = std::uniform_int_distribution<int>(0, tree.size() - 1)(rng);
        for (Token t : tree.path(node)) context.push_back(t);
        if (rng() % 2) context.push_back(static_cast<Token>(rng() % V));
        tree = random_tree(static_cast<int>(rng() % 7));
      } else if (what == 1) {  // grow the tree
        std::uniform_int_distribution<int> tok(0, V - 1);
        for (int i = 0; i < 3; ++i) tree.add(tok(rng), std::uniform_int_distribution<int>(-1, tree.size() - 1)(rng));
      } else if (what == 2) {  // plain decoding
        context.push_back(static_cast<Token>(rng() % V));
        tree = TokenTree{};
      } else if (what == 3 && context.size() > 3) {  // rewind
        context.resize(context.size() - 1 - rng() % 3);
        tree = random_tree(static_cast<int>(rng() % 5));
      } else {
        tree = random_tree(static_cast<int>(rng() % 8));
      }
      if (context.size() + tree.size() + 1 > 60) context.resize(12);
      check_call(context, tree);
    }
    CHECK(session.stats().path_nodes_compacted > 0);
    CHECK(session.stats().tree_nodes_reused > 0);
  }
}

namespace {

// Steps of several sequences at once (batched lockstep decoding): each step, every sequence asks for its context's row
// and a random tree's; its next context follows a random root path of that tree and adds a token, or now and then
// goes back a few tokens. `batched` runs every step's calls in one batch_tree_logits; `alone` runs the same calls one
// session at a time. Returns how many calls' rows (logits, hidden states, context features) were not bit for bit the
// same; with `tolerance` > 0, how many differed by more than it.
int batched_mismatches(const LanguageModel& batched, const LanguageModel& alone, double tolerance = 0.0,
                       std::vector<TransformerSessionStats>* stats = nullptr) {
  std::mt19937 rng(23);
  const int32_t V = batched.vocab_size();
  // Context lengths 1, 5, 12, 40 (a prompt of more than 32 rows: it runs alone inside the batch) and 20.
  std::vector<std::vector<Token>> contexts;
  for (int n : {1, 5, 12, 40, 20}) contexts.push_back(random_tokens(rng, n, V));
  const size_t B = contexts.size();
  std::vector<std::unique_ptr<ModelSession>> a, b;
  for (size_t i = 0; i < B; ++i) {
    a.push_back(batched.new_session());
    b.push_back(alone.new_session());
  }
  const auto differ = [&](const std::vector<float>& x, const std::vector<float>& y) {
    if (tolerance == 0.0) return std::memcmp(x.data(), y.data(), sizeof(float) * x.size()) != 0;
    for (size_t k = 0; k < x.size(); ++k)
      if (std::abs(x[k] - y[k]) > tolerance) return true;
    return false;
  };
  // The batched calls ask for their last rows only, from a row drawn apart (TreeLogitsCall::first_row).
  std::mt19937 rows_rng(31);
  int mismatches = 0;
  for (int step = 0; step < 8; ++step) {
    std::vector<TokenTree> trees(B);
    std::vector<std::vector<float>> out_a(B), out_b(B);
    std::vector<TreeLogitsCall> calls;
    for (size_t i = 0; i < B; ++i) {
      const int nodes = std::uniform_int_distribution<int>(0, 7)(rng);
      for (int j = 0; j < nodes; ++j)
        trees[i].add(std::uniform_int_distribution<int>(0, V - 1)(rng),
                     j == 0 ? -1 : std::uniform_int_distribution<int>(-1, j - 1)(rng));
      const int first_row = std::uniform_int_distribution<int>(0, nodes)(rows_rng);
      out_a[i].resize(static_cast<size_t>(nodes + 1 - first_row) * V);
      out_b[i].resize(static_cast<size_t>(nodes + 1) * V);
      calls.push_back(TreeLogitsCall{a[i].get(), &contexts[i], &trees[i], out_a[i].data(), false, first_row});
    }
    batched.batch_tree_logits(calls);
    for (size_t i = 0; i < B; ++i) {
      b[i]->tree_logits(contexts[i], trees[i], out_b[i].data());
      out_b[i].erase(out_b[i].begin(), out_b[i].end() - static_cast<std::ptrdiff_t>(out_a[i].size()));
      auto& ta = dynamic_cast<TransformerSession&>(*a[i]);
      auto& tb = dynamic_cast<TransformerSession&>(*b[i]);
      std::vector<float> ha(static_cast<size_t>(trees[i].size() + 1) * ta.hidden_size()), hb(ha.size());
      ta.last_hidden(ha.data());
      tb.last_hidden(hb.data());
      if (differ(out_a[i], out_b[i]) || differ(ha, hb)) ++mismatches;
      // The next context: a root path of the tree (the accepted drafts), then one more token; or a few tokens back.
      std::vector<Token>& c = contexts[i];
      if (std::uniform_int_distribution<int>(0, 4)(rng) == 0 && c.size() > 3) {
        c.resize(c.size() - 2);
        continue;
      }
      int32_t node = -1;
      for (;;) {
        const std::vector<int32_t> kids = trees[i].children(node + 1);
        if (kids.empty() || std::uniform_int_distribution<int>(0, 3)(rng) == 0) break;
        node = kids[std::uniform_int_distribution<size_t>(0, kids.size() - 1)(rng)];
        c.push_back(trees[i].tokens[node]);
      }
      c.push_back(std::uniform_int_distribution<int>(0, V - 1)(rng));
      // The features of the committed context (what a draft head reads) agree too.
      const int64_t n = static_cast<int64_t>(c.size()) - 1;
      const float* fa = a[i]->context_features(c, n);
      const float* fb = b[i]->context_features(c, n);
      if ((fa == nullptr) != (fb == nullptr)) ++mismatches;
      if (fa && fb) {
        const std::vector<float> va(fa, fa + n * ta.hidden_size()), vb(fb, fb + n * tb.hidden_size());
        if (differ(va, vb)) ++mismatches;
      }
    }
  }
  if (stats)
    for (const auto& session : a) stats->push_back(dynamic_cast<TransformerSession&>(*session).stats());
  return mismatches;
}

}  // namespace

TEST_CASE("sessions run together in one forward: each row's bits are its session's alone", "[transformer]") {
  TempDir dir("batched");
  TransformerConfig c = small_config();
  c.max_seq_len = 128;
  c.n_kv_heads = 2;  // grouped-query attention: each sequence's group heads read its own cache
  const std::string path = save_scaled_checkpoint(dir, "model", c, 31);
  const TransformerLanguageModel batched(path), alone(path);
  REQUIRE(batched.batches_forwards());
  CHECK(batched_mismatches(batched, alone) == 0);
  // A vocabulary of no multiple of 16 (264: the bytes and 8 more) keeps a float32 row-major LM head, which
  // LibTorch's GEMM takes above 32 rows: each call's rows go through the head alone, as tree_logits sends them.
  // (A checkpoint's byte tokenizer has 256 tokens: the model is built in memory, as the hf: loader builds one.)
  c.vocab_size = 264;
  LoadedCheckpoint loaded;
  loaded.model = scaled_model(c, 31);
  loaded.config.model = c;
  const TransformerLanguageModel odd_batched("transformer", "odd", loaded, nullptr),
      odd_alone("transformer", "odd", loaded, nullptr);
  CHECK(batched_mismatches(odd_batched, odd_alone) == 0);
  // Every session given the shortest cache's length: rows placed and attending wrongly, caught.
  {
    const ScopedMutant on(Mutant::batch_rows_use_shortest_cache_length);
    CHECK(batched_mismatches(batched, alone) > 0);
  }
  // A session of another model, or one session twice, is refused.
  auto mine = batched.new_session(), other = alone.new_session();
  const std::vector<Token> context = {1, 2};
  const TokenTree none;
  std::vector<float> out(static_cast<size_t>(batched.vocab_size()));
  CHECK_THROWS_WITH(batched.batch_tree_logits({{other.get(), &context, &none, out.data()}}),
                    Contains("a session of another model"));
  CHECK_THROWS_WITH(
      batched.batch_tree_logits({{mine.get(), &context, &none, out.data()}, {mine.get(), &context, &none, out.data()}}),
      Contains("one session twice"));
  // Rows asked from past the call's last row are refused.
  CHECK_THROWS_WITH(batched.batch_tree_logits({{mine.get(), &context, &none, out.data(), false, 1}}),
                    Contains("rows asked from 1 of a call of 1 rows"));
}

// LibTorch's path (a model on a GPU; here on the CPU) runs a batch's calls in one forward two ways. With step graphs
// (on by default there), one static-shape step over the sessions' caches pooled as the batch rows of one tensor
// (cache_pool.h): padded to the widest call, each row over a bucket of the longest cache with its own sequence's slots
// visible. Without, every linear layer once over the batch's rows and each sequence's attention on its own cache. Its
// GEMMs sum in another order for another number of rows, so each row is held to the file's tolerance against its
// session's alone.
TEST_CASE("sessions run together on LibTorch's path, pooled or not: each row its session's alone", "[transformer]") {
  TempDir dir("pooled");
  TransformerConfig c = small_config();
  c.max_seq_len = 256;
  c.n_kv_heads = 2;
  const std::string path = save_scaled_checkpoint(dir, "model", c, 31);
  TransformerLanguageModel pooled(path, "auto", "libtorch"), alone(path, "auto", "libtorch"),
      per_sequence(path, "auto", "libtorch");
  REQUIRE(pooled.step_graphs());
  alone.set_step_graphs(false);
  per_sequence.set_step_graphs(false);
  CHECK(batched_mismatches(per_sequence, TransformerLanguageModel(path), kTol) == 0);  // against the CPU's step
  std::vector<TransformerSessionStats> stats;
  CHECK(batched_mismatches(pooled, alone, kTol, &stats) == 0);
  for (const TransformerSessionStats& s : stats) CHECK(s.pooled_step_calls == 8);  // every step of every session
  // Wrong slots for all but the shortest cache, or padding that overwrites a cached slot: caught.
  for (Mutant m : {Mutant::batch_rows_use_shortest_cache_length, Mutant::pool_padding_writes_cached_slot}) {
    const ScopedMutant on(m);
    CHECK(batched_mismatches(pooled, alone, kTol) > 0);
  }

  // A batch whose sequences finish: 4 sessions, the first step with a prompt of 130 rows (more than a pooled step
  // takes: each sequence attends alone), then pooled over 256 columns (the longest cache passes 128; the others see
  // only their own slots); then 3 (still more than half the pool: it is kept), then 2 (a new pool), then 1 (its own
  // step graph); every row against the same calls alone.
  std::mt19937 rng(5);
  std::vector<std::vector<Token>> contexts;
  std::vector<std::unique_ptr<ModelSession>> a, b;
  for (int n : {3, 9, 1, 130}) {
    contexts.push_back(random_tokens(rng, n, c.vocab_size));
    a.push_back(pooled.new_session());
    b.push_back(alone.new_session());
  }
  const int32_t V = c.vocab_size;
  for (size_t active : {4, 4, 3, 3, 2, 2, 1}) {
    std::vector<TokenTree> trees(active);
    std::vector<std::vector<float>> out_a(active), out_b(active);
    std::vector<TreeLogitsCall> calls;
    for (size_t i = 0; i < active; ++i) {
      for (size_t j = 0; j < i + 1; ++j) trees[i].add(random_tokens(rng, 1, V)[0], static_cast<int32_t>(j) - 1);
      out_a[i].resize(static_cast<size_t>(trees[i].size() + 1) * V);
      out_b[i].resize(out_a[i].size());
      calls.push_back(TreeLogitsCall{a[i].get(), &contexts[i], &trees[i], out_a[i].data()});
    }
    pooled.batch_tree_logits(calls);
    for (size_t i = 0; i < active; ++i) {
      b[i]->tree_logits(contexts[i], trees[i], out_b[i].data());
      const int64_t n = static_cast<int64_t>(out_a[i].size());
      CHECK(max_abs_diff(torch::from_blob(out_a[i].data(), {n}), torch::from_blob(out_b[i].data(), {n})) < kTol);
      contexts[i].push_back(trees[i].tokens[0]);  // the first draft accepted, then a bonus token
      contexts[i].push_back(random_tokens(rng, 1, V)[0]);
    }
  }
  const auto stats_of = [&](size_t i) { return dynamic_cast<TransformerSession&>(*a[i]).stats(); };
  CHECK(stats_of(0).pooled_step_calls == 5);
  CHECK(stats_of(0).pools_joined == 2);
  CHECK(stats_of(0).step_graph_calls == 1);
  CHECK(stats_of(2).pooled_step_calls == 3);
  CHECK(stats_of(2).pools_joined == 1);
  CHECK(stats_of(3).pooled_step_calls == 1);
}

TEST_CASE("a cache pool refuses what its step cannot run", "[transformer]") {
  Transformer model = scaled_model(small_config(), 5);
  model->set_decode_step(false);
  c10::InferenceMode inference;
  KVCache x = model->new_cache(1), y = model->new_cache(1), outside = model->new_cache(1);
  x.advance(3);
  CHECK_THROWS_WITH(CachePool(model, 64, {&x, &x}, false), Contains("cache 0 given twice"));
  CHECK_THROWS_WITH(CachePool(model, 2, {&y, &x}, false), Contains("cache 1 holds 3 slots, a row 2"));
  CachePool pool(model, 64, {&x, &y}, false);
  CHECK(pool.holds(x));
  CHECK(x.length() == 3);
  CHECK_FALSE(pool.holds(outside));
  const torch::Tensor one = torch::tensor({7}, torch::kInt64);
  const RowSegment in_x{one, torch::tensor({3}, torch::kInt64), torch::Tensor(), &x, torch::Tensor()};
  CHECK_THROWS_WITH(
      pool.run({RowSegment{one, torch::tensor({0}, torch::kInt64), torch::Tensor(), &outside, torch::Tensor()}}),
      Contains("segment 0's cache is not in the pool"));
  CHECK_THROWS_WITH(pool.run({in_x, in_x}), Contains("segment 1's cache has rows in the step already"));
  const StepOutputs out = pool.run({in_x});  // y has no rows: padding
  CHECK(out.logits.size(0) == 1);
  CHECK(x.length() == 4);
  CHECK(pool.stats().padding_rows == 1);
  x.reserve(x.capacity() + 1);  // grown past its row: it moves out of the pool
  CHECK_FALSE(pool.holds(x));
  CHECK(x.length() == 4);
  const torch::Tensor slot3 = x.copy_prefix(4).first.narrow(3, 3, 1);
  CachePool bigger(model, 80, {&x}, false);  // and into another, its slots with it
  CHECK(bigger.holds(x));
  CHECK(torch::equal(x.copy_prefix(4).first.narrow(3, 3, 1), slot3));
  pool.release(y);
  CHECK_FALSE(pool.holds(y));
  Transformer decoding = scaled_model(small_config(), 5);
  KVCache z = decoding->new_cache(1);
  CHECK_THROWS_WITH(CachePool(decoding, 64, {&z}, false), Contains("the model is on the decoding step"));
}

namespace {

// A speculative run's calls on one session of `lm`, every row checked against `ref`'s full recompute: a prompt with a
// tree, accepted paths and a bonus token, grown trees (the old nodes reused), rewinds, and last a tree wider than the
// cache's slots (it grows, and a step graph over it must be rebuilt). Returns the rows beyond kTol; `stats`, the
// session's counters.
int64_t run_mismatches(const TransformerLanguageModel& lm, Transformer& ref, uint64_t seed,
                       TransformerSessionStats* stats = nullptr, size_t context_length = 40) {
  const int32_t V = lm.vocab_size();
  auto session = lm.new_session();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(0, V - 1);
  int64_t mismatches = 0;
  const auto call = [&](const std::vector<Token>& context, const TokenTree& tree) {
    std::vector<float> out(static_cast<size_t>(tree.size() + 1) * V);
    session->tree_logits(context, tree, out.data());
    const torch::Tensor got = torch::from_blob(out.data(), {tree.size() + 1, V});
    mismatches += max_abs_diff(got[0], reference_next(ref, context)) >= kTol;
    for (int32_t j = 0; j < tree.size(); ++j) {
      std::vector<Token> path = context;
      for (Token t : tree.path(j)) path.push_back(t);
      mismatches += max_abs_diff(got[j + 1], reference_next(ref, path)) >= kTol;
    }
  };
  const auto grow = [&](TokenTree tree, int nodes) {
    for (int j = 0; j < nodes; ++j) {
      const int n = tree.size();
      tree.add(token(rng), n == 0 ? -1 : std::uniform_int_distribution<int>(-1, n - 1)(rng));
    }
    return tree;
  };
  std::vector<Token> context = random_tokens(rng, 10, V);
  for (int step = 0; context.size() < context_length; ++step) {
    TokenTree tree = grow(TokenTree{}, std::uniform_int_distribution<int>(1, 8)(rng));
    call(context, tree);
    if (step % 3 == 1) {  // a drafter growing its tree one depth per call: the old nodes are reused
      tree = grow(tree, 3);
      call(context, tree);
    }
    if (step % 5 == 4) {  // a rewind
      context.resize(context.size() - 3);
      continue;
    }
    const int accepted = std::uniform_int_distribution<int>(0, tree.size() - 1)(rng);
    for (Token t : tree.path(accepted)) context.push_back(t);
    context.push_back(token(rng));  // the bonus token
  }
  TokenTree wide;  // 24 children of the root: context + 24 slots pass the 64 the cache holds
  for (int j = 0; j < 24; ++j) wide.add(token(rng), -1);
  call(context, wide);
  call(context, grow(wide, 2));
  if (stats) *stats = dynamic_cast<TransformerSession&>(*session).stats();
  return mismatches;
}

}  // namespace

// Step graphs (step_graph.h) compute a call with static shapes, attending over the cache's whole capacity with the
// unused slots masked: on the CPU they run eagerly, the computation a GPU captures and replays.
TEST_CASE("static-shape steps (what CUDA graphs replay) match a full recompute across a run's calls", "[transformer]") {
  TempDir dir("step-graphs");
  TransformerConfig c = small_config();
  c.n_kv_heads = 2;
  const std::string path = save_scaled_checkpoint(dir, "model", c, 41);
  LoadedCheckpoint ref = load_checkpoint(path);
  TransformerLanguageModel graphs(path, "auto", "libtorch"), dynamic(path, "auto", "libtorch");
  REQUIRE(graphs.step_graphs());               // on by default on LibTorch's path
  CHECK_FALSE(graphs.captures_step_graphs());  // nothing to capture without a GPU
  dynamic.set_step_graphs(false);
  CHECK(graphs.session_bytes() > dynamic.session_bytes());  // the graphs' memory is bounded with the session's
  TransformerSessionStats run_stats;
  CHECK(run_mismatches(graphs, ref.model, 43, &run_stats) == 0);
  CHECK(run_stats.step_graph_calls > 0);
  CHECK(run_stats.step_graphs_dropped > 0);  // the wide tree grew the cache: its graphs were rebuilt
  CHECK(run_mismatches(dynamic, ref.model, 43) == 0);
  // The calls went through step graphs (at most 8 shapes a session, rebuilt when the cache grew), or not at all.
  const auto stats = [](const TransformerLanguageModel& lm) {
    auto session = lm.new_session();
    auto& s = dynamic_cast<TransformerSession&>(*session);
    std::vector<float> out(static_cast<size_t>(lm.vocab_size()) * 4);
    TokenTree tree;
    for (int j = 0; j < 3; ++j) tree.add(7 + j, j - 1);
    s.tree_logits({1, 2, 3}, tree, out.data());
    s.tree_logits({1, 2, 3, 7, 8, 4}, tree, out.data());  // 7, 8 accepted, then the bonus token 4
    s.tree_logits({1, 2, 3, 7, 8, 4, 7, 5}, tree, out.data());
    return s.stats();
  };
  const TransformerSessionStats on = stats(graphs), off = stats(dynamic);
  CHECK(on.step_graph_calls == 3);
  CHECK(on.step_graphs_built == 2);  // 6 rows (prompt + tree), then 4 (bonus + tree) twice, all in 64 columns
  CHECK(off.step_graph_calls == 0);
  CHECK(dynamic.step_graph_tally().runs == 0);
  const StepGraphTally before = graphs.step_graph_tally();
  {  // Trees of 1..12 nodes after one context: 11 shapes (4 rows twice), the least recently used 3 making room.
    auto session = graphs.new_session();
    auto& s = dynamic_cast<TransformerSession&>(*session);
    std::vector<float> out(static_cast<size_t>(graphs.vocab_size()) * 14);
    for (int n = 1; n <= 12; ++n) {
      TokenTree tree;
      for (int j = 0; j < n; ++j) tree.add(100 + n + j, j - 1);
      s.tree_logits({1, 2, 3}, tree, out.data());
    }
    CHECK(s.stats().step_graph_calls == 12);
    CHECK(s.stats().step_graphs_built == 11);
    CHECK(s.stats().step_graphs_evicted == 3);
    // Least recently used, not first made: 5 rows used again, then a new shape evicts 6 rows', and 5 rows' is kept.
    const auto again = [&](int n) {
      TokenTree tree;
      for (int j = 0; j < n; ++j) tree.add(100 + n + j, j - 1);
      s.tree_logits({1, 2, 3}, tree, out.data());
    };
    again(5);
    again(13);
    again(5);
    CHECK(s.stats().step_graphs_built == 12);
    CHECK(s.stats().step_graphs_evicted == 4);
  }
  // The model counts every session's step graphs (LanguageModel::step_graph_tally); nothing replays without a GPU.
  const StepGraphTally after = graphs.step_graph_tally();
  CHECK(after.runs - before.runs == 15);
  CHECK(after.built - before.built == 12);
  CHECK(after.evicted - before.evicted == 4);
  CHECK(after.replays == 0);
  {  // A longer model: the steps' columns move from the 128 bucket to 256 as the context passes them.
    TransformerConfig long_config = small_config();
    long_config.max_seq_len = 512;
    const std::string long_path = save_scaled_checkpoint(dir, "long", long_config, 47);
    LoadedCheckpoint long_ref = load_checkpoint(long_path);
    const TransformerLanguageModel long_graphs(long_path, "auto", "libtorch");
    TransformerSessionStats long_stats;
    CHECK(run_mismatches(long_graphs, long_ref.model, 53, &long_stats, 180) == 0);
    CHECK(long_stats.step_graph_calls > 0);
    CHECK(step_columns(170, 8, 512) == 256);
  }
  // Unused slots left visible: caught.
  {
    const ScopedMutant on_mutant(Mutant::step_graph_sees_unused_slots);
    CHECK(run_mismatches(graphs, ref.model, 43) > 0);
  }
  // SPECULA_STEP_GRAPHS: off keeps the dynamic path; anything but on/off is refused before the weights are read.
  ::setenv("SPECULA_STEP_GRAPHS", "off", 1);
  CHECK_FALSE(TransformerLanguageModel(path, "auto", "libtorch").step_graphs());
  ::setenv("SPECULA_STEP_GRAPHS", "maybe", 1);
  CHECK_THROWS_WITH(TransformerLanguageModel(path + "-missing", "auto", "libtorch"),
                    Contains("SPECULA_STEP_GRAPHS must be on or off, got 'maybe'"));
  // On the CPU's decoding step too: a typo is not silently ignored.
  CHECK_THROWS_WITH(TransformerLanguageModel(path + "-missing"), Contains("SPECULA_STEP_GRAPHS must be on or off"));
  ::unsetenv("SPECULA_STEP_GRAPHS");
  // The decoding step has no static form.
  TransformerLanguageModel decoding(path);
  CHECK_FALSE(decoding.step_graphs());
  CHECK_THROWS_WITH(decoding.set_step_graphs(true), Contains("the model is on the CPU's decoding step"));
}

TEST_CASE("a step graph refuses what it cannot replay", "[transformer]") {
  Transformer model = scaled_model(small_config(), 5);
  model->set_decode_step(false);
  c10::InferenceMode inference;
  KVCache cache = model->new_cache(1);  // 64 slots
  CHECK(step_columns(0, 2, 64) == 64);  // at least 128, at most the capacity
  CHECK(step_columns(200, 2, 4096) == 256);
  CHECK(step_columns(126, 2, 4096) == 128);
  CHECK(step_columns(127, 2, 4096) == 256);
  CHECK_THROWS_WITH(StepGraph(model, cache, 2, 64, /*capture=*/true), Contains("capturing needs a CUDA LibTorch"));
  CHECK_THROWS_WITH(StepGraph(model, cache, 2, 65, false), Contains("65 columns for 2 rows in a cache of 64 slots"));
  StepGraph step(model, cache, 2, 64, false);
  const torch::Tensor tokens = torch::tensor({3, 4}, torch::kInt64), positions = torch::tensor({0, 1}, torch::kInt64);
  const AttentionLayout layout = causal_layout(0, 2);
  const StepOutputs out = step.run(tokens, positions, layout.window);
  CHECK(out.logits.size(0) == 2);
  CHECK(out.logits.size(1) == 256);
  CHECK(max_abs_diff(out.logits[1], model->forward(ids({3, 4}))[0][1]) < kTol);
  CHECK_THROWS_WITH(step.run(torch::tensor({3}, torch::kInt64), positions, layout.window),
                    Contains("1 tokens and 2 positions for a step of 2 rows"));
  CHECK_THROWS_WITH(step.run(tokens, positions, causal_layout(0, 3).window), Contains("a window of [3, 4] for 2 rows"));
  CHECK_THROWS_WITH(step.run(tokens, positions, causal_layout(1, 2).window),
                    Contains("window row 0 is over 3 columns, the step's rows over 2"));
  cache.reserve(cache.capacity() + 1);  // the storage moves
  CHECK(step.stale());
  CHECK_THROWS_WITH(step.run(tokens, positions, layout.window), Contains("the cache was reallocated"));
  Transformer decoding = scaled_model(small_config(), 5);
  KVCache other = decoding->new_cache(1);
  CHECK_THROWS_WITH(StepGraph(decoding, other, 1, 64, false), Contains("the model is on the decoding step"));
  // A step over fewer columns than the rows need is refused.
  StepGraph narrow_step(model, cache, 2, 2, false);
  cache.advance(1);
  CHECK_THROWS_WITH(narrow_step.run(tokens, positions, causal_layout(1, 2).window),
                    Contains("1 cached + 2 rows exceed the step's 2 columns"));
}

TEST_CASE("context features after a rewind are the new context's, not a stale copy of the old one's", "[transformer]") {
  TempDir dir("features-rewind");
  const std::string path = save_scaled_checkpoint(dir, "model", small_config(), 37);
  const TransformerLanguageModel lm(path);
  const int32_t V = lm.vocab_size();
  std::mt19937 rng(9);
  const std::vector<Token> a = random_tokens(rng, 14);
  std::vector<Token> b(a.begin(), a.begin() + 6);  // the same first 6 tokens, then others
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<Token>((a[6 + i] + 1 + i) % V));
  const auto features = [&](ModelSession& s, const std::vector<Token>& context) {
    std::vector<float> row(static_cast<size_t>(V));
    s.next_logits(context, row.data());
    const int64_t n = static_cast<int64_t>(context.size());
    const float* f = s.context_features(context, n);
    REQUIRE(f != nullptr);
    return std::vector<float>(f, f + n * s.feature_size());
  };
  auto reused = lm.new_session();
  features(*reused, a);  // read once: its host copy holds a's rows
  auto fresh = lm.new_session();
  CHECK(max_abs_diff(torch::tensor(features(*reused, b)), torch::tensor(features(*fresh, b))) < kTol);

  // A rewind the prompt cache serves: another session stores prompt p; `reused`, whose first token differs, starts
  // over and loads p's rows from the cache instead of running them.
  std::vector<Token> p = random_tokens(rng, 9);
  p[0] = static_cast<Token>((b[0] + 1) % V);
  auto storing = lm.new_session();
  const std::vector<float> expected = features(*storing, p);
  CHECK(features(*reused, p) == expected);
  CHECK(dynamic_cast<TransformerSession&>(*reused).stats().prompt_cache_hits == 1);
}

TEST_CASE("a staged step of two sequences gives the rows picked, in the order picked", "[transformer]") {
  Transformer model = scaled_model(small_config(), 5);
  model->set_decode_step(false);
  c10::InferenceMode inference;
  KVCache cache = model->new_cache(2);
  StepGraph step(model, cache, 2, 64, false);
  const int64_t tokens[2][2] = {{3, 4}, {7, 9}};
  const torch::Tensor causal = causal_layout(0, 2).window.contiguous();
  const StagedInputs in = step.stage();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t r = 0; r < 2; ++r) {
      const int64_t i = b * 2 + r;
      in.tokens[i] = tokens[b][r];
      in.positions[i] = r;
      in.slots[i] = r;
      std::copy_n(causal.data_ptr<int64_t>() + 4 * r, 4, in.window + 4 * i);
    }
  in.picked[0] = 3;  // sequence 1's second row, then sequence 0's first
  in.picked[1] = 0;
  const StepOutputs out = step.run_staged(2);
  REQUIRE(out.logits.size(0) == 2);
  CHECK(max_abs_diff(out.logits[0], model->forward(ids({7, 9}))[0][1]) < kTol);
  CHECK(max_abs_diff(out.logits[1], model->forward(ids({3, 4}))[0][0]) < kTol);
  CHECK(step.run_staged().logits.size(0) == 4);  // nothing picked: every row
  CHECK_THROWS_WITH(step.run_staged(5), Contains("5 rows picked of a step of 4"));
}

TEST_CASE("a fresh session given the model's last prompt copies its run: the same bits as running it",
          "[transformer]") {
  TempDir dir("prompt-cache");
  const std::string path = save_scaled_checkpoint(dir, "model", small_config(), 29);
  const TransformerLanguageModel lm(path), uncached(path);  // `uncached`: its own (empty) prompt cache
  const int32_t V = lm.vocab_size();
  std::mt19937 rng(5);
  const std::vector<Token> prompt = random_tokens(rng, 12);
  TokenTree tree;
  for (int j = 0; j < 5; ++j) tree.add(static_cast<Token>(rng() % V), j == 0 ? -1 : j / 2 - 1);

  // A generator-like walk: the prompt alone, a tree, its node 3's path accepted plus a token, a token; every
  // output, the hidden rows and the context features (what Medusa and EAGLE read), as bits.
  auto walk = [&](ModelSession& s) {
    auto& session = dynamic_cast<TransformerSession&>(s);
    std::vector<float> bits(V);
    session.next_logits(prompt, bits.data());
    std::vector<float> rows(static_cast<size_t>(tree.size() + 1) * V);
    session.tree_logits(prompt, tree, rows.data());
    bits.insert(bits.end(), rows.begin(), rows.end());
    std::vector<float> hidden(static_cast<size_t>(tree.size() + 1) * session.hidden_size());
    session.last_hidden(hidden.data());
    bits.insert(bits.end(), hidden.begin(), hidden.end());
    std::vector<Token> context = prompt;
    for (Token t : tree.path(3)) context.push_back(t);
    context.push_back(11);
    std::vector<float> row(V);
    session.next_logits(context, row.data());
    bits.insert(bits.end(), row.begin(), row.end());
    const float* features = session.context_features(context, static_cast<int64_t>(context.size()));
    REQUIRE(features != nullptr);
    bits.insert(bits.end(), features, features + context.size() * session.feature_size());
    return bits;
  };
  const auto hits = [](const std::unique_ptr<ModelSession>& s) {
    return dynamic_cast<TransformerSession&>(*s).stats().prompt_cache_hits;
  };

  auto first = lm.new_session();
  const std::vector<float> expected = walk(*first);
  CHECK(hits(first) == 0);
  auto second = lm.new_session();
  const std::vector<float> copied = walk(*second);
  CHECK(hits(second) == 1);
  CHECK(dynamic_cast<TransformerSession&>(*second).stats().rows_run ==
        dynamic_cast<TransformerSession&>(*first).stats().rows_run - static_cast<int64_t>(prompt.size()));
  auto elsewhere = uncached.new_session();
  const std::vector<float> recomputed = walk(*elsewhere);
  CHECK(hits(elsewhere) == 0);
  REQUIRE(copied.size() == expected.size());
  CHECK(std::memcmp(copied.data(), expected.data(), sizeof(float) * expected.size()) == 0);
  CHECK(std::memcmp(recomputed.data(), expected.data(), sizeof(float) * expected.size()) == 0);

  SECTION("another prompt, or a first call that is not the prompt alone, runs it") {
    std::vector<float> out(static_cast<size_t>(tree.size() + 1) * V);
    auto with_tree = lm.new_session();
    with_tree->tree_logits(prompt, tree, out.data());
    CHECK(hits(with_tree) == 0);
    std::vector<Token> other = prompt;
    other.back() = (other.back() + 1) % V;
    auto other_prompt = lm.new_session();
    other_prompt->next_logits(other, out.data());
    CHECK(hits(other_prompt) == 0);
    auto again = lm.new_session();  // the cache now holds `other`
    again->next_logits(prompt, out.data());
    CHECK(hits(again) == 0);
  }
}

TEST_CASE("speculation on a transformer target drops a rejected draft's keys: greedy output is greedy decoding's",
          "[transformer]") {
  // The table models of the exact-law tests have no cache, so only a transformer target can show a session that
  // keeps a rejected draft's keys and values: every later position would attend to tokens that were never
  // emitted. The synthetic drafter at T = 0 proposes the target's argmax with probability 0.6 and its argmin
  // otherwise, so steps accept some drafts and reject others.
  TempDir dir("rejections");
  const auto target =
      std::make_shared<TransformerLanguageModel>(save_scaled_checkpoint(dir, "model", small_config(), 13));
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 40;
  const std::vector<Token> prompt = {3, 141, 59, 26, 53};
  GenerationMetrics m;
  const std::vector<Token> expected = Generator(target, greedy, nullptr, ar).generate(prompt, 0, m).tokens;
  const auto drafter = std::make_shared<SyntheticDrafterFactory>(target, greedy, 0.6);
  GenerationConfig chain = ar, tree = ar;
  chain.method = VerifyMethod::chain;
  chain.num_draft_tokens = 3;
  tree.method = VerifyMethod::tree;
  tree.tree_shape = {2, 2};
  for (const GenerationConfig& config : {chain, tree}) {
    INFO(verify_method_name(*config.method));
    const Generator speculative(target, greedy, drafter, config);
    GenerationMetrics metrics;
    for (uint64_t sequence = 0; sequence < 4; ++sequence)
      CHECK(speculative.generate(prompt, sequence, metrics).tokens == expected);
    CHECK(metrics.accepted > 0);
    CHECK(metrics.accepted < metrics.proposed);  // rejections happened
    const ScopedMutant on(Mutant::kv_cache_keeps_rejected_drafts);
    bool caught = false;
    for (uint64_t sequence = 0; sequence < 4 && !caught; ++sequence)
      caught = speculative.generate(prompt, sequence, metrics).tokens != expected;
    CHECK(caught);
  }
}

TEST_CASE("sessions report bad inputs clearly", "[transformer]") {
  TempDir dir("session-errors");
  const TransformerLanguageModel lm(save_scaled_checkpoint(dir, "model", small_config(), 1));
  auto session = lm.new_session();
  std::vector<float> out(256 * 40);
  CHECK_THROWS_WITH(session->next_logits({}, out.data()), Contains("at least one context token"));
  CHECK_THROWS_WITH(session->next_logits({1, 300}, out.data()), Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(session->next_logits(std::vector<Token>(65, 1), out.data()), Contains("max_seq_len 64"));
  CHECK_THAT(lm.description(), Contains("2 layers, d=32"));
}

TEST_CASE("checkpoint save -> load round trip", "[transformer]") {
  TempDir dir("roundtrip");
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    Transformer m = scaled_model(small_config(tied), 21);
    CheckpointConfig cc;
    cc.training = {{"note", "test"}};
    save_checkpoint(dir.str("fp32"), m, cc);
    LoadedCheckpoint back = load_checkpoint(dir.str("fp32"));
    CHECK(back.config.model.tie_embeddings == tied);
    CHECK(back.config.training["note"] == "test");
    const auto a = m->named_parameters(), b = back.model->named_parameters();
    REQUIRE(a.size() == b.size());
    for (const auto& p : a) CHECK(torch::equal(p.value(), b[p.key()]));
    torch::NoGradGuard no_grad;
    const torch::Tensor x = torch::randint(256, {2, 16}, torch::kInt64);
    CHECK(torch::equal(m->forward(x), back.model->forward(x)));

    cc.weights_dtype = "float16";
    save_checkpoint(dir.str("fp16"), m, cc);
    LoadedCheckpoint half = load_checkpoint(dir.str("fp16"));
    for (const auto& p : a)
      CHECK(torch::equal(p.value().to(torch::kFloat16).to(torch::kFloat32), half.model->named_parameters()[p.key()]));
  }
}

TEST_CASE("a float32 weight that overflows the kept dtype, or a NaN in the file, is an error naming it",
          "[transformer]") {
  TempDir dir("overflow");
  Transformer m = scaled_model(small_config(), 37);
  {
    torch::NoGradGuard no_grad;
    m->blocks->ptr<BlockImpl>(1)->mlp->down->weight[0][0] = 1e6f;  // beyond float16's 65504, within bfloat16
  }
  save_checkpoint(dir.str("big"), m, CheckpointConfig{});
  CHECK_THROWS_WITH(load_checkpoint(dir.str("big"), "float16"),
                    Contains("'blocks.1.mlp.down.weight' overflows float16, the dtype it is kept in"));
  CHECK_NOTHROW(load_checkpoint(dir.str("big"), "bfloat16"));
  {
    torch::NoGradGuard no_grad;
    m->blocks->ptr<BlockImpl>(0)->attn->qkv->weight[1][2] = std::nanf("");
  }
  save_checkpoint(dir.str("nan"), m, CheckpointConfig{});
  for (const char* dtype : {"float32", "bfloat16"})  // the file's NaN is named as the file's, whatever it is kept in
    CHECK_THROWS_WITH(load_checkpoint(dir.str("nan"), dtype), Contains("'blocks.0.attn.qkv.weight' holds NaN or inf"));
}

TEST_CASE("16-bit checkpoints serve their matrices as stored, with the logits of their float32 widening",
          "[transformer]") {
  // bf16/fp16 matrices stay 16-bit in memory (half the resident bytes) and every logit, through the decoding
  // step (few rows) and the LibTorch path (a long prompt), equals the float32 model holding the same rounded
  // weights: the independent reference is LibTorch's own widening and its float32 forward.
  TempDir dir("half-serving");
  for (const std::string dtype : {"bfloat16", "float16"}) {
    CAPTURE(dtype);
    Transformer m = scaled_model(small_config(), 31);
    CheckpointConfig cc;
    cc.weights_dtype = dtype;
    save_checkpoint(dir.str(dtype), m, cc);
    LoadedCheckpoint kept = load_checkpoint(dir.str(dtype), "auto"), wide = load_checkpoint(dir.str(dtype));
    const torch::ScalarType expected = dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat16;
    CHECK(kept.model->embedding->weight.scalar_type() == expected);
    CHECK(kept.model->final_norm->weight.scalar_type() == torch::kFloat32);
    CHECK(wide.model->embedding->weight.scalar_type() == torch::kFloat32);
    const int64_t params = kept.model->config().parameter_count();
    CHECK(resident_bytes(*kept.model) < resident_bytes(*wide.model) * 0.6);
    CHECK(resident_bytes(*kept.model) >= params * 2);

    c10::InferenceMode inference;
    // Through the decoding step (<= 32 rows): the same bits.
    const torch::Tensor prompt = torch::randint(256, {1, 24}, torch::kInt64);
    KVCache ck = kept.model->new_cache(1), cw = wide.model->new_cache(1);
    CHECK(torch::equal(kept.model->forward(prompt, ck).logits, wide.model->forward(prompt, cw).logits));
    for (int step = 0; step < 6; ++step) {  // decoding steps of 1 and 3 rows
      const torch::Tensor next = torch::randint(256, {1, step % 2 ? 3 : 1}, torch::kInt64);
      CHECK(torch::equal(kept.model->forward(next, ck).logits, wide.model->forward(next, cw).logits));
    }
    // A long prompt: the 16-bit model stays in the kernel (32 rows at a time), the float32 one uses LibTorch's
    // gemm; the same math in another summation order.
    const torch::Tensor long_prompt = torch::randint(256, {1, 50}, torch::kInt64);
    KVCache lk = kept.model->new_cache(1), lw = wide.model->new_cache(1);
    CHECK(torch::allclose(kept.model->forward(long_prompt, lk).logits, wide.model->forward(long_prompt, lw).logits,
                          1e-4, 1e-4));
    // Asking for another dtype at load converts: fp16 -> bf16 rounds away 3 mantissa bits, so the logits move
    // (the equality above can fail).
    if (dtype == "float16") {
      const torch::Tensor prompt = torch::randint(256, {1, 24}, torch::kInt64);
      LoadedCheckpoint narrowed = load_checkpoint(dir.str(dtype), "bfloat16");
      KVCache cn = narrowed.model->new_cache(1), cw2 = wide.model->new_cache(1);
      CHECK_FALSE(torch::equal(narrowed.model->forward(prompt, cn).logits, wide.model->forward(prompt, cw2).logits));
    }
    // The parameter, not a flag: the command line names its --weights-dtype, an experiment its key.
    CHECK_THROWS_WITH(load_checkpoint(dir.str(dtype), "half"), Contains("weights_dtype: 'half' is not float32"));
    CHECK_THROWS_AS(load_checkpoint(dir.str(dtype), "half"), ParameterError);
  }
}

TEST_CASE("a corrupt or missing checkpoint gives a clear error", "[transformer]") {
  TempDir dir("corrupt");
  const std::string good = save_scaled_checkpoint(dir, "good", small_config(), 2);
  auto copy = [&](const std::string& name) {
    fs::copy(good, dir.str(name), fs::copy_options::recursive);
    return dir.str(name);
  };
  auto write = [](const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; };
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };

  CHECK_THROWS_WITH(load_checkpoint(dir.str("nope")), Contains("no such folder"));
  CHECK_THROWS_WITH(TransformerLanguageModel(dir.str("nope")), Contains("no such folder"));
  CHECK_THROWS_WITH(load_language_model("transformer:" + dir.str("nope"), "target"), Contains("no such folder"));
  CHECK_THROWS_WITH(load_language_model("transformer:", "target"), Contains("needs a checkpoint folder"));
  {
    const std::string p = copy("no-config");
    fs::remove(p + "/config.json");
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("config.json: missing checkpoint config"));
    fs::create_directory(p + "/config.json");  // opens as a stream that reads nothing: named for what it is
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("config.json: is a folder, not a file"));
  }
  {
    const std::string p = copy("bad-json");
    write(p + "/config.json", "{\"format\": ");
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("config.json: malformed JSON"));
  }
  {
    const std::string p = copy("no-weights");
    fs::remove(p + "/weights.pt");
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt: missing weights file"));
    fs::create_directories(p + "/weights.pt");  // a folder where the file should be: named as one
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt: is a folder, not the weights file"));
  }
  // The config records the weights' size and CRC-32; one flipped bit is refused before the archive is read.
  auto without_checksum = [&](const std::string& p) {
    nlohmann::json cfg = nlohmann::json::parse(read(p + "/config.json"));
    REQUIRE(cfg["weights"].contains("crc32"));
    cfg["weights"].erase("bytes");
    cfg["weights"].erase("crc32");
    write(p + "/config.json", cfg.dump(2));
  };
  {
    const std::string p = copy("flipped-bit");
    std::string bytes = read(p + "/weights.pt");
    bytes[bytes.size() / 2] ^= 0x10;
    write(p + "/weights.pt", bytes);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt: ") && Contains("with crc32") &&
                                              Contains("config.json records") && Contains("damaged or was replaced"));
  }
  {
    const std::string p = copy("before-checksums");  // a config from before checksums: loads unchecked
    without_checksum(p);
    CHECK_NOTHROW(load_checkpoint(p));
  }
  {
    const std::string p = copy("bad-crc-field");
    std::string cfg = read(p + "/config.json");
    const size_t at = cfg.find("\"crc32\": \"") + 10;
    cfg.replace(at, 8, "xyz");
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights: crc32 must be 8 hex digits, got 'xyz"));
  }
  {
    const std::string p = copy("garbage-weights");
    write(p + "/weights.pt", "this is not a torch archive");
    // A file of another size is refused by its size, without reading it for a checksum that cannot match.
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt: 27 bytes, but ") && Contains("config.json records ") &&
                                              Contains("damaged or was replaced"));
    without_checksum(p);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("the config does not match the weights"));  // 27 bytes
    write(p + "/weights.pt", std::string(200000, 'x'));  // room for the parameters, but no archive
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt: corrupt or unreadable"));
  }
  {
    const std::string p = copy("truncated-weights");
    const std::string bytes = read(p + "/weights.pt");
    write(p + "/weights.pt", bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt"));
  }
  {
    const std::string p = copy("shape-mismatch");
    std::string cfg = read(p + "/config.json");
    cfg.replace(cfg.find("\"d_ff\": 48"), 10, "\"d_ff\": 40");  // fewer parameters than stored: read, then refused
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("has shape") && Contains("mlp.gate_up.weight"));
  }
  {  // Sizes far beyond the weights: refused before anything is allocated (the file is too small for them).
    const std::string p = copy("claims-more");
    std::string cfg = read(p + "/config.json");
    cfg.replace(cfg.find("\"d_model\": 32"), 13, "\"d_model\": 16384");
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("weights.pt: ") && Contains("config.json describes") &&
                                              Contains("the config does not match the weights"));
  }
  {  // A model larger than the memory there is: refused naming every part of what it needs.
    const ModelMemoryPlan plan = plan_model_memory(small_config());
    CHECK(plan.parameter_bytes == small_config().parameter_count() * 4);
    CHECK_THROWS_WITH(check_model_fits(plan, "transformer:x", plan.total() - 1),
                      Contains("transformer:x: the model needs") && Contains("is available (MemAvailable)"));
    CHECK_NOTHROW(check_model_fits(plan, "transformer:x", plan.total()));
  }
  {
    const std::string p = copy("missing-field");
    std::string cfg = read(p + "/config.json");
    cfg.replace(cfg.find("\"n_heads\""), 9, "\"n_headz\"");
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("unknown field 'n_headz'"));
  }
  {
    const std::string p = copy("bad-tokenizer");
    std::string cfg = read(p + "/config.json");
    cfg.replace(cfg.find("\"byte\""), 6, "\"bpe\"");
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("unknown tokenizer 'bpe'"));
  }
  {
    const std::string p = copy("untied");  // the config says untied: the archive lacks head.weight
    std::string cfg = read(p + "/config.json");
    cfg.replace(cfg.find("\"tie_embeddings\": true"), 22, "\"tie_embeddings\": false");
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("the config does not match the weights"));
  }
  {
    const std::string p = copy("biased");  // the config adds q/k/v biases (192 parameters): the archive lacks them
    std::string cfg = read(p + "/config.json");
    cfg.replace(cfg.find("\"n_layers\": 2,"), 14, "\"n_layers\": 2, \"qkv_bias\": true,");
    write(p + "/config.json", cfg);
    CHECK_THROWS_WITH(load_checkpoint(p), Contains("missing tensor") && Contains("bias"));
  }
}

TEST_CASE("byte tokenizer round-trips any bytes, and load_tokenizer_for reads the checkpoint", "[transformer]") {
  const ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string text = "To be, or not to be \xE2\x80\x94 that is the question\n" + all;
  const std::vector<Token> t = tok.encode(text);
  CHECK(t.size() == text.size());
  CHECK(t[0] == 'T');
  CHECK(tok.decode(t) == text);
  CHECK_THROWS_WITH(tok.decode({65, 256}), Contains("not a byte"));

  TempDir dir("tokenizer");
  const std::string path = save_scaled_checkpoint(dir, "model", small_config(), 3);
  const auto loaded = load_tokenizer_for("transformer:" + path);
  REQUIRE(loaded);
  CHECK(loaded->name() == "byte");
  CHECK(loaded->decode(loaded->encode("hello")) == "hello");
  CHECK(load_tokenizer_for("bigram:whatever.txt") == nullptr);
  CHECK_THROWS_WITH(load_tokenizer_for("transformer:" + dir.str("missing")), Contains("no such folder"));
}

TEST_CASE("learning-rate schedule: linear warm-up, cosine to the minimum", "[transformer]") {
  LrSchedule s{1e-3, 1e-4, 10, 110};
  CHECK(s.at(0) == Approx(1e-4));
  CHECK(s.at(9) == Approx(1e-3));
  CHECK(s.at(10) == Approx(1e-3));
  CHECK(s.at(60) == Approx(0.5 * (1e-3 + 1e-4)));
  CHECK(s.at(109) == Approx(1e-4 + 0.5 * 9e-4 * (1 + std::cos(M_PI * 99 / 100))));
  CHECK(s.at(110) == Approx(1e-4));
  for (int i = 11; i < 110; ++i) CHECK(s.at(i) <= s.at(i - 1));
  CHECK_THROWS_WITH((LrSchedule{1e-3, 2e-3, 10, 100}.validate()), Contains("min_lr"));
}

TEST_CASE("progress bar: plain lines off a terminal, in-place redraws on one", "[transformer]") {
  std::ostringstream plain;
  ProgressBar bar(plain, 100, false, 25);
  for (int s = 0; s < 100; ++s) bar.update(s, 2.5, 1000, 100 - s);
  bar.note("step 100: val loss 2.0");
  const std::string text = plain.str();
  CHECK(text.find('\r') == std::string::npos);
  CHECK_THAT(text, Contains("step 1/100") && Contains("step 25/100") && Contains("step 100/100") &&
                       Contains("1000 tok/s") && Contains("ETA 0:01"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 6);  // steps 1, 25, 50, 75, 100 and the note
  std::ostringstream tty;
  ProgressBar live(tty, 10, true, 25);
  live.update(0, 2.5, 1000, 3725);
  CHECK_THAT(tty.str(), Contains("\r[") && Contains("ETA 1:02:05"));
}

TEST_CASE("a short training run lowers the loss and writes a loadable checkpoint", "[transformer]") {
  TempDir dir("train");
  std::string text;
  std::mt19937 rng(4);
  const std::vector<std::string> words = {"the ", "king ", "and ", "queen ", "of ", "verona ", "speak ", "\n"};
  while (text.size() < 20000) text += words[rng() % words.size()];
  std::ofstream(dir.str("corpus.txt")) << text;

  TrainOptions o;
  o.model = small_config();
  o.corpus = dir.str("corpus.txt");
  o.output = dir.str("ckpt");
  o.batch_size = 8;
  o.seq_len = 32;
  o.lr = LrSchedule{3e-3, 3e-4, 10, 240};
  o.eval_interval = 80;
  o.eval_windows = 16;
  o.log_interval = 1000;
  const TrainResult r = train_transformer(o);
  // A uniform guess costs ln 256 = 5.55 nats; the word choice costs ln 8 / 5.5 = 0.38 nats per byte.
  CHECK(r.val_loss < 1.5);
  CHECK(r.best_step > 0);
  const CheckpointConfig saved = read_checkpoint_config(o.output);
  CHECK(saved.training["val_loss"].get<double>() == Approx(r.val_loss));
  CHECK(saved.training["steps"] == 240);
  const TransformerLanguageModel lm(o.output);
  std::vector<float> logits(256);
  auto session = lm.new_session();
  session->next_logits(lm.tokenizer().encode("the kin"), logits.data());
  // "kin" only ever continues as "king": the served model has learned it.
  const double log_sum =
      std::log(std::accumulate(logits.begin(), logits.end(), 0.0, [](double a, float l) { return a + std::exp(l); }));
  CHECK(logits['g'] - log_sum > std::log(0.5));
}

}  // namespace specula
