#include "harness/experiment/cost_profile.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <type_traits>

#include "harness/io/input_file.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "specula cost profile";

// The field `key` of `object` as T; Error naming the file and the field's path otherwise.
template <typename T>
T field(const json& object, const char* key, const std::string& where, const std::string& file) {
  if (!object.is_object() || !object.contains(key))
    fail("cost profile ", file, ": missing field ", where.empty() ? "" : where + ".", key);
  try {
    const json& value = object.at(key);
    if constexpr (std::is_integral_v<T>) {  // a whole number that fits: get<int> would truncate 1.7 and wrap 2^40
      const bool fits = value.is_number_unsigned()  ? value.get<uint64_t>() <= uint64_t{std::numeric_limits<T>::max()}
                        : value.is_number_integer() ? value.get<int64_t>() >= int64_t{std::numeric_limits<T>::min()} &&
                                                          value.get<int64_t>() <= int64_t{std::numeric_limits<T>::max()}
                                                    : false;
      if (!fits)
        fail("cost profile ", file, ": field ", where.empty() ? "" : where + ".", key, " must be a whole number in [",
             std::numeric_limits<T>::min(), ", ", std::numeric_limits<T>::max(), "], got ", value.dump());
    }
    return value.get<T>();
  } catch (const json::exception&) {
    fail("cost profile ", file, ": field ", where.empty() ? "" : where + ".", key, " has the wrong type (",
         object.at(key).dump(), ")");
  }
}

double positive_cost(const json& entry, const std::string& where, const std::string& file) {
  const double cost = field<double>(entry, "cost", where, file);
  if (!std::isfinite(cost) || cost <= 0) fail("cost profile ", file, ": ", where, ".cost must be > 0, got ", cost);
  return cost;
}

const json& model_case(const json& model, const std::string& name) {
  for (const json& c : model.at("cases"))
    if (c.at("name") == name) return c;
  fail("forward report: model ", model.at("model").get<std::string>(), " has no '", name, "' case");
}

// cost(r) on a curve of points (ascending rows, first {1, 1}): piecewise linear, NaN below 1 row or beyond the last.
double curve_cost(const std::vector<CostProfile::Point>& curve, double r) {
  if (!(r >= 1) || curve.empty() || r > static_cast<double>(curve.back().rows)) return NAN;
  for (size_t i = 1; i < curve.size(); ++i)
    if (r <= static_cast<double>(curve[i].rows)) {
      const CostProfile::Point& a = curve[i - 1];
      const CostProfile::Point& b = curve[i];
      const double t = (r - static_cast<double>(a.rows)) / static_cast<double>(b.rows - a.rows);
      return a.cost + t * (b.cost - a.cost);
    }
  return curve.front().cost;  // r == 1 with a one-point curve
}

// A curve of (rows, cost) points at `where` in the file: a non-empty array, rows ascending from the 1-token step
// {rows: 1, cost: 1}, costs positive.
std::vector<CostProfile::Point> read_curve(const json& rows, const std::string& where, const std::string& path) {
  if (!rows.is_array() || rows.empty()) fail("cost profile ", path, ": ", where, " must be a non-empty array");
  std::vector<CostProfile::Point> curve;
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!rows[i].is_object() || !rows[i].contains("rows") || !rows[i]["rows"].is_number_integer())
      fail("cost profile ", path, ": ", at, ".rows must be a whole number of rows");
    CostProfile::Point point{rows[i]["rows"].get<int64_t>(), positive_cost(rows[i], at, path)};
    if (i == 0 && (point.rows != 1 || point.cost != 1.0))
      fail("cost profile ", path, ": ", at, " must be the 1-token step {rows: 1, cost: 1}, got rows ", point.rows,
           ", cost ", point.cost);
    if (i > 0 && point.rows <= curve.back().rows)
      fail("cost profile ", path, ": ", at, ".rows must ascend, got ", point.rows, " after ", curve.back().rows);
    curve.push_back(point);
  }
  return curve;
}

