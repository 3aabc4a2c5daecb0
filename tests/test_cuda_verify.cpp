// GPU tests of the verification kernels (ctest label `gpu`, in specula_gpu_tests; the executable exits 77
// without a device): the CUDA chain, block and tree kernels against the reference verifiers on random
// batches with identical (seed, sequence, step), outputs poisoned first, and the one-position exact-law
// G-test re-run through the CUDA kernels.
//
// Tolerance: none on decisions; accept tests, proposal ratios and capped ratios are the same float64
// operations on the same inputs (nvcc --fmad=false), so a u <= ratio test and every emitted token must
// be identical. The only difference is the order of float64 vocabulary sums (residual totals r, the
// proposal normaliser, the draw's total and prefix sums): a tree on the GPU, index order on the CPU. They
// differ by a few ulp (|error| <~ V * 2^-53 * total, 1.4e-11 relative for V = 128256), so a token or a
// block stop decision could only flip if u * total (or u_i against h_i) fell within that distance of a
// step, probability ~1e-11 per draw; these fixed seeds do not hit it, so the test asks for equality.
#if defined(SPECULA_HAS_CUDA)

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "holed_tree_case.h"
#include "kept_workspace_check.h"
#include "kernel_verify_cases.h"
#include "kernels/verify_kernels.h"
#include "tests/statistics/goodness_of_fit.h"

using namespace specula;
using namespace specula::testing;

namespace {

void check_cuda_call(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(e));
}

