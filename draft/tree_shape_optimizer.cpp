#include "draft/tree_shape_optimizer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

constexpr double kNone = -1.0;  // an impossible table entry (every real F is >= 1)

// Nodes given as (parent, rank) in any parents-first order -> BFS order with siblings by rank.
RankTree flatten(const std::vector<std::pair<int32_t, int32_t>>& nodes) {
  std::vector<std::vector<int32_t>> kids(nodes.size() + 1);  // kids[parent + 1]
  for (size_t i = 0; i < nodes.size(); ++i) kids[nodes[i].first + 1].push_back(static_cast<int32_t>(i));
  for (auto& k : kids)
    std::sort(k.begin(), k.end(), [&](int32_t a, int32_t b) { return nodes[a].second < nodes[b].second; });
  RankTree out;
  std::vector<int32_t> new_id(nodes.size(), -1);
  std::vector<int32_t> queue = {-1};
  for (size_t q = 0; q < queue.size(); ++q) {
    const int32_t old = queue[q];
    for (int32_t c : kids[old + 1]) {
      new_id[c] = out.size();
      out.parent.push_back(old < 0 ? -1 : new_id[old]);
      out.rank.push_back(nodes[c].second);
      queue.push_back(c);
    }
  }
  return out;
}

std::string path_text(const std::vector<int32_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "." : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

int32_t RankTree::depth(int32_t node) const {
  int32_t d = 0;
  for (int32_t n = node; n >= 0; n = parent[n]) ++d;
  return d;
}

int32_t RankTree::max_depth() const {
  int32_t d = 0;
  for (int32_t n = 0; n < size(); ++n) d = std::max(d, depth(n));
  return d;
}

std::vector<int32_t> RankTree::ranks_on_path(int32_t node) const {
  std::vector<int32_t> out;
  for (int32_t n = node; n >= 0; n = parent[n]) out.push_back(rank[n]);
  std::reverse(out.begin(), out.end());
  return out;
}

RankTree RankTree::truncated(int32_t limit) const {
  std::vector<std::pair<int32_t, int32_t>> kept;
  std::vector<int32_t> new_id(parent.size(), -1);
  for (int32_t n = 0; n < size(); ++n) {
    if (depth(n) > limit) continue;
    new_id[n] = static_cast<int32_t>(kept.size());
    kept.emplace_back(parent[n] < 0 ? -1 : new_id[parent[n]], rank[n]);
  }
  return flatten(kept);
}

std::vector<int32_t> RankTree::uniform_shape() const {
  std::vector<std::vector<int32_t>> kids(parent.size() + 1);  // per row: children ranks in node order
  for (int32_t n = 0; n < size(); ++n) kids[parent[n] + 1].push_back(rank[n]);
  std::vector<int32_t> shape, level = {-1};
  while (true) {
    const size_t b = kids[level.front() + 1].size();
    for (int32_t node : level) {
      const std::vector<int32_t>& k = kids[node + 1];
      if (k.size() != b) return {};
      for (size_t r = 0; r < b; ++r)
        if (k[r] != static_cast<int32_t>(r)) return {};
    }
    if (b == 0) return shape;
    shape.push_back(static_cast<int32_t>(b));
    std::vector<char> in_level(parent.size() + 1, 0);
    for (int32_t node : level) in_level[node + 1] = 1;
    std::vector<int32_t> next;
    for (int32_t n = 0; n < size(); ++n)
      if (in_level[parent[n] + 1]) next.push_back(n);
    level = std::move(next);
  }
}

RankTree RankTree::uniform(const std::vector<int32_t>& shape) {
  std::vector<std::pair<int32_t, int32_t>> nodes;
  std::vector<int32_t> level = {-1};
  for (int32_t b : shape) {
    std::vector<int32_t> next;
    for (int32_t p : level)
      for (int32_t r = 0; r < b; ++r) {
        next.push_back(static_cast<int32_t>(nodes.size()));
        nodes.emplace_back(p, r);
      }
    level = std::move(next);
  }
  return flatten(nodes);
}

RankTree RankTree::chain(int32_t length) { return uniform(std::vector<int32_t>(std::max(length, 0), 1)); }

RankTree parse_rank_tree(const std::string& text, const std::string& where) {
  std::map<std::vector<int32_t>, int32_t> index;  // path -> node (paths sort parents first)
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      std::vector<int32_t> ranks;
      std::stringstream parts(word);
      std::string part;
      while (std::getline(parts, part, '.')) {
        char* end = nullptr;
        const long r = std::strtol(part.c_str(), &end, 10);
        if (part.empty() || *end != '\0' || r < 0 || r > 1023)
          fail(where, ": '", word, "' is not a rank path like 0.1.0 (ranks 0..1023 joined by '.')");
        ranks.push_back(static_cast<int32_t>(r));
      }
      if (word.back() == '.') fail(where, ": '", word, "' ends with '.'");
      if (!index.emplace(ranks, 0).second) fail(where, ": rank path '", word, "' given twice");
    }
  }
  if (index.empty()) fail(where, ": empty tree (expected rank paths like '0 1 0.0')");
  if (index.size() > 4096) fail(where, ": more than 4096 nodes");
  std::vector<std::pair<int32_t, int32_t>> nodes;
  for (auto& [path, id] : index) {  // std::map order: a prefix sorts before its extensions
    id = static_cast<int32_t>(nodes.size());
    int32_t parent = -1;
    if (path.size() > 1) {
      const auto it = index.find(std::vector<int32_t>(path.begin(), path.end() - 1));
      if (it == index.end())
        fail(where, ": rank path '", path_text(path), "' has no parent '",
             path_text(std::vector<int32_t>(path.begin(), path.end() - 1)), "'");
      parent = it->second;
    }
    nodes.emplace_back(parent, path.back());
  }
  return flatten(nodes);
}

