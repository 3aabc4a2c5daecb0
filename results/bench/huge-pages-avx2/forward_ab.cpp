// Whole forwards of one checkpoint, two copies in one process: A with its packed matrices in a HugePageBuffer
// (as inference models keep them), B with the same packed bytes cloned back onto LibTorch's allocator (4 KB
// pages where transparent huge pages are `madvise`). Each round runs the 1-token step and the tree on A and B
// in ABBA order, each after the same 128 cached tokens, so that a change in the machine's rate falls on both
// copies alike; prints the medians and the median and quartiles of the per-round ratios A / B.
//
// Build (from the repository root, after ./setup.sh; the include and link lines of the test binaries):
//   see commands.sh (`commands.sh forward`).
// Run: forward_ab CHECKPOINT_DIR DTYPE [ROUNDS]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/transformer_model.h"

using namespace specula;

namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

double time_us(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: forward_ab CHECKPOINT_DIR DTYPE [ROUNDS]\n"), 2;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 100;
  torch::set_num_threads(1);
  Transformer a = load_checkpoint(argv[1], argv[2]).model, b = load_checkpoint(argv[1], argv[2]).model;
  const long long before = process_huge_page_bytes();
  const int64_t moved = pack_matrices_for_decoding(*a);
  const long long granted_a = process_huge_page_bytes() - before;
  pack_matrices_for_decoding(*b);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : b->named_parameters())
      if (is_packed_matrix(p.value())) p.value().set_data(p.value().clone());  // back onto LibTorch's pages
  }
  const long long granted_after_b = process_huge_page_bytes() - before;

  c10::InferenceMode inference;
  torch::manual_seed(0);
  const int64_t V = a->config().vocab_size, context = 128;
  const torch::Tensor prompt = torch::randint(V, {1, context}, torch::kInt64);
  const torch::Tensor one = torch::randint(V, {1, 1}, torch::kInt64);
  const std::vector<int32_t> parents = {-1, -1, -1, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8};  // 3,2,1, as bench forward
  const torch::Tensor tree = torch::randint(V, {static_cast<int64_t>(parents.size())}, torch::kInt64);
  KVCache ca = a->new_cache(1), cb = b->new_cache(1);
  ca.reserve(context + 16);
  cb.reserve(context + 16);
  a->forward(prompt, ca);
  b->forward(prompt, cb);
  // The copies compute the same bits (the same bytes, the same kernel), checked once.
  const torch::Tensor la = a->forward(one, ca).logits, lb = b->forward(one, cb).logits;
  if (!torch::equal(la, lb)) return std::fprintf(stderr, "the copies' logits differ\n"), 1;
  ca.truncate(context);
  cb.truncate(context);

  auto step = [&](Transformer& m, KVCache& c) {
    return time_us([&] {
      m->forward(one, c);
      c.truncate(context);
    });
  };
  auto tree_step = [&](Transformer& m, KVCache& c) {
    return time_us([&] {
      m->forward_tree(tree, parents, c);
      c.truncate(context);
    });
  };
  std::vector<double> sa, sb, ta, tb, rs, rt;
  for (int r = -5; r < rounds; ++r) {  // five rounds of warm-up
    double s1, s2, t1, t2;
    if (r % 2 == 0) {
      s1 = step(a, ca), s2 = step(b, cb), t1 = tree_step(a, ca), t2 = tree_step(b, cb);
    } else {
      s2 = step(b, cb), s1 = step(a, ca), t2 = tree_step(b, cb), t1 = tree_step(a, ca);
    }
    if (r < 0) continue;
    sa.push_back(s1), sb.push_back(s2), ta.push_back(t1), tb.push_back(t2);
    rs.push_back(s1 / s2), rt.push_back(t1 / t2);
  }
  std::printf("%s %s: %lld MB moved, huge pages granted %.1f MB after A, %.1f MB after B; %d rounds\n", argv[1],
              argv[2], static_cast<long long>(moved / 1000000), static_cast<double>(granted_a) / 1e6,
              static_cast<double>(granted_after_b) / 1e6, rounds);
  std::printf("  1-token: huge %.0f us, small %.0f us; huge/small median %.3f [q25 %.3f, q75 %.3f]\n",
              quantile(sa, 0.5), quantile(sb, 0.5), quantile(rs, 0.5), quantile(rs, 0.25), quantile(rs, 0.75));
  std::printf("  tree 3,2,1: huge %.0f us, small %.0f us; huge/small median %.3f [q25 %.3f, q75 %.3f]\n",
              quantile(ta, 0.5), quantile(tb, 0.5), quantile(rt, 0.5), quantile(rt, 0.25), quantile(rt, 0.75));
  return 0;
}
