// The sweep: the Cartesian product of an experiment's axes, in a fixed order, with the autoregressive
// baseline each speculative setting is compared with (one baseline per distinct target sampler setting).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/experiment/experiment_config.h"

namespace specula {

struct Setting {
  std::map<std::string, std::string> values;  // "section.key" -> one value per axis
  std::string id;                             // "draft.method=chain;draft.num_draft_tokens=4;..."
  bool baseline = false;                      // the autoregressive run for its [sampling] values
  std::string baseline_id;                    // the id of the baseline this setting is compared with
  const std::string& get(const std::string& key) const;
  std::string get_or(const std::string& key, const std::string& fallback) const;
};

// The most combinations of values a sweep may have (expand_sweep refuses more, naming its axes).
inline constexpr double kMaxSweepSettings = 65536;

// Baselines first (one per distinct [sampling] combination), then every speculative setting. Settings
// whose axes do not apply are dropped (a tree shape without method tree, tree_sampling without a tree).
std::vector<Setting> expand_sweep(const ExperimentConfig& config);

// The settings that write records of their own. Beam search ignores the draft axes, so beam settings that
// differ only in them share one search, recorded under the first one's id.
std::vector<Setting> recorded_settings(const std::vector<Setting>& settings);

// The `index`-th (1-based) of `count` deterministic slices: speculative settings are dealt round-robin;
// each shard keeps the baselines its settings need.
std::vector<Setting> shard_of(const std::vector<Setting>& settings, int index, int count);
// "2/4" -> (2, 4); throws naming the option on bad input.
std::pair<int, int> parse_shard(const std::string& text);

}  // namespace specula