RankTree read_rank_tree_file(const std::string& path) {
  return parse_rank_tree(read_text_file(path, "tree file"), path);
}

std::string format_rank_tree(const RankTree& tree) {
  std::string out;
  const int32_t depth_max = tree.max_depth();
  for (int32_t d = 1; d <= depth_max; ++d) {
    std::string line;
    for (int32_t n = 0; n < tree.size(); ++n)
      if (tree.depth(n) == d) line += (line.empty() ? "" : " ") + path_text(tree.ranks_on_path(n));
    out += line + "\n";
  }
  return out;
}

void validate_positional_acceptance(const std::vector<double>& p, const std::string& where) {
  if (p.empty()) fail(where, ": no acceptance rates");
  double total = 0.0;
  for (size_t k = 0; k < p.size(); ++k) {
    if (!(p[k] >= 0.0 && p[k] <= 1.0)) fail(where, ": p_", k + 1, " = ", p[k], " is not in [0, 1]");
    total += p[k];
  }
  if (total > 1.0 + 1e-9) fail(where, ": the rates sum to ", total, " > 1 (at most one child of a node is accepted)");
}

double expected_tokens_per_step(const RankTree& tree, const std::vector<double>& p) {
  std::vector<double> reach(tree.size());
  double total = 1.0;  // the root: the correction or bonus token is always emitted
  for (int32_t n = 0; n < tree.size(); ++n) {
    const double pk = tree.rank[n] < static_cast<int32_t>(p.size()) ? p[tree.rank[n]] : 0.0;
    reach[n] = pk * (tree.parent[n] < 0 ? 1.0 : reach[tree.parent[n]]);
    total += reach[n];
  }
  return total;
}

ForwardCost::ForwardCost(std::vector<std::pair<int32_t, double>> points, const std::string& where)
    : points_(std::move(points)) {
  if (points_.empty()) fail(where, ": no forward costs");
  std::sort(points_.begin(), points_.end());
  for (size_t i = 0; i < points_.size(); ++i) {
    const auto [rows, cost] = points_[i];
    if (rows < 1) fail(where, ": rows must be >= 1, got ", rows);
    if (!(cost > 0.0 && std::isfinite(cost))) fail(where, ": the cost of ", rows, " rows must be > 0, got ", cost);
    if (i > 0 && points_[i - 1].first == rows) fail(where, ": ", rows, " rows given twice");
  }
  if (points_.front().first != 1)
    fail(where, ": needs the cost of 1 row (a plain decoding step: the unit the speedup is measured against)");
}

