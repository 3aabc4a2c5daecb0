// Static draft-tree shapes and the choice of one from measured acceptance (Sequoia, Chen et al. 2024,
// arXiv:2402.12374; verify/ALGORITHMS.md §5). Torch-free.
//
// A static tree is described by ranks, not tokens: node i is the rank[i]-th best child (0 = best) of its
// parent. A drafter turns it into tokens each step (Medusa: rank r at depth d = the r-th top token of head d;
// EAGLE: the r-th top token of its own distribution at the parent). Under Sequoia's positional acceptance
// assumption the probability that the child of rank k of an accepted node is the accepted one is p_k,
// whatever the depth, so a tree's expected tokens per verification step is
//
//   F(T) = sum over nodes v (the root included, contributing 1: the bonus or correction token)
//          of prod_{u on path(v)} p_{rank(u)}                                   (verify/ALGORITHMS.md §5, §7)
//
// and its cost is depth * t_draft + t_target(1 + nodes) (one verification forward over the root and every
// node). The optimum over all trees comes from Sequoia's dynamic programme (tree_search.py); `--tree` takes
// only uniform branching per depth, so the best such tree is found too, by enumeration.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace specula {

// Nodes in topological order: parents before children, siblings by increasing rank.
struct RankTree {
  std::vector<int32_t> parent;  // [n] parent node, -1 for children of the root
  std::vector<int32_t> rank;    // [n] 0 = best-ranked child of its parent

  int32_t size() const { return static_cast<int32_t>(parent.size()); }
  int32_t depth(int32_t node) const;  // 1 for children of the root
  int32_t max_depth() const;
  std::vector<int32_t> ranks_on_path(int32_t node) const;  // root's child first
  // The nodes of depth <= max_depth (a Medusa tree deeper than its heads is cut).
  RankTree truncated(int32_t max_depth) const;
  // Branching per depth when every node of a depth has the same children ranks 0..b-1; empty otherwise.
  std::vector<int32_t> uniform_shape() const;

  // The `--tree` shape "2,2,1": ranks 0..b_d-1 under every node of depth d - 1.
  static RankTree uniform(const std::vector<int32_t>& shape);
  static RankTree chain(int32_t length);  // the top-1 chain
};

// Rank paths separated by whitespace (newlines allowed, '#' starts a comment), each the ranks from the
// root's child down joined by '.', like Medusa's `medusa_choices`: "0 1 0.0 0.1 1.0 0.0.0". Every path's
// prefix must be present; order does not matter. Throws Error naming `where` and the bad entry.
RankTree parse_rank_tree(const std::string& text, const std::string& where);
RankTree read_rank_tree_file(const std::string& path);
std::string format_rank_tree(const RankTree& tree);  // the same format, one depth per line

// p[k] = P(the child of rank k of an accepted node is accepted); each in [0, 1], sum <= 1 (at most one
// child is accepted). Throws Error naming `where` otherwise.
void validate_positional_acceptance(const std::vector<double>& p, const std::string& where);

// F(T) above; ranks beyond p.size() contribute 0.
double expected_tokens_per_step(const RankTree& tree, const std::vector<double>& p);

// t_target(rows): the cost of one target forward over `rows` token rows, linear between measured points
// (rows, cost). Relative units: the point at 1 row (a plain decoding step) must be given and is the unit
// the speedup is measured against.
class ForwardCost {
 public:
  // Points in any order; rows >= 1 and distinct, costs > 0 and finite. Throws Error naming `where`.
  ForwardCost(std::vector<std::pair<int32_t, double>> points, const std::string& where);
  // "1:1.0,8:1.1,16:1.3". Throws ParameterError for `parameter` (e.g. "forward_cost") naming the bad entry.
  static ForwardCost parse(const std::string& text, const std::string& parameter);
  double at(int32_t rows) const;  // throws above max_rows()
  int32_t max_rows() const { return points_.back().first; }
  const std::vector<std::pair<int32_t, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<int32_t, double>> points_;  // sorted by rows
};

// Bounds of the tree search, checked before any work (errors name max_nodes / max_depth): a draft tree holds at
// most 4096 nodes, depth 64 is far beyond any useful tree, Sequoia's table of (nodes + 2)(depth + 1)(K + 1)
// entries is filled by a scan over up to `nodes` splits each, and the uniform-per-depth enumeration visits at
// most kMaxUniformShapes shapes (it stops with an error past that, after about a second).
inline constexpr int32_t kMaxTreeSearchNodes = 4096;
inline constexpr int32_t kMaxTreeSearchDepth = 64;
inline constexpr double kMaxTreeSearchSteps = 4e9;
inline constexpr int64_t kMaxUniformShapes = 20'000'000;

struct TreeSearchOptions {
  std::vector<double> acceptance;  // p_k, k = 0 .. K-1 (K = the largest branching considered)
  int32_t max_nodes = 64;          // draft nodes (the forward runs 1 + nodes rows; capped by the cost table)
  int32_t max_depth = 8;
  double draft_cost_per_depth = 0;  // t_draft of one draft level, in the units of the forward cost
};

struct TreeChoice {
  RankTree tree;
  double tokens_per_step = 0;  // F(T)
  double step_cost = 0;        // depth * draft cost + t_target(1 + nodes)
  double speedup = 0;          // tokens_per_step * t_target(1) / step_cost: vs plain decoding
  std::vector<int32_t> shape;  // the uniform `--tree` shape when the tree is uniform
};

// Sequoia's table: T[m][l][b] = best F of a tree of m nodes (root included), depth <= l and b root
// children; c(m, l) = max_b T[m][l][b].
class SequoiaTable {
 public:
  SequoiaTable(std::vector<double> acceptance, int32_t max_nodes, int32_t max_depth);
  // c(nodes + 1, depth): the best F over trees of exactly `nodes` draft nodes and depth <= `depth`; 0 when
  // none exists (more nodes than K-ary trees of that depth hold).
  double best(int32_t nodes, int32_t depth) const;
  RankTree tree(int32_t nodes, int32_t depth) const;  // a tree achieving best(); throws if none exists

 private:
  double& at(int32_t m, int32_t l, int32_t b);
  double at(int32_t m, int32_t l, int32_t b) const;
  // Appends the root's children b, b - 1, .., 1 of entry (m, l, b) under `parent`, recursively: (parent, rank).
  void build(int32_t m, int32_t l, int32_t b, int32_t parent, std::vector<std::pair<int32_t, int32_t>>& out) const;
  std::vector<double> p_;
  int32_t max_m_, max_l_, k_;
  std::vector<double> table_;   // [m][l][b], m = 1..max_m (root included)
  std::vector<int32_t> split_;  // argmax y of each entry
};

// The tree maximising tokens per unit time, F(T) / (depth * t_draft + t_target(1 + nodes)), over trees
// with at most min(max_nodes, cost.max_rows() - 1) nodes and depth <= max_depth; ties to fewer nodes.
TreeChoice optimal_tree(const TreeSearchOptions& options, const ForwardCost& cost);
// The same objective over uniform-per-depth trees (what `--tree` accepts), by enumeration.
TreeChoice best_uniform_tree(const TreeSearchOptions& options, const ForwardCost& cost);

}  // namespace specula
