#include "harness/runner/summary.h"

#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "verify/error.h"

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

}  // namespace

double expected_tokens_per_step(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double predicted_speedup(double alpha, int k, double c) { return expected_tokens_per_step(alpha, k) / (k * c + 1.0); }

std::vector<SummaryRow> summarize(const std::vector<RunRecord>& records) {
  std::map<std::string, Group> groups;
  std::vector<std::string> order;
  for (const RunRecord& r : records) {
    if (!groups.count(r.setting_id)) order.push_back(r.setting_id);
    groups[r.setting_id].records.push_back(&r);
  }
  // Baseline tokens/s per repetition and per-call target time.
  std::map<std::string, std::map<int, std::pair<double, double>>> base_tokens_time;  // id -> rep -> (tokens, s)
  std::map<std::string, std::pair<double, double>> base_target;                      // id -> (seconds, calls)
  std::map<std::string, std::map<std::pair<int, int>, std::vector<Token>>> base_tokens;
  for (const RunRecord& r : records) {
    if (!r.baseline) continue;
    auto& tt = base_tokens_time[r.setting_id][r.repetition];
    tt.first += r.metrics.new_tokens;
    tt.second += r.metrics.wall_seconds;
    base_target[r.setting_id].first += r.metrics.target_seconds;
    base_target[r.setting_id].second += r.metrics.target_calls;
    base_tokens[r.setting_id][{r.prompt_index, r.repetition}] = r.tokens;
  }

  std::vector<SummaryRow> rows;
  for (const std::string& id : order) {
    const Group& g = groups[id];
    const RunRecord& first = *g.records.front();
    SummaryRow row;
    row.setting = first.setting;
    row.setting_id = id;
    row.baseline = first.baseline;
    row.lossy = first.setting.count("draft.method") && first.setting.at("draft.method") == "typical";
    GenerationMetrics total;
    std::map<int, std::pair<double, double>> per_rep;
    for (const RunRecord* r : g.records) {
      total.merge(r->metrics);
      per_rep[r->repetition].first += r->metrics.new_tokens;
      per_rep[r->repetition].second += r->metrics.wall_seconds;
    }
    total.wall_seconds = 0;
    for (const RunRecord* r : g.records) total.wall_seconds += r->metrics.wall_seconds;
    row.prompts = static_cast<int64_t>(g.records.size());
    row.tokens_per_s = total.wall_seconds > 0 ? total.new_tokens / total.wall_seconds : 0;
    row.q_zero_errors = total.q_zero_errors;
    const auto bt = base_tokens_time.find(first.baseline_id);
    if (bt != base_tokens_time.end()) {
      double tok = 0, sec = 0;
      for (const auto& [rep, ts] : bt->second) tok += ts.first, sec += ts.second;
      row.baseline_tokens_per_s = sec > 0 ? tok / sec : 0;
      std::vector<double> speedups;
      for (const auto& [rep, ts] : per_rep) {
        const auto b = bt->second.find(rep);
        if (b == bt->second.end() || ts.second <= 0 || b->second.second <= 0) continue;
        speedups.push_back((ts.first / ts.second) / (b->second.first / b->second.second));
      }
      if (!speedups.empty()) {
        double mean = 0;
        for (double s : speedups) mean += s;
        mean /= speedups.size();
        row.speedup = mean;
        row.speedup_ci_low = row.speedup_ci_high = mean;
        if (speedups.size() >= 2) {
          double var = 0;
          for (double s : speedups) var += (s - mean) * (s - mean);
          var /= speedups.size() - 1;
          const boost::math::students_t t(static_cast<double>(speedups.size() - 1));
          const double half = boost::math::quantile(boost::math::complement(t, 0.025)) * std::sqrt(var / speedups.size());
          row.speedup_ci_low = mean - half;
          row.speedup_ci_high = mean + half;
        }
      }
    }
    if (!row.baseline) {
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
      row.predicted_tau = expected_tokens_per_step(row.alpha, k);
      const auto bt_calls = base_target.find(first.baseline_id);
      const double t_target = bt_calls != base_target.end() && bt_calls->second.second > 0
                                  ? bt_calls->second.first / bt_calls->second.second
                                  : NAN;
      const double draft_per_token = total.steps && k ? total.draft_seconds / (static_cast<double>(total.steps) * k) : NAN;
      row.c = draft_per_token / t_target;
      const bool tree = first.setting.count("draft.tree") > 0;
      row.predicted_speedup = tree ? NAN : predicted_speedup(row.alpha, k, row.c);
      if (temperature_of(first.setting) == 0.0) {
        bool all_equal = true;
        const auto bt_tokens = base_tokens.find(first.baseline_id);
        for (const RunRecord* r : g.records) {
          if (bt_tokens == base_tokens.end()) break;
          const auto it = bt_tokens->second.find({r->prompt_index, r->repetition});
          all_equal = all_equal && it != bt_tokens->second.end() && it->second == r->tokens;
        }
        row.greedy_lossless = bt_tokens == base_tokens.end() ? "" : (all_equal ? "yes" : "no");
      }
    }
    rows.push_back(row);
  }
  return rows;
}

void write_summary_csv(const std::vector<SummaryRow>& rows, const std::string& path) {
  std::set<std::string> keys;
  for (const SummaryRow& r : rows)
    for (const auto& [k, v] : r.setting) keys.insert(k);
  std::ofstream out(path);
  if (!out) fail(path, ": cannot write summary");
  for (const std::string& k : keys) out << csv_escape(k) << ",";
  out << "lossy,prompts,draft_positions,acceptance_rate,alpha,expected_acceptance,tau,predicted_tau,tokens_per_s,"
         "baseline_tokens_per_s,speedup,speedup_ci_low,speedup_ci_high,c,predicted_speedup,"
         "measured_over_predicted,per_position_acceptance,accepted_length_histogram,greedy_lossless,q_zero_errors\n";
  for (const SummaryRow& r : rows) {
    for (const std::string& k : keys) {
      const auto it = r.setting.find(k);
      out << csv_escape(it == r.setting.end() ? "" : it->second) << ",";
    }
    std::string positions, histogram;
    for (size_t i = 0; i < r.per_position_acceptance.size(); ++i) positions += (i ? ";" : "") + fmt(r.per_position_acceptance[i]);
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
        << r.greedy_lossless << "," << r.q_zero_errors << "\n";
  }
}

}  // namespace specula