ForwardCost ForwardCost::parse(const std::string& text, const std::string& parameter) {
  std::vector<std::pair<int32_t, double>> points;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t colon = item.find(':');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const std::string rows = colon == std::string::npos ? "" : item.substr(0, colon);
    const std::string cost = colon == std::string::npos ? "" : item.substr(colon + 1);
    const long n = std::strtol(rows.c_str(), &end1, 10);
    const double c = std::strtod(cost.c_str(), &end2);
    if (rows.empty() || cost.empty() || *end1 != '\0' || *end2 != '\0' || n > 1 << 20)
      fail_parameter(parameter, ": '", item, "' is not ROWS:COST (e.g. 1:1.0,8:1.1,16:1.3)");
    points.emplace_back(static_cast<int32_t>(n), c);
  }
  try {
    return ForwardCost(std::move(points), parameter);
  } catch (const ParameterError&) {
    throw;
  } catch (const Error& e) {  // "<parameter>: <problem>": the same problem, raised as the parameter's
    fail_parameter(parameter, std::string(e.what()).substr(parameter.size()));
  }
}

double ForwardCost::at(int32_t rows) const {
  if (rows < 1 || rows > max_rows())
    fail("forward cost: ", rows, " rows is outside the measured range [1, ", max_rows(), "]");
  const auto hi = std::lower_bound(points_.begin(), points_.end(), std::make_pair(rows, -1.0));
  if (hi->first == rows) return hi->second;
  const auto lo = hi - 1;
  const double w = static_cast<double>(rows - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + w * (hi->second - lo->second);
}

// ---------------------------------------------------------------------------------------------------------
// Sequoia's dynamic programme (tree_search.py; verify/ALGORITHMS.md §5):
//   T[1][l][0] = 1
//   T[m][l][1] = 1 + p_1 * c(m - 1, l - 1)
//   T[m][l][b] = max_{1 <= y < m} T[y][l][b - 1] + p_b * c(m - y, l - 1)     (b >= 2)
//   c(m, l) = max_b T[m][l][b]
// The b-th root child gets a subtree of m - y nodes; the root and its first b - 1 children keep y.

SequoiaTable::SequoiaTable(std::vector<double> acceptance, int32_t max_nodes, int32_t max_depth)
    : p_(std::move(acceptance)), max_m_(max_nodes + 1), max_l_(max_depth), k_(static_cast<int32_t>(p_.size())) {
  validate_positional_acceptance(p_, "tree search");
  if (max_nodes < 0 || max_depth < 0) fail("tree search: negative size limits");
  const size_t entries = static_cast<size_t>(max_m_ + 1) * (max_l_ + 1) * (k_ + 1);
  table_.assign(entries, kNone);
  split_.assign(entries, 0);
  std::vector<double> c(static_cast<size_t>(max_m_ + 1) * (max_l_ + 1), kNone);  // c(m, l)
  auto cref = [&](int32_t m, int32_t l) -> double& { return c[static_cast<size_t>(m) * (max_l_ + 1) + l]; };
  for (int32_t l = 0; l <= max_l_; ++l) {
    for (int32_t m = 1; m <= max_m_; ++m) {
      if (m == 1) at(1, l, 0) = 1.0;
      for (int32_t b = 1; b <= k_ && l >= 1; ++b) {
        double best = kNone;
        int32_t best_y = 0;
        for (int32_t y = 1; y < m; ++y) {
          const double rest = at(y, l, b - 1), sub = cref(m - y, l - 1);
          if (rest == kNone || sub == kNone) continue;
          const double v = rest + p_[b - 1] * sub;
          if (v > best) {
            best = v;
            best_y = y;
          }
        }
        at(m, l, b) = best;
        split_[static_cast<size_t>((m * (max_l_ + 1) + l) * (k_ + 1) + b)] = best_y;
      }
      double best = kNone;
      for (int32_t b = 0; b <= k_; ++b) best = std::max(best, at(m, l, b));
      cref(m, l) = best;
    }
  }
}

double& SequoiaTable::at(int32_t m, int32_t l, int32_t b) {
  return table_[static_cast<size_t>((m * (max_l_ + 1) + l) * (k_ + 1) + b)];
}
double SequoiaTable::at(int32_t m, int32_t l, int32_t b) const {
  return table_[static_cast<size_t>((m * (max_l_ + 1) + l) * (k_ + 1) + b)];
}

double SequoiaTable::best(int32_t nodes, int32_t depth) const {
  if (nodes < 0 || nodes + 1 > max_m_ || depth < 0 || depth > max_l_)
    fail("tree search: ", nodes, " nodes at depth ", depth, " is outside the table (", max_m_ - 1, " nodes, depth ",
         max_l_, ")");
  double best = kNone;
  for (int32_t b = 0; b <= k_; ++b) best = std::max(best, at(nodes + 1, depth, b));
  return best == kNone ? 0.0 : best;
}

void SequoiaTable::build(int32_t m, int32_t l, int32_t b, int32_t parent,
                         std::vector<std::pair<int32_t, int32_t>>& out) const {
  // The root's children b, b - 1, ..., 1: peel off the b-th child's subtree, keep y for the rest.
  while (b > 0) {
    const int32_t y = split_[static_cast<size_t>((m * (max_l_ + 1) + l) * (k_ + 1) + b)];
    const int32_t child = static_cast<int32_t>(out.size());
    out.emplace_back(parent, b - 1);
    const int32_t sub_m = m - y, sub_l = l - 1;
    int32_t sub_b = 0;
    for (int32_t bb = 1; bb <= k_; ++bb)
      if (at(sub_m, sub_l, bb) > at(sub_m, sub_l, sub_b)) sub_b = bb;
    build(sub_m, sub_l, sub_b, child, out);
    m = y;
    --b;
  }
}

RankTree SequoiaTable::tree(int32_t nodes, int32_t depth) const {
  if (best(nodes, depth) == 0.0) fail("tree search: no tree of ", nodes, " nodes within depth ", depth);
  int32_t b = 0;
  for (int32_t bb = 1; bb <= k_; ++bb)
    if (at(nodes + 1, depth, bb) > at(nodes + 1, depth, b)) b = bb;
  std::vector<std::pair<int32_t, int32_t>> out;
  build(nodes + 1, depth, b, -1, out);
  return flatten(out);
}

namespace {

int32_t node_limit(const TreeSearchOptions& o, const ForwardCost& cost) {
  validate_positional_acceptance(o.acceptance, "tree search");
  if (o.max_nodes < 0) fail("tree search: max nodes must be >= 0, got ", o.max_nodes);
  if (o.max_depth < 0) fail("tree search: max depth must be >= 0, got ", o.max_depth);
  if (!(o.draft_cost_per_depth >= 0.0 && std::isfinite(o.draft_cost_per_depth)))
    fail_parameter("draft_cost", " must be a finite number >= 0, got ", o.draft_cost_per_depth);
  if (o.max_nodes > kMaxTreeSearchNodes)
    fail_parameter("max_nodes", " must be <= ", kMaxTreeSearchNodes, " (a draft tree's limit), got ", o.max_nodes);
  if (o.max_depth > kMaxTreeSearchDepth)
    fail_parameter("max_depth", " must be <= ", kMaxTreeSearchDepth, ", got ", o.max_depth);
  const int32_t nodes = std::min(o.max_nodes, cost.max_rows() - 1);
  const double steps = (nodes + 2.0) * (o.max_depth + 1.0) * (o.acceptance.size() + 1.0) * (nodes + 1.0) / 2.0;
  if (steps > kMaxTreeSearchSteps)
    fail_parameter("max_nodes", " ", nodes, " with max depth ", o.max_depth, " and ", o.acceptance.size(),
                   " acceptance rates needs ~", steps, " steps of Sequoia's table (bound ", kMaxTreeSearchSteps,
                   "): lower the nodes or the depth");
  return nodes;
}

TreeChoice choice(RankTree tree, const TreeSearchOptions& o, const ForwardCost& cost) {
  TreeChoice c;
  c.tokens_per_step = expected_tokens_per_step(tree, o.acceptance);
  c.step_cost = tree.max_depth() * o.draft_cost_per_depth + cost.at(tree.size() + 1);
  c.speedup = c.tokens_per_step * cost.at(1) / c.step_cost;
  c.shape = tree.uniform_shape();
  c.tree = std::move(tree);
  return c;
}

// More tokens per unit time wins; rates equal up to rounding go to the smaller tree.
bool better_rate(double rate_a, int64_t nodes_a, double rate_b, int64_t nodes_b) {
  if (rate_a > rate_b * (1 + 1e-12)) return true;
  if (rate_b > rate_a * (1 + 1e-12)) return false;
  return nodes_a < nodes_b;
}

bool better(const TreeChoice& a, const TreeChoice& b) {
  return better_rate(a.tokens_per_step / a.step_cost, a.tree.size(), b.tokens_per_step / b.step_cost, b.tree.size());
}

}  // namespace

TreeChoice optimal_tree(const TreeSearchOptions& o, const ForwardCost& cost) {
  const int32_t n_max = node_limit(o, cost);
  const SequoiaTable table(o.acceptance, n_max, o.max_depth);
  TreeChoice best = choice(RankTree{}, o, cost);
  for (int32_t n = 1; n <= n_max; ++n)
    for (int32_t d = 1; d <= o.max_depth; ++d) {
      if (table.best(n, d) == 0.0) continue;
      TreeChoice c = choice(table.tree(n, d), o, cost);
      if (better(c, best)) best = std::move(c);
    }
  return best;
}

TreeChoice best_uniform_tree(const TreeSearchOptions& o, const ForwardCost& cost) {
  const int32_t n_max = node_limit(o, cost);
  const int32_t k = static_cast<int32_t>(o.acceptance.size());
  std::vector<double> prefix(k + 1, 0.0);  // S(b) = p_1 + ... + p_b
  for (int32_t b = 1; b <= k; ++b) prefix[b] = prefix[b - 1] + o.acceptance[b - 1];
  TreeChoice best = choice(RankTree{}, o, cost);
  std::vector<int32_t> shape;
  int64_t visited = 0;
  // Depth-first over shapes b_1..b_d: F = 1 + sum_d prod_{i <= d} S(b_i), nodes = sum_d prod_{i <= d} b_i.
  std::function<void(int64_t, int64_t, double, double)> extend = [&](int64_t nodes, int64_t level, double reach,
                                                                     double f) {  // level = nodes at the last depth
    if (++visited > kMaxUniformShapes)
      fail_parameter("max_depth", " ", o.max_depth, " with max nodes ", n_max, " allows more than ", kMaxUniformShapes,
                     " uniform tree shapes: lower the depth or the nodes");
    if (!shape.empty()) {
      const double rate = f / (static_cast<double>(shape.size()) * o.draft_cost_per_depth + cost.at(nodes + 1));
      if (better_rate(rate, nodes, best.tokens_per_step / best.step_cost, best.tree.size()))
        best = choice(RankTree::uniform(shape), o, cost);
    }
    if (static_cast<int32_t>(shape.size()) >= o.max_depth) return;
    for (int32_t b = 1; b <= k; ++b) {
      const int64_t next_level = level * b;
      if (nodes + next_level > n_max) break;
      shape.push_back(b);
      extend(nodes + next_level, next_level, reach * prefix[b], f + reach * prefix[b]);
      shape.pop_back();
    }
  };
  extend(0, 1, 1.0, 1.0);
  return best;
}

}  // namespace specula