// A profile's curve from forward cases of `sequences` sequences a step: (rows per sequence, median wall time / `unit`)
// in ascending rows, once each, whatever order --chunks gave.
json cost_curve(std::vector<json> cases, int64_t sequences, double unit) {
  std::stable_sort(cases.begin(), cases.end(), [](const json& a, const json& b) { return a["rows"] < b["rows"]; });
  json curve = json::array();
  for (const json& c : cases) {
    const int64_t rows = c.at("rows").get<int64_t>() / sequences;
    if (curve.empty() || curve.back()["rows"] != rows)
      curve.push_back({{"rows", rows}, {"cost", c.at("median_wall_us").get<double>() / unit}});
  }
  return curve;
}

}  // namespace

double CostProfile::verify_cost(double r) const { return curve_cost(rows, r); }

double CostProfile::verify_cost(double r, int64_t batch) const {
  if (batch == 1) return verify_cost(r);
  for (const Batch& b : batches)
    if (b.batch == batch) return curve_cost(b.rows, r);
  return NAN;
}

std::optional<double> CostProfile::draft_cost(const std::string& drafter) const {
  for (const Draft& d : drafts)
    if (same_model_spec(d.model, drafter)) return d.cost;
  return std::nullopt;
}

bool same_model_spec(const std::string& a, const std::string& b) {
  const size_t ca = a.find(':'), cb = b.find(':');
  if (ca == std::string::npos || cb == std::string::npos) return a == b;
  if (a.substr(0, ca) != b.substr(0, cb)) return false;
  namespace fs = std::filesystem;
  // The same folder however it is written (relative or absolute, with ./ or a trailing /).
  auto normal = [](const std::string& path) {
    std::string text = fs::path(path).lexically_normal().string();
    while (text.size() > 1 && text.back() == '/') text.pop_back();
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(fs::absolute(text, ec), ec);
    return ec ? text : canonical.lexically_normal().string();
  };
  return normal(a.substr(ca + 1)) == normal(b.substr(cb + 1));
}

CostProfile read_cost_profile(const std::string& path) {
  const std::string text = read_input_file(path, "cost profile");
  json j;
  try {
    j = parse_bounded_json(text);
  } catch (const json::exception& e) {
    fail("cost profile ", path, ": not JSON (", e.what(), ")");
  }
  if (j.is_object() && !j.contains("format") && j.contains("cost_profile")) j = j["cost_profile"];
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat)
    fail("cost profile ", path, ": holds no cost profile (no \"format\": \"", kFormat,
         "\", nor a bench forward report's \"cost_profile\")");
  if (const int version = field<int>(j, "version", "", path); version != 1)
    fail("cost profile ", path, ": version ", version, " is not one this build reads (1)");
  CostProfile p;
  p.file = path;
  p.json = j;
  p.device = field<std::string>(j, "device", "", path);
  const json machine = j.contains("machine") && j["machine"].is_object() ? j["machine"] : json::object();
  const auto name = [&](const char* key) {
    return machine.contains(key) && machine[key].is_string() ? machine[key].get<std::string>() : std::string();
  };
  p.machine = !name("gpu_name").empty()    ? name("gpu_name")
              : !name("cpu_model").empty() ? name("cpu_model")
                                           : std::string("an unnamed machine");
  const json& target = field<json>(j, "target", "", path);
  p.target = field<std::string>(target, "model", "target", path);
  p.one_token_us = field<double>(target, "one_token_us", "target", path);
  if (!std::isfinite(p.one_token_us) || p.one_token_us <= 0)
    fail("cost profile ", path, ": target.one_token_us must be > 0, got ", p.one_token_us);
  p.rows = read_curve(field<json>(j, "rows", "", path), "rows", path);
  if (j.contains("drafts")) {
    const json& drafts = j["drafts"];
    if (!drafts.is_array()) fail("cost profile ", path, ": drafts must be an array");
    for (size_t i = 0; i < drafts.size(); ++i) {
      const std::string where = "drafts[" + std::to_string(i) + "]";
      p.drafts.push_back({field<std::string>(drafts[i], "model", where, path), positive_cost(drafts[i], where, path)});
    }
  }
  if (j.contains("batches")) {
    const json& batches = j["batches"];
    if (!batches.is_array()) fail("cost profile ", path, ": batches must be an array");
    for (size_t i = 0; i < batches.size(); ++i) {
      const std::string where = "batches[" + std::to_string(i) + "]";
      CostProfile::Batch b;
      if (!batches[i].is_object() || !batches[i].contains("batch") || !batches[i]["batch"].is_number_integer())
        fail("cost profile ", path, ": ", where, ".batch must be a whole number of sequences");
      b.batch = batches[i]["batch"].get<int64_t>();
      const int64_t after = p.batches.empty() ? 1 : p.batches.back().batch;
      if (b.batch <= after)
        fail("cost profile ", path, ": ", where, ".batch must ascend from 2, got ", b.batch, " after ", after);
      const double one_token = field<double>(batches[i], "one_token_cost", where, path);
      if (!std::isfinite(one_token) || one_token <= 0)
        fail("cost profile ", path, ": ", where, ".one_token_cost must be > 0, got ", one_token);
      b.one_token_cost = one_token;
      b.rows = read_curve(field<json>(batches[i], "rows", where, path), where + ".rows", path);
      p.batches.push_back(std::move(b));
    }
  }
  return p;
}