// A device copy of a host vector (or `count` elements poisoned with 0xff bytes), freed on scope exit.
template <typename T>
class Device {
 public:
  explicit Device(size_t count) : count_(count) {
    if (count_) {
      check_cuda_call(cudaMalloc(reinterpret_cast<void**>(&ptr_), count_ * sizeof(T)), "cudaMalloc");
      check_cuda_call(cudaMemset(ptr_, 0xff, count_ * sizeof(T)), "cudaMemset");  // -1 ints, NaN floats
    }
  }
  explicit Device(const std::vector<T>& host) : Device(host.size()) {
    if (count_) check_cuda_call(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), "H2D");
  }
  ~Device() { cudaFree(ptr_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  T* get() const { return count_ ? ptr_ : nullptr; }
  void to_host(std::vector<T>& out) const {
    out.resize(count_);
    if (count_) check_cuda_call(cudaMemcpy(out.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost), "D2H");
  }

 private:
  T* ptr_ = nullptr;
  size_t count_;
};

// Runs a case on the GPU. Outputs are poisoned with 0x7f7f7f7f first (a value no output takes), so an
// element the kernel does not write shows up in the comparison; the overlap sums start as NaN (0xff bytes).
// stage_rows: ChainVerifyParams::stage_rows.
// `kept`: the global-memory exchange's workspace kept across launches (null: one for this launch).
VerifyResult run_on_gpu(const VerifyCase& c, int32_t cluster_blocks = 0, int32_t stage_rows = 1,
                        RowExchange exchange = RowExchange::automatic, GroupWorkspace* kept = nullptr) {
  const int32_t B = c.batch(), E = c.width + 1;
  Device<float> p(c.p), q(c.q);
  Device<int32_t> tokens(c.tokens), parents(c.parents);
  Device<VerifyRowParams> rows(c.rows);
  Device<int32_t> emitted(static_cast<size_t>(B) * E), num_emitted(B), num_accepted(B), bonus(B), q_zero(B), status(B),
      path(static_cast<size_t>(B) * c.width), overlap_count(B);
  Device<double> overlap_sum(B);
  for (int32_t* ptr : {emitted.get(), num_emitted.get(), num_accepted.get(), bonus.get(), q_zero.get(), status.get()})
    check_cuda_call(cudaMemset(ptr, 0x7f, (ptr == emitted.get() ? static_cast<size_t>(B) * E : B) * sizeof(int32_t)),
                    "poison");
  if (path.get()) check_cuda_call(cudaMemset(path.get(), 0x7f, static_cast<size_t>(B) * c.width * 4), "poison");
  VerifyOutputs out{emitted.get(), num_emitted.get(), num_accepted.get(), bonus.get(),
                    q_zero.get(),  status.get(),      overlap_sum.get(),  overlap_count.get()};
  RowSplit ran;
  if (c.kind == VerifyKind::tree) {
    TreeVerifyParams tp;
    tp.p = p.get();
    tp.q = q.get();
    tp.tokens = tokens.get();
    tp.parents = parents.get();
    tp.rows = rows.get();
    tp.out = out;
    tp.path = path.get();
    tp.batch = B;
    tp.max_nodes = c.width;
    tp.vocab = c.vocab;
    tp.cluster_blocks = cluster_blocks;
    tp.row_exchange = exchange;
    tp.stage_rows = stage_rows;
    ran = launch_tree_verify(tp, nullptr, kept);
  } else {
    BlockVerifyParams bp;
    bp.p = p.get();
    bp.q = q.get();
    bp.draft = tokens.get();
    bp.rows = rows.get();
    bp.out = out;
    bp.batch = B;
    bp.max_draft = c.width;
    bp.vocab = c.vocab;
    bp.cluster_blocks = cluster_blocks;
    bp.row_exchange = exchange;
    bp.stage_rows = stage_rows;
    ran = c.kind == VerifyKind::chain ? launch_chain_verify(bp, nullptr, kept) : launch_block_verify(bp, nullptr, kept);
  }
  // A split through global memory asked for runs as asked on any GPU the tests run on, not as one block per row.
  if (exchange == RowExchange::global_memory && cluster_blocks > 1) {
    CHECK(ran.exchange == RowExchange::global_memory);
    CHECK(ran.blocks == cluster_blocks);
  }
  check_cuda_call(cudaDeviceSynchronize(), "verification kernel");
  VerifyResult r;
  r.width = E;
  emitted.to_host(r.emitted);
  num_emitted.to_host(r.num_emitted);
  num_accepted.to_host(r.num_accepted);
  bonus.to_host(r.bonus);
  q_zero.to_host(r.q_zero_errors);
  status.to_host(r.status);
  path.to_host(r.path);
  overlap_sum.to_host(r.overlap_sum);
  overlap_count.to_host(r.overlap_count);
  return r;
}

void check_against_reference(const VerifyCase& c, const VerifyResult& gpu, const std::string& label) {
  int64_t mismatches = 0;
  std::string first;
  for (int32_t b = 0; b < c.batch(); ++b) {
    const std::string diff = compare_with_reference(c, b, gpu);
    if (!diff.empty() && mismatches++ == 0) first = label + " row " + std::to_string(b) + ": " + diff;
  }
  INFO(first);
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("the CUDA verification kernels match the reference verifiers on small random batches",
          "[gpu][verify][sanitize]") {
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    for (int32_t i = 0; i < 40; ++i) {
      const uint64_t seed = 0xc0ffee + 131 * static_cast<uint64_t>(i) + static_cast<uint64_t>(kind);
      CaseRandom g(seed);
      const int32_t vocab = g.between(1, 64);
      const VerifyCase c = kind == VerifyKind::tree ? random_tree_case(seed, 32, vocab, g.between(0, 12))
                                                    : random_chain_case(seed, kind, 32, vocab, g.between(0, 8));
      check_against_reference(
          c, run_on_gpu(c),
          std::string(verify_kind_name(kind)) + " case " + std::to_string(i) + " V " + std::to_string(vocab));
    }
  }
}

TEST_CASE("the CUDA tree kernel verifies trees with holes as the trees of their drawn nodes",
          "[gpu][verify][sanitize]") {
  // The dispatch's choice at three vocabularies; at V 40, also a cluster of 3 blocks (rows staged) and 3 blocks
  // exchanging through global memory (rows unstaged).
  GroupWorkspace kept;
  for (int32_t vocab : {40, 1003, 32000})
    for (int32_t i = 0; i < 6; ++i) {
      const uint64_t seed = 0x401ec + 131 * static_cast<uint64_t>(i) + static_cast<uint64_t>(vocab);
      const HoledTreeCase h = holed_tree_case(seed, 16, vocab, 1 + i * 2, 6);
      const std::string label = "holed tree case " + std::to_string(i) + " V " + std::to_string(vocab);
      check_against_reference(h.drawn, at_drawn_nodes(h, run_on_gpu(h.holed)), label);
      if (vocab != 40) continue;
      check_against_reference(h.drawn, at_drawn_nodes(h, run_on_gpu(h.holed, 3, 1, RowExchange::automatic, &kept)),
                              label + ", a cluster of 3");
      check_against_reference(h.drawn, at_drawn_nodes(h, run_on_gpu(h.holed, 3, 0, RowExchange::global_memory, &kept)),
                              label + ", 3 blocks through global memory");
    }
}

TEST_CASE("the CUDA verification kernels match the reference at every dispatch (block 256/512, vec 1/4)",
          "[gpu][verify]") {
  // V % 4 == 0 -> 4-wide loads; V >= 16384 -> 512 threads; 128256 = Llama 3.
  for (int32_t vocab : {1000, 1003, 32000, 32003, 128256}) {
    for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
      const uint64_t seed = 17 * static_cast<uint64_t>(vocab) + static_cast<uint64_t>(kind);
      const VerifyCase c =
          kind == VerifyKind::tree ? random_tree_case(seed, 12, vocab, 8) : random_chain_case(seed, kind, 12, vocab, 5);
      check_against_reference(c, run_on_gpu(c), std::string(verify_kind_name(kind)) + " V " + std::to_string(vocab));
    }
  }
}

