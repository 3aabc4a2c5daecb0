#include "harness/experiment/summary.h"

#include <algorithm>
#include <boost/math/distributions/fisher_f.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "harness/generation/draft_schedule.h"
#include "harness/io/output_file.h"
#include "kernels/shared/error.h"
#include "verify/verifiers/verify_methods.h"

namespace specula {
namespace {

struct Group {
  std::vector<const RunRecord*> records;
};

double temperature_of(const std::map<std::string, std::string>& setting) {
  const auto it = setting.find("sampling.temperature");
  return it == setting.end() ? 1.0 : std::stod(it->second);
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string fmt(double v) {
  if (std::isnan(v)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// Mean of per-repetition speedups and its 95% Student-t interval across repetitions.
struct MeanCi {
  double mean = 0, low = 0, high = 0;
};
MeanCi mean_ci(const std::vector<double>& v) {
  MeanCi r;
  if (v.empty()) return r;
  for (double s : v) r.mean += s;
  r.mean /= v.size();
  r.low = r.high = r.mean;
  if (v.size() >= 2) {
    double var = 0;
    for (double s : v) var += (s - r.mean) * (s - r.mean);
    var /= v.size() - 1;
    const boost::math::students_t t(static_cast<double>(v.size() - 1));
    const double half = boost::math::quantile(boost::math::complement(t, 0.025)) * std::sqrt(var / v.size());
    r.low = r.mean - half;
    r.high = r.mean + half;
  }
  return r;
}

// Tokens, wall seconds and prompt seconds of one repetition.
struct Totals {
  double tokens = 0, wall = 0, prompt = 0;
  void add(const GenerationMetrics& m) {
    tokens += m.new_tokens;
    wall += m.wall_seconds;
    prompt += m.prompt_seconds;
  }
  void add(const Totals& o) {
    tokens += o.tokens;
    wall += o.wall;
    prompt += o.prompt;
  }
  double rate() const { return wall > 0 ? tokens / wall : 0; }
  double decode_rate() const { return wall - prompt > 0 ? tokens / (wall - prompt) : 0; }
};

// Mean and 95% interval of per-prompt means (repetitions of one prompt are not independent: at T = 0 they
// are the same computation), NaN bounds when fewer than two prompts. In lockstep the groups are batches.
MeanCi mean_ci_over_prompts(const std::map<int, std::vector<double>>& by_prompt) {
  std::vector<double> means;
  for (const auto& [prompt, v] : by_prompt) {
    double sum = 0;
    for (double x : v) sum += x;
    means.push_back(sum / static_cast<double>(v.size()));
  }
  MeanCi r = mean_ci(means);
  if (means.size() < 2) r.low = r.high = NAN;
  return r;
}

// Whether the repetitions differ beyond chance: a two-way additive analysis of variance of the decode
// ratios, prompts as blocks (they legitimately differ) and repetitions as the factor (they should not: the
// same prompts, the same work), F-test at 1%. Needs every (prompt, repetition) cell once, >= 2 of each.
std::string repetition_drift(const std::map<std::pair<int, int>, double>& cells) {
  std::set<int> prompts, reps;
  for (const auto& [key, v] : cells) prompts.insert(key.first), reps.insert(key.second);
  const double P = static_cast<double>(prompts.size()), R = static_cast<double>(reps.size());
  if (P < 2 || R < 2 || cells.size() != prompts.size() * reps.size()) return "";
  std::map<int, double> prompt_mean, rep_mean;
  double grand = 0;
  for (const auto& [key, v] : cells) {
    prompt_mean[key.first] += v / R;
    rep_mean[key.second] += v / P;
    grand += v / (P * R);
  }
  double ss_rep = 0, ss_error = 0;
  for (const auto& [rep, m] : rep_mean) ss_rep += P * (m - grand) * (m - grand);
  for (const auto& [key, v] : cells) {
    const double e = v - prompt_mean[key.first] - rep_mean[key.second] + grand;
    ss_error += e * e;
  }
  const double df_rep = R - 1, df_error = (R - 1) * (P - 1);
  if (ss_error <= 0) return ss_rep > 0 ? "yes" : "no";
  const double f = (ss_rep / df_rep) / (ss_error / df_error);
  const double p_value = boost::math::cdf(boost::math::complement(boost::math::fisher_f(df_rep, df_error), f));
  return p_value < 0.01 ? "yes" : "no";
}

// Speedups as ratios within pairs (see summary.h), and whether repetitions drifted apart. Records decoded in
// lockstep share their batch's timing: their ratios are grouped by repetition (one batch each), the interval is
// over batches, and there is no drift test (a repetition is the unit, not a factor).
void apply_pairs(const std::vector<const RunRecord*>& records, SummaryRow& row) {
  std::map<int, std::vector<double>> ratios, decode_ratios;  // by prompt (by repetition in lockstep)
  std::map<std::pair<int, int>, double> decode_cells;        // (prompt, repetition)
  double load = 0;
  int64_t loads = 0, pairs = 0;
  bool lockstep = !records.empty();
  for (const RunRecord* r : records) lockstep = lockstep && r->lockstep;
  for (const RunRecord* r : records) {
    const int group = lockstep ? r->repetition : r->prompt_index;
    const GenerationMetrics& m = r->metrics;
    const PairedBaseline& b = r->pair;
    if (m.wall_seconds <= 0 || b.wall_seconds <= 0 || m.new_tokens <= 0 || b.new_tokens <= 0) continue;
    ++pairs;
    ratios[group].push_back((m.new_tokens / m.wall_seconds) / (b.new_tokens / b.wall_seconds));
    const double decode = m.wall_seconds - m.prompt_seconds, base_decode = b.wall_seconds - b.prompt_seconds;
    if (decode > 0 && base_decode > 0) {
      const double ratio = (m.new_tokens / decode) / (b.new_tokens / base_decode);
      decode_ratios[group].push_back(ratio);
      decode_cells[{r->prompt_index, r->repetition}] = ratio;
    }
    for (double l : {b.load_before, b.load_after})
      if (!std::isnan(l)) load += l, ++loads;
  }
  if (pairs == 0) return;
  const MeanCi s = mean_ci_over_prompts(ratios);
  row.speedup = s.mean, row.speedup_ci_low = s.low, row.speedup_ci_high = s.high;
  if (!decode_ratios.empty()) {
    const MeanCi d = mean_ci_over_prompts(decode_ratios);
    row.decode_speedup = d.mean, row.decode_speedup_ci_low = d.low, row.decode_speedup_ci_high = d.high;
  }
  row.pairs = pairs;
  row.pair_load_average = loads ? load / static_cast<double>(loads) : NAN;
  row.pair_drift = lockstep ? "" : repetition_drift(decode_cells);
}

}  // namespace

double expected_tokens_per_step(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double predicted_speedup(double alpha, int k, double c) { return expected_tokens_per_step(alpha, k) / (k * c + 1.0); }

namespace {

// The baseline settings' measurements, by setting id.
struct Baselines {
  std::map<std::string, std::map<int, Totals>> totals;      // id -> repetition -> totals
  std::map<std::string, std::pair<double, double>> target;  // id -> (seconds, 1-token decoding calls)
  std::map<std::string, std::map<std::pair<int, int>, std::vector<Token>>> tokens;  // id -> (prompt, rep) -> ids
};

Baselines baselines_of(const std::vector<RunRecord>& records) {
  Baselines b;
  for (const RunRecord& r : records) {
    if (!r.baseline) continue;
    b.totals[r.setting_id][r.repetition].add(r.metrics);
    b.target[r.setting_id].first += r.metrics.target_seconds;
    // The first call (the prefill) is in the prompt time when that was measured.
    b.target[r.setting_id].second += r.metrics.target_calls - (r.metrics.prompt_seconds > 0 ? 1 : 0);
    b.tokens[r.setting_id][{r.prompt_index, r.repetition}] = r.tokens;
  }
  return b;
}

// Speedups against the setting's baseline: per repetition, the ratio of the two rates, and their mean and CI.
void add_speedups(const std::map<int, Totals>& per_rep, const std::map<int, Totals>& base_per_rep, SummaryRow& row) {
  Totals base;
  for (const auto& [rep, ts] : base_per_rep) base.add(ts);
  row.baseline_tokens_per_s = base.rate();
  row.baseline_decode_tokens_per_s = base.decode_rate();
  std::vector<double> speedups, decode_speedups;
  for (const auto& [rep, ts] : per_rep) {
    const auto b = base_per_rep.find(rep);
    if (b == base_per_rep.end() || ts.rate() <= 0 || b->second.rate() <= 0) continue;
    speedups.push_back(ts.rate() / b->second.rate());
    if (ts.decode_rate() > 0 && b->second.decode_rate() > 0)
      decode_speedups.push_back(ts.decode_rate() / b->second.decode_rate());
  }
  const MeanCi s = mean_ci(speedups), d = mean_ci(decode_speedups);
  row.speedup = s.mean, row.speedup_ci_low = s.low, row.speedup_ci_high = s.high;
  row.decode_speedup = d.mean, row.decode_speedup_ci_low = d.low, row.decode_speedup_ci_high = d.high;
}

// Baseline seconds per decoded token summed over the setting's steps, Σ steps × unit: the denominator that puts
// its target and draft times in 1-token target calls. With paired records each record's unit is its own pair's
// (the baseline generation timed beside it: decoding time / tokens), so the machine's drift between settings
// never enters the cost model, as it never enters the paired speedup; 0 when a record has no usable pair.
double paired_step_units(const std::vector<const RunRecord*>& records) {
  double total = 0;
  for (const RunRecord* r : records) {
    const PairedBaseline& b = r->pair;
    const double decode = b.wall_seconds - b.prompt_seconds;
    if (!b.present || b.new_tokens <= 0 || !(decode > 0)) return 0;
    total += static_cast<double>(r->metrics.steps) * decode / static_cast<double>(b.new_tokens);
  }
  return total;
}

// Whether a row's chains may be shorter than its K (harness/generation/draft_schedule.h): its schedule and its
// confidence threshold, at its draft depth.
bool k_moves(const SummaryRow& row) {
  const auto schedule = row.setting.find("draft.num_draft_tokens_schedule");
  const auto threshold = row.setting.find("draft.confidence_threshold");
  return moves_k(schedule == row.setting.end() ? DraftSchedule::constant : parse_draft_schedule(schedule->second),
                 row.draft_positions,
                 threshold == row.setting.end() ? 0.0 : parse_confidence_threshold(threshold->second));
}

// A speculative setting's acceptance statistics and its cost model (verify/ALGORITHMS.md §7), with the baseline's
// time per target call as the unit: each pair's own when every record is paired, else the baseline setting's
// mean over the run.
void add_speculation(const std::vector<const RunRecord*>& records, const GenerationMetrics& total,
                     const RunRecord& first, const Baselines& baselines, SummaryRow& row) {
  row.draft_positions = static_cast<int32_t>(total.position_reached.size());
  row.acceptance_rate = total.acceptance_rate();
  int64_t reached = 0;
  for (int64_t v : total.position_reached) reached += v;
  row.alpha = reached ? static_cast<double>(total.accepted) / reached : 0;
  row.expected_acceptance = total.expected_acceptance();
  row.tau = total.mean_accepted_length();
  row.per_position_acceptance = total.per_position_acceptance();
  row.accepted_length_histogram = total.accepted_histogram;
  const int k = row.draft_positions;
  // Leviathan et al.'s formulas take one K for every step; a schedule that moves it has no such K.
  const bool moving_k = k_moves(row);
  row.predicted_tau = moving_k ? NAN : expected_tokens_per_step(row.alpha, k);
  const auto bt_calls = baselines.target.find(first.baseline_id);
  const double t_target = bt_calls != baselines.target.end() && bt_calls->second.second > 0
                              ? bt_calls->second.first / bt_calls->second.second
                              : NAN;
  const double paired = paired_step_units(records);
  const double step_units = paired > 0 ? paired : static_cast<double>(total.steps) * t_target;
  // Per draft token: K of them a step, or as many as a moving K drafted on average.
  const double drafted = moving_k && total.steps ? static_cast<double>(total.proposed) / total.steps : k;
  row.c = total.steps && drafted > 0 ? total.draft_seconds / (step_units * drafted) : NAN;
  const bool tree = first.setting.count("draft.tree") > 0;
  row.predicted_speedup = tree || moving_k ? NAN : predicted_speedup(row.alpha, k, row.c);
  row.verify_cost = total.steps > 0 ? total.target_seconds / step_units : NAN;
  row.draft_cost = total.steps > 0 ? total.draft_seconds / step_units : NAN;
  row.cost_model_speedup = row.tau / (row.draft_cost + row.verify_cost);
}

// The cost model with another machine's step costs (cost_profile.h): each step's target call costed by its
// rows (for a lockstep batch, on the curve of `batch` sequences a step, by the rows of the step's widest call, which
// the batch's pooled step pads every call to), the drafting by the profile's draft model when it measured it alone,
// else as this run measured it.
void add_profile_prediction(const GenerationMetrics& total, const std::string& drafter, const CostProfile& profile,
                            int64_t batch, SummaryRow& row) {
  // Records written before the widest rows were counted cost each sequence by its own.
  const std::vector<int64_t>& histogram =
      batch > 1 && !total.lockstep_rows_histogram.empty() ? total.lockstep_rows_histogram : total.verify_rows_histogram;
  int64_t steps = 0;
  double verify = 0;
  for (size_t r = 0; r < histogram.size(); ++r) {
    if (histogram[r] == 0) continue;
    steps += histogram[r];
    verify += static_cast<double>(histogram[r]) * profile.verify_cost(static_cast<double>(r), batch);
  }
  // Records without rows, steps beyond the profile's rows, or a batch it did not measure: nothing to cost.
  if (steps == 0 || steps != total.steps || !std::isfinite(verify)) return;
  row.profile_verify_cost = verify / static_cast<double>(steps);
  const std::optional<double> draft = batch == 1 ? profile.draft_cost(drafter) : std::nullopt;
  if (draft) {
    row.profile_draft_cost = static_cast<double>(total.draft_calls) / static_cast<double>(steps) * *draft;
    row.profile_draft_source = "profile";
  } else {
    row.profile_draft_cost = row.draft_cost;
    row.profile_draft_source = "this run";
  }
  row.profile_speedup = row.tau / (row.profile_draft_cost + row.profile_verify_cost);
}

// The sequences a setting decoded per step: those of its largest repetition when its records ran in lockstep (a
// repetition's prompts are one batch), else 1.
int64_t lockstep_batch(const std::vector<const RunRecord*>& records) {
  std::map<int, int64_t> per_repetition;
  for (const RunRecord* r : records)
    if (r->lockstep) ++per_repetition[r->repetition];
  int64_t batch = 1;
  for (const auto& [repetition, n] : per_repetition) batch = std::max(batch, n);
  return batch;
}

// At T = 0: "yes" when every sequence equals its baseline's, "no" otherwise, "" without a baseline.
std::string greedy_lossless(const std::vector<const RunRecord*>& records, const std::string& baseline_id,
                            const Baselines& baselines) {
  const auto bt_tokens = baselines.tokens.find(baseline_id);
  if (bt_tokens == baselines.tokens.end()) return "";
  for (const RunRecord* r : records) {
    const auto it = bt_tokens->second.find({r->prompt_index, r->repetition});
    if (it == bt_tokens->second.end() || it->second != r->tokens) return "no";
  }
  return "yes";
}

}  // namespace

std::vector<SummaryRow> summarize(const std::vector<RunRecord>& records, const std::optional<CostProfile>& profile) {
  std::map<std::string, Group> groups;
  std::vector<std::string> order;
  for (const RunRecord& r : records) {
    if (!groups.count(r.setting_id)) order.push_back(r.setting_id);
    groups[r.setting_id].records.push_back(&r);
  }
  const Baselines baselines = baselines_of(records);
  std::vector<SummaryRow> rows;
  for (const std::string& id : order) {
    const Group& g = groups[id];
    const RunRecord& first = *g.records.front();
    SummaryRow row;
    row.setting = first.setting;
    row.setting_id = id;
    row.baseline = first.baseline;
    if (first.setting.count("draft.method"))
      if (const std::optional<VerifyMethod> m = find_verify_method(first.setting.at("draft.method")))
        row.lossy = is_lossy(*m);
    GenerationMetrics total;
    std::map<int, Totals> per_rep;
    Totals all;
    for (const RunRecord* r : g.records) {
      total.merge(r->metrics);
      per_rep[r->repetition].add(r->metrics);
      all.add(r->metrics);
    }
    row.prompts = static_cast<int64_t>(g.records.size());
    row.tokens_per_s = all.rate();
    row.decode_tokens_per_s = all.decode_rate();
    row.q_zero_errors = total.q_zero_errors;
    if (total.steps > 0) {
      row.device_waits_per_step = static_cast<double>(total.device_waits) / static_cast<double>(total.steps);
      row.step_graphs_evicted_per_step =
          static_cast<double>(total.step_graphs_evicted) / static_cast<double>(total.steps);
    }
    if (total.step_graph_runs > 0)
      row.step_graph_replay_share =
          static_cast<double>(total.step_graph_replays) / static_cast<double>(total.step_graph_runs);
    if (const auto bt = baselines.totals.find(first.baseline_id); bt != baselines.totals.end())
      add_speedups(per_rep, bt->second, row);
    if (row.baseline) {
      rows.push_back(row);
      continue;
    }
    if (std::all_of(g.records.begin(), g.records.end(), [](const RunRecord* r) { return r->pair.present; }))
      apply_pairs(g.records, row);
    add_speculation(g.records, total, first, baselines, row);
    if (profile) {
      const auto drafter = first.setting.find("draft.drafter");
      add_profile_prediction(total, drafter == first.setting.end() ? "" : drafter->second, *profile,
                             lockstep_batch(g.records), row);
    }
    if (temperature_of(first.setting) == 0.0)
      row.greedy_lossless = greedy_lossless(g.records, first.baseline_id, baselines);
    rows.push_back(row);
  }
  return rows;
}

void print_summary_table(const std::vector<SummaryRow>& rows, std::ostream& os,
                         const std::optional<CostProfile>& profile) {
  std::vector<const SummaryRow*> spec;
  for (const SummaryRow& r : rows)
    if (!r.baseline) spec.push_back(&r);
  std::stable_sort(spec.begin(), spec.end(),
                   [](const SummaryRow* a, const SummaryRow* b) { return a->decode_speedup > b->decode_speedup; });
  auto value = [](const SummaryRow& r, const char* key) {
    const auto it = r.setting.find(key);
    return it == r.setting.end() ? std::string() : it->second;
  };
  // The swept axes the columns do not show (a regex, top_p, a sibling scheme) where they differ between the settings
  // that have them: at the end of each line, so that two settings never read as one.
  static const std::set<std::string> shown = {"draft.drafter", "draft.method", "draft.num_draft_tokens", "draft.tree",
                                              "sampling.temperature"};
  std::set<std::string> keys;
  for (const SummaryRow* r : spec)
    for (const auto& [key, v] : r->setting)
      if (!shown.count(key)) keys.insert(key);
  std::vector<std::string> others;
  for (const std::string& key : keys) {
    std::set<std::string> values;
    for (const SummaryRow* r : spec)
      if (r->setting.count(key)) values.insert(value(*r, key.c_str()));
    if (values.size() > 1) others.push_back(key);
  }
  // The drafter column: a spec longer than it is cut in the middle, keeping the tail where paths differ (a model's
  // file name). Where two specs would still read alike, the column widens to the longest, whole.
  constexpr size_t kDrafterWidth = 36, kHead = 16;
  std::map<std::string, std::string> drafter_text;
  size_t width = kDrafterWidth;
  {
    std::set<std::string> specs, texts;
    for (const SummaryRow* r : spec) specs.insert(value(*r, "draft.drafter"));
    bool alike = false;
    for (const std::string& d : specs) {
      const std::string cut =
          d.size() <= kDrafterWidth ? d : d.substr(0, kHead) + "..." + d.substr(d.size() - (kDrafterWidth - kHead - 3));
      alike = alike || !texts.insert(cut).second;
      drafter_text[d] = cut;
      width = std::max(width, d.size());
    }
    if (alike)
      for (auto& [d, text] : drafter_text) text = d;
    else
      width = kDrafterWidth;
  }
  const auto drafter_column = [&](const std::string& text) { return text + std::string(width + 1 - text.size(), ' '); };
  char line[256];
  std::snprintf(line, sizeof line, "%-7s %-7s %4s %6s %6s %6s %6s %20s %9s %10s %5s\n", "method", "K/tree", "T",
                "alpha", "tau", "c", "verify", "decode speedup (CI)", "Leviathan", "cost model", "drift");
  std::string header = drafter_column("drafter") + line;
  if (profile) header.insert(header.size() - 1, "    profile");
  if (!others.empty()) header.insert(header.size() - 1, "  other axes");
  os << header;
  for (const SummaryRow* r : spec) {
    const std::string tree = value(*r, "draft.tree");
    // Beam search drafts nothing: no drafter and no draft length to show.
    const bool beam = value(*r, "draft.method") == "beam";
    const std::string k = value(*r, "draft.num_draft_tokens");
    const std::string shape = beam ? "-" : !tree.empty() ? tree : k_moves(*r) ? "<=" + k : k;
    char ci[64];
    std::snprintf(ci, sizeof ci, "%.2f (%.2f-%.2f)", r->decode_speedup, r->decode_speedup_ci_low,
                  r->decode_speedup_ci_high);
    std::snprintf(line, sizeof line, "%-7s %-7s %4s %6.2f %6.2f %6.3f %6.2f %20s %9s %10.2f %5s\n",
                  value(*r, "draft.method").c_str(), shape.c_str(), value(*r, "sampling.temperature").c_str(), r->alpha,
                  r->tau, r->c, r->verify_cost, ci,
                  std::isnan(r->predicted_speedup) ? "-" : fmt(r->predicted_speedup).substr(0, 5).c_str(),
                  r->cost_model_speedup, r->pair_drift.empty() ? "-" : r->pair_drift.c_str());
    std::string text = drafter_column(beam ? "-" : drafter_text.at(value(*r, "draft.drafter"))) + line;
    if (profile) {
      char predicted[32];
      std::snprintf(predicted, sizeof predicted, " %10s",
                    std::isnan(r->profile_speedup) ? "-" : fmt(r->profile_speedup).substr(0, 5).c_str());
      text.insert(text.size() - 1, predicted);
    }
    if (!others.empty()) {
      std::string axes = " ";
      for (const std::string& key : others)
        if (r->setting.count(key))
          axes += " " + (key.rfind("sampling.", 0) == 0 ? key.substr(9) : key) + "=" + value(*r, key.c_str());
      text.insert(text.size() - 1, axes);
    }
    os << text;
  }
  if (profile)
    os << "profile: the speedup each setting would have on " << profile->machine << " (" << profile->device << ", "
       << profile->file << "), from this run's acceptance and that machine's step costs\n";
}

void write_summary_csv(const std::vector<SummaryRow>& rows, const std::string& path) {
  std::set<std::string> keys;
  for (const SummaryRow& r : rows)
    for (const auto& [k, v] : r.setting) keys.insert(k);
  std::ostringstream out;
  for (const std::string& k : keys) out << csv_escape(k) << ",";
  out << "lossy,prompts,draft_positions,acceptance_rate,alpha,expected_acceptance,tau,predicted_tau,tokens_per_s,"
         "baseline_tokens_per_s,speedup,speedup_ci_low,speedup_ci_high,c,predicted_speedup,"
         "measured_over_predicted,per_position_acceptance,accepted_length_histogram,greedy_lossless,q_zero_errors,"
         "decode_tokens_per_s,baseline_decode_tokens_per_s,decode_speedup,decode_speedup_ci_low,"
         "decode_speedup_ci_high,decode_over_predicted,verify_cost,cost_model_speedup,decode_over_cost_model,pairs,"
         "pair_load_average,pair_drift,profile_verify_cost,profile_draft_cost,profile_draft_source,profile_speedup\n";
  for (const SummaryRow& r : rows) {
    for (const std::string& k : keys) {
      const auto it = r.setting.find(k);
      out << csv_escape(it == r.setting.end() ? "" : it->second) << ",";
    }
    std::string positions, histogram;
    for (size_t i = 0; i < r.per_position_acceptance.size(); ++i)
      positions += (i ? ";" : "") + fmt(r.per_position_acceptance[i]);
    for (size_t i = 0; i < r.accepted_length_histogram.size(); ++i)
      histogram += (i ? ";" : "") + std::to_string(r.accepted_length_histogram[i]);
    const bool spec = !r.baseline;
    out << (r.lossy ? "yes" : "no") << "," << r.prompts << "," << r.draft_positions << ","
        << (spec ? fmt(r.acceptance_rate) : "") << "," << (spec ? fmt(r.alpha) : "") << ","
        << (spec ? fmt(r.expected_acceptance) : "") << "," << (spec ? fmt(r.tau) : "") << ","
        << (spec ? fmt(r.predicted_tau) : "") << "," << fmt(r.tokens_per_s) << "," << fmt(r.baseline_tokens_per_s)
        << "," << fmt(r.speedup) << "," << fmt(r.speedup_ci_low) << "," << fmt(r.speedup_ci_high) << ","
        << (spec ? fmt(r.c) : "") << "," << (spec ? fmt(r.predicted_speedup) : "") << ","
        << (spec ? fmt(r.speedup / r.predicted_speedup) : "") << "," << positions << "," << histogram << ","
        << r.greedy_lossless << "," << r.q_zero_errors << "," << fmt(r.decode_tokens_per_s) << ","
        << fmt(r.baseline_decode_tokens_per_s) << "," << fmt(r.decode_speedup) << "," << fmt(r.decode_speedup_ci_low)
        << "," << fmt(r.decode_speedup_ci_high) << "," << (spec ? fmt(r.decode_speedup / r.predicted_speedup) : "")
        << "," << (spec ? fmt(r.verify_cost) : "") << "," << (spec ? fmt(r.cost_model_speedup) : "") << ","
        << (spec ? fmt(r.decode_speedup / r.cost_model_speedup) : "") << "," << r.pairs << ","
        << (r.pairs ? fmt(r.pair_load_average) : "") << "," << r.pair_drift << "," << fmt(r.profile_verify_cost) << ","
        << fmt(r.profile_draft_cost) << "," << r.profile_draft_source << "," << fmt(r.profile_speedup) << "\n";
  }
  write_output_file(path, out.str(), "summary");
}

}  // namespace specula
