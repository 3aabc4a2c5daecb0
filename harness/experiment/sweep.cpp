#include "harness/experiment/sweep.h"

#include <set>
#include <sstream>

#include "harness/generation/decoding_method.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

std::string make_id(const std::map<std::string, std::string>& values) {
  std::string id;
  for (const auto& [k, v] : values) id += (id.empty() ? "" : ";") + k + "=" + v;
  return id;
}

// Cartesian product of the axes selected by `keep`.
std::vector<std::map<std::string, std::string>> product(const ExperimentConfig& c, bool (*keep)(const std::string&)) {
  std::vector<std::map<std::string, std::string>> out = {{}};
  for (const auto& [key, values] : c.axes) {
    if (!keep(key) || values.empty()) continue;  // an axis no setting reads (no drafter where none drafts)
    std::vector<std::map<std::string, std::string>> next;
    for (const auto& partial : out)
      for (const std::string& v : values) {
        auto m = partial;
        m[key] = v;
        next.push_back(std::move(m));
      }
    out = std::move(next);
  }
  return out;
}

bool is_target_sampling(const std::string& key) { return key.rfind("sampling.", 0) == 0; }
bool is_any(const std::string&) { return true; }

}  // namespace

const std::string& Setting::get(const std::string& key) const {
  const auto it = values.find(key);
  if (it == values.end()) fail("setting has no value for '", key, "'");
  return it->second;
}

std::string Setting::get_or(const std::string& key, const std::string& fallback) const {
  const auto it = values.find(key);
  return it == values.end() ? fallback : it->second;
}

std::vector<Setting> expand_sweep(const ExperimentConfig& config) {
  // Bounded before the grid is built: each setting is held, and would take a run of its own.
  double grid = 1.0;
  std::string axes;
  for (const auto& [key, values] : config.axes)
    if (values.size() > 1) {
      grid *= static_cast<double>(values.size());
      axes += (axes.empty() ? "" : " x ") + key + " (" + std::to_string(values.size()) + ")";
    }
  if (grid > kMaxSweepSettings)
    fail(config.file, ": the sweep has ", static_cast<int64_t>(grid), " combinations of values (", axes,
         "), more than ", kMaxSweepSettings, "; split it into experiments of fewer");
  std::vector<Setting> out;
  for (const auto& values : product(config, is_target_sampling)) {
    Setting s;
    s.values = values;
    s.values["draft.method"] = "ar";
    s.baseline = true;
    s.id = make_id(s.values);
    s.baseline_id = s.id;
    out.push_back(s);
  }
  std::set<std::string> seen;
  for (auto values : product(config, is_any)) {
    const std::string method = values["draft.method"];
    if (method == "ar") continue;
    if (!parse_decoding_method(method).verifies_trees()) {
      values.erase("draft.tree");
      values.erase("draft.tree_sampling");
    } else {
      values.erase("draft.num_draft_tokens_schedule");  // a tree's shape is fixed
      values.erase("draft.confidence_threshold");
      if (values.count("draft.tree")) values.erase("draft.num_draft_tokens");  // the shape sets the depth
    }
    Setting s;
    s.values = values;
    s.id = make_id(values);
    if (!seen.insert(s.id).second) continue;  // an axis that did not apply collapsed two settings
    std::map<std::string, std::string> base;
    for (const auto& [k, v] : values)
      if (is_target_sampling(k)) base[k] = v;
    base["draft.method"] = "ar";
    s.baseline_id = make_id(base);
    out.push_back(s);
  }
  return out;
}

std::vector<Setting> recorded_settings(const std::vector<Setting>& settings) {
  std::vector<Setting> out;
  std::set<std::string> beams;
  for (const Setting& s : settings) {
    if (s.get_or("draft.method", "") == "beam") {
      std::string key;
      for (const auto& [k, v] : s.values)
        if (k.rfind("draft.", 0) != 0) key += k + "=" + v + ";";
      if (!beams.insert(key).second) continue;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<Setting> shard_of(const std::vector<Setting>& settings, int index, int count) {
  std::vector<Setting> mine;
  std::set<std::string> needed;
  int n = 0;
  for (const Setting& s : settings) {
    if (s.baseline) continue;
    if (n++ % count == index - 1) {
      mine.push_back(s);
      needed.insert(s.baseline_id);
    }
  }
  std::vector<Setting> out;
  for (const Setting& s : settings)
    if (s.baseline && needed.count(s.id)) out.push_back(s);
  out.insert(out.end(), mine.begin(), mine.end());
  return out;
}

std::pair<int, int> parse_shard(const std::string& text) {
  int i = 0, n = 0;
  char slash = 0;
  std::istringstream in(text);
  if (!(in >> i >> slash >> n) || slash != '/' || n < 1 || i < 1 || i > n || !in.eof())
    fail_parameter("shard", ": expected i/N with 1 <= i <= N, got '", text, "'");
  return {i, n};
}

}  // namespace specula