TEST_CASE("the verification kernels split over a thread-block cluster match the reference",
          "[gpu][verify][cluster][sanitize]") {
  // Clusters of 2, 3 and 8 blocks on small vocabularies (slices of a few tokens, empty ones), rows staged in shared
  // memory and not, the blocks exchanging through distributed shared memory and through global memory; at V 128256,
  // where the dispatch picks a cluster of 8 with staged rows, one block per row and the cluster unstaged.
  // One workspace kept across the global-memory launches, whose layout changes with the blocks a row (the sampler's
  // tests launch without one): every launch must leave it zero.
  GroupWorkspace kept;
  for (int32_t blocks : {2, 3, 8})
    for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree})
      for (int32_t i = 0; i < 8; ++i) {
        const uint64_t seed = 0xc1a5 + 131 * static_cast<uint64_t>(i) + static_cast<uint64_t>(kind) + 7 * blocks;
        CaseRandom g(seed);
        const int32_t vocab = i % 2 ? 64 : g.between(1, 64);
        const VerifyCase c = kind == VerifyKind::tree ? random_tree_case(seed, 16, vocab, g.between(0, 12))
                                                      : random_chain_case(seed, kind, 16, vocab, g.between(0, 8));
        // Through global memory in every other case (the sanitizers slow each launch; the emulated batteries run
        // every case both ways).
        for (RowExchange exchange : {RowExchange::automatic, RowExchange::global_memory})
          for (int32_t stage_rows : {1, 0})
            if (exchange == RowExchange::automatic || i % 2 == 0) {
              const std::string label = std::string(verify_kind_name(kind)) + " " + std::to_string(blocks) +
                                        (stage_rows ? " blocks (rows staged), " : " blocks, ") +
                                        row_exchange_name(exchange) + ", case " + std::to_string(i) + " V " +
                                        std::to_string(vocab);
              check_against_reference(c, run_on_gpu(c, blocks, stage_rows, exchange, &kept), label);
              // After each launch: a word left set could be cleared by a later launch's rotation.
              INFO(label);
              CHECK(testing::kept_words_left_set(kept) == 0);
            }
      }
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const uint64_t seed = 91 + static_cast<uint64_t>(kind);
    const VerifyCase c =
        kind == VerifyKind::tree ? random_tree_case(seed, 6, 128256, 8) : random_chain_case(seed, kind, 6, 128256, 5);
    check_against_reference(c, run_on_gpu(c, 1), std::string(verify_kind_name(kind)) + " one block, V 128256");
    check_against_reference(c, run_on_gpu(c, 0, 0), std::string(verify_kind_name(kind)) + " unstaged, V 128256");
  }
}