json cost_profile_from_forward_report(const json& report, const std::string& device) {
  const json& models = report.at("models");
  if (models.empty()) fail("forward report: no model");
  const json& target = models[0];
  const double one_token = model_case(target, "1-token").at("median_wall_us").get<double>();
  json trees = json::array(), drafts = json::array();
  std::vector<json> chunks;
  for (const json& c : target.at("cases")) {
    if (c.at("kind") == "chunk")
      chunks.push_back(c);
    else if (c.at("kind") == "tree")
      trees.push_back({{"shape", c.at("name").get<std::string>().substr(5)},
                       {"nodes", c.at("rows")},
                       {"cost", c.at("median_wall_us").get<double>() / one_token}});
  }
  const json rows = cost_curve(chunks, 1, one_token);
  // Steps of B sequences (kind batch-chunk: the graph replays where there are graphs, as for the chunks), each batch
  // in units of its own 1-token step; a batch without a 1-token case is left out.
  std::map<int64_t, std::vector<json>> batch_cases;
  for (const json& c : target.at("cases"))
    if (c.at("kind") == "batch-chunk") batch_cases[c.value("batch", int64_t{1})].push_back(c);
  json batches = json::array();
  for (auto& [batch, cases] : batch_cases) {
    const auto one = std::find_if(cases.begin(), cases.end(),
                                  [](const json& c) { return c.at("rows") == c.at("batch"); });  // 1 row a sequence
    if (batch < 2 || one == cases.end()) continue;
    const double batch_one_token = one->at("median_wall_us").get<double>();
    batches.push_back({{"batch", batch},
                       {"one_token_cost", batch_one_token / one_token},
                       {"rows", cost_curve(cases, batch, batch_one_token)}});
  }
  for (size_t i = 1; i < models.size(); ++i)
    drafts.push_back({{"model", models[i].at("model")},
                      {"parameters", models[i].at("parameters")},
                      {"weights_dtype", models[i].at("weights_dtype")},
                      {"cost", model_case(models[i], "1-token").at("median_wall_us").get<double>() / one_token}});
  return {{"format", kFormat},
          {"version", 1},
          {"utc_time", report.value("utc_time", "")},
          {"git_revision", report.value("git_revision", "")},
          {"machine", report.value("machine", json::object())},
          {"device", device},
          {"statistic", "ratios of median wall times of one forward after the same cached context (bench forward)"},
          {"target",
           {{"model", target.at("model")},
            {"parameters", target.at("parameters")},
            {"weights_dtype", target.at("weights_dtype")},
            {"one_token_us", one_token}}},
          {"rows", rows},
          {"trees", trees},
          {"drafts", drafts},
          {"batches", batches}};
}

}  // namespace specula