TEST_CASE("verification through global memory at V 128256, more rows than resident groups", "[gpu][verify][cluster]") {
  // 8 blocks per row, 40 rows: more than an H100/H200 holds groups of 8 at once, so each group takes rows in turn.
  GroupWorkspace kept;
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const uint64_t seed = 93 + static_cast<uint64_t>(kind);
    const VerifyCase c =
        kind == VerifyKind::tree ? random_tree_case(seed, 40, 128256, 4) : random_chain_case(seed, kind, 40, 128256, 4);
    check_against_reference(c, run_on_gpu(c, 8, 1, RowExchange::global_memory, &kept),
                            std::string(verify_kind_name(kind)) + " 8 blocks, 40 rows, V 128256");
    CHECK(testing::kept_words_left_set(kept) == 0);
  }
}

TEST_CASE("the CUDA verification kernels write every output element (poisoned first)", "[gpu][verify][sanitize]") {
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const VerifyCase c =
        kind == VerifyKind::tree ? random_tree_case(31, 64, 4096, 10) : random_chain_case(31, kind, 64, 4096, 6);
    const VerifyResult r = run_on_gpu(c);
    constexpr int32_t kPoison = 0x7f7f7f7f;
    int64_t unwritten = 0;
    std::vector<const std::vector<int32_t>*> outputs = {&r.emitted, &r.num_emitted,   &r.num_accepted,
                                                        &r.bonus,   &r.q_zero_errors, &r.status};
    if (kind == VerifyKind::tree) outputs.push_back(&r.path);  // chain and block have no path output
    for (const std::vector<int32_t>* v : outputs)
      for (int32_t x : *v) unwritten += x == kPoison;
    INFO(verify_kind_name(kind));
    CHECK(unwritten == 0);
    for (int32_t b = 0; b < c.batch(); ++b) {
      CHECK(r.status[b] == 0);
      CHECK(r.num_emitted[b] == r.num_accepted[b] + 1);
    }
  }
}

TEST_CASE("the CUDA tree kernel matches the reference on trees of up to 256 nodes", "[gpu][verify][tree256]") {
  // Bushy trees (up to ~100 siblings under one node: the per-sibling recurrence at its longest) and deep ones
  // (chains of ~200 nodes: per-node scratch at its last index), at both block sizes.
  for (int32_t vocab : {1000, 32003})
    for (bool deep : {false, true}) {
      const uint64_t seed = 0x256 + static_cast<uint64_t>(vocab) + (deep ? 1 : 0);
      const VerifyCase c = random_tree_case(seed, 6, vocab, kMaxVerifyTreeNodes, deep);
      check_against_reference(c, run_on_gpu(c),
                              std::string(deep ? "deep" : "bushy") + " tree V " + std::to_string(vocab));
    }
}

TEST_CASE("the CUDA tree kernel on 256-node trees, small vocabulary", "[gpu][verify][sanitize]") {
  for (bool deep : {false, true}) {
    const VerifyCase c = random_tree_case(0x5a0 + (deep ? 1 : 0), 3, 40, kMaxVerifyTreeNodes, deep);
    check_against_reference(c, run_on_gpu(c), deep ? "deep" : "bushy");
  }
}

TEST_CASE("the first token emitted by the CUDA kernels has the target law (G-test)", "[gpu][verify][law]") {
  constexpr int32_t kRows = 200000;
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const LawCase lc = law_case(kind, kRows, 177 + static_cast<uint64_t>(kind));
    const VerifyResult host = run_host(lc.c);
    // The dispatch's choice (one block at this V), a cluster, and 3 blocks exchanging through global memory.
    for (const auto& [blocks, exchange] : {std::pair<int32_t, RowExchange>{0, RowExchange::automatic},
                                           {3, RowExchange::automatic},
                                           {3, RowExchange::global_memory}}) {
      const VerifyResult r = run_on_gpu(lc.c, blocks, 1, exchange);
      const stats::GofResult gof = stats::g_test(first_token_counts(r, kRows, lc.c.vocab), lc.law);
      INFO(verify_kind_name(kind) << ", cluster_blocks " << blocks << ", " << row_exchange_name(exchange) << ": "
                                  << gof.detail);
      CHECK(gof.passed(stats::kAlpha));
      // And row by row the same draws as the CPU backend of the same algorithm.
      CHECK(host.emitted == r.emitted);
    }
  }
}

#endif  // SPECULA_HAS_CUDA
