// Cost profiles (harness/experiment/cost_profile.h): reading and refusing them, the step-cost curve, the profile a
// forward report makes, the speedup the summary predicts from one (against numbers worked out by hand), and
// `specula run --cost-profile` end to end on table models.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "harness/experiment/cost_profile.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "kernels/shared/error.h"
#include "summary_records.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kTable = std::string(SPECULA_SOURCE_DIR) + "/experiments/tables/";

// A profile measured on `target`: rows 1, 4, 8 at costs 1, 1.2, 1.6; one draft model at 0.05 of a target step.
json profile_json(const std::string& target = "transformer:models/target") {
  return {{"format", "specula cost profile"},
          {"version", 1},
          {"device", "cuda"},
          {"machine", {{"gpu_name", "Test GPU"}}},
          {"target", {{"model", target}, {"one_token_us", 250.0}}},
          {"rows", {{{"rows", 1}, {"cost", 1.0}}, {{"rows", 4}, {"cost", 1.2}}, {{"rows", 8}, {"cost", 1.6}}}},
          {"drafts", {{{"model", "transformer:models/draft"}, {"cost", 0.05}}}}};
}

// The same with a batch of 4: its 1-token step 1.5 lone ones; k rows a sequence at 1, 1.5, 3 of its own 1-token step.
json batched_profile_json() {
  json j = profile_json();
  j["batches"] = {
      {{"batch", 4},
       {"one_token_cost", 1.5},
       {"rows", {{{"rows", 1}, {"cost", 1.0}}, {{"rows", 4}, {"cost", 1.5}}, {{"rows", 8}, {"cost", 3.0}}}}}};
  return j;
}

CostProfile profile_from(const TempDir& dir, const json& j) {
  return read_cost_profile(dir.write("profile.json", j.dump()));
}

}  // namespace

TEST_CASE("a cost profile's step cost is piecewise linear between the rows it measured, undefined beyond",
          "[runner][summary]") {
  TempDir dir;
  const CostProfile p = profile_from(dir, profile_json());
  CHECK(p.machine == "Test GPU");
  CHECK(p.device == "cuda");
  CHECK(p.max_rows() == 8);
  CHECK(p.verify_cost(1) == 1.0);
  CHECK(p.verify_cost(4) == Approx(1.2));
  CHECK(p.verify_cost(2.5) == Approx(1.1));  // halfway from 1 to 4
  CHECK(p.verify_cost(6) == Approx(1.4));
  CHECK(p.verify_cost(8) == Approx(1.6));
  CHECK(std::isnan(p.verify_cost(9)));  // not extrapolated
  CHECK(std::isnan(p.verify_cost(0)));
  CHECK(p.draft_cost("transformer:models/draft") == 0.05);
  CHECK(p.draft_cost("transformer:./models//draft/") == 0.05);  // the same folder, spelled differently
  CHECK(same_model_spec("transformer:models/target", "transformer:" + fs::current_path().string() + "/models/target"));
  CHECK_FALSE(p.draft_cost("ngram:models/draft").has_value());
  CHECK_FALSE(p.draft_cost("transformer:models/other").has_value());
  // A batch's own curve; none for a batch the profile did not measure (not borrowed from another's).
  const CostProfile b = profile_from(dir, batched_profile_json());
  REQUIRE(b.batches.size() == 1);
  CHECK(b.batches[0].one_token_cost == 1.5);
  CHECK(b.verify_cost(4, 1) == Approx(1.2));
  CHECK(b.verify_cost(4, 4) == Approx(1.5));
  CHECK(b.verify_cost(6, 4) == Approx(2.25));
  CHECK(std::isnan(b.verify_cost(9, 4)));
  CHECK(std::isnan(b.verify_cost(4, 16)));
  CHECK(std::isnan(p.verify_cost(4, 4)));
}

TEST_CASE("a cost profile that is not one is refused, naming the file and the field", "[runner][summary][errors]") {
  TempDir dir;
  auto refused = [&](const std::string& text, const std::string& message) {
    INFO(text);
    const std::string path = dir.write("bad.json", text);
    CHECK_THROWS_WITH(read_cost_profile(path), Contains("cost profile " + path) && Contains(message));
  };
  refused("{not json", "not JSON");
  refused("{\"benchmark\": \"forward\"}", "holds no cost profile");
  json j = profile_json();
  j["version"] = 2;
  refused(j.dump(), "version 2 is not one this build reads");
  j["version"] = 1.7;  // read as 1 by a plain get<int>
  refused(j.dump(), "field version must be a whole number in [-2147483648, 2147483647], got 1.7");
  j["version"] = int64_t{1} << 40;  // read as 0
  refused(j.dump(), "field version must be a whole number in [-2147483648, 2147483647], got 1099511627776");
  j = profile_json();
  j["target"]["one_token_us"] = -5;
  refused(j.dump(), "target.one_token_us must be > 0, got -5");
  j = profile_json();
  j.erase("rows");
  refused(j.dump(), "missing field rows");
  j = profile_json();
  j["target"].erase("model");
  refused(j.dump(), "missing field target.model");
  j = profile_json();
  j["rows"][0]["cost"] = 1.5;
  refused(j.dump(), "rows[0] must be the 1-token step {rows: 1, cost: 1}, got rows 1, cost 1.5");
  j = profile_json();
  j["rows"][2]["rows"] = 4;
  refused(j.dump(), "rows[2].rows must ascend, got 4 after 4");
  j = profile_json();
  j["rows"][1]["cost"] = -1;
  refused(j.dump(), "rows[1].cost must be > 0, got -1");
  j = profile_json();
  j["drafts"][0]["cost"] = "cheap";
  refused(j.dump(), "field drafts[0].cost has the wrong type (\"cheap\")");
  j = batched_profile_json();
  j["batches"][0]["batch"] = 1;
  refused(j.dump(), "batches[0].batch must ascend from 2, got 1 after 1");
  j = batched_profile_json();
  j["batches"].push_back(j["batches"][0]);
  refused(j.dump(), "batches[1].batch must ascend from 2, got 4 after 4");
  j = batched_profile_json();
  j["batches"][0]["one_token_cost"] = 0;
  refused(j.dump(), "batches[0].one_token_cost must be > 0, got 0");
  j = batched_profile_json();
  j["batches"][0]["rows"][0]["cost"] = 2;
  refused(j.dump(), "batches[0].rows[0] must be the 1-token step {rows: 1, cost: 1}, got rows 1, cost 2");
  j = batched_profile_json();
  j["batches"][0].erase("rows");
  refused(j.dump(), "missing field batches[0].rows");
  CHECK_THROWS_WITH(read_cost_profile(dir.file("missing.json")),
                    Contains("cost profile: cannot open '" + dir.file("missing.json") + "'"));
  CHECK_THROWS_WITH(read_cost_profile(dir.file("")), Contains("' is a folder, not a file"));
  // A forward report holding a profile reads as that profile.
  const CostProfile inside = read_cost_profile(dir.write("report.json", json{{"cost_profile", profile_json()}}.dump()));
  CHECK(inside.max_rows() == 8);
}

TEST_CASE("bench forward's report makes a profile: its chunks in ascending rows, its drafts' 1-token costs",
          "[runner][summary]") {
  auto model = [](const std::string& name, double one_token_us, const json& extra_cases) {
    json cases = json::array({{{"name", "1-token"}, {"kind", "chunk"}, {"rows", 1}, {"median_wall_us", one_token_us}}});
    for (const json& c : extra_cases) cases.push_back(c);
    return json{{"model", name}, {"parameters", 10}, {"weights_dtype", "float16"}, {"cases", cases}};
  };
  const json report = {{"machine", {{"cpu_model", "Test CPU"}}},
                       {"models",
                        {model("transformer:t", 200.0,
                               {{{"name", "chunk K=8"}, {"kind", "chunk"}, {"rows", 8}, {"median_wall_us", 400.0}},
                                {{"name", "chunk K=2"}, {"kind", "chunk"}, {"rows", 2}, {"median_wall_us", 220.0}},
                                {{"name", "tree 2,1"}, {"kind", "tree"}, {"rows", 4}, {"median_wall_us", 300.0}},
                                // Steps of 4 sequences: 1 and 8 rows each (the graph cases; their eager twins and a
                                // tree are not the curve's).
                                {{"name", "batch 4 x K=8"},
                                 {"kind", "batch-chunk"},
                                 {"rows", 32},
                                 {"batch", 4},
                                 {"median_wall_us", 1000.0}},
                                {{"name", "batch 4 x 1-token"},
                                 {"kind", "batch-chunk"},
                                 {"rows", 4},
                                 {"batch", 4},
                                 {"median_wall_us", 250.0}},
                                {{"name", "batch 4 x 1-token eager"},
                                 {"kind", "batch-chunk-eager"},
                                 {"rows", 4},
                                 {"batch", 4},
                                 {"median_wall_us", 900.0}},
                                {{"name", "batch 4 x tree 2,1"},
                                 {"kind", "batch-tree"},
                                 {"rows", 16},
                                 {"batch", 4},
                                 {"median_wall_us", 600.0}}}),
                         model("transformer:d", 20.0, json::array())}}};
  const json profile = cost_profile_from_forward_report(report, "cpu");
  TempDir dir;
  const CostProfile p = read_cost_profile(dir.write("p.json", profile.dump()));
  REQUIRE(p.rows.size() == 3);
  CHECK(p.rows[1].rows == 2);
  CHECK(p.rows[1].cost == Approx(1.1));
  CHECK(p.rows[2].rows == 8);
  CHECK(p.rows[2].cost == Approx(2.0));
  CHECK(p.machine == "Test CPU");
  CHECK(p.target == "transformer:t");
  CHECK(p.one_token_us == 200.0);
  CHECK(p.draft_cost("transformer:d") == Approx(0.1));
  CHECK(profile["trees"][0]["shape"] == "2,1");
  CHECK(profile["trees"][0]["cost"].get<double>() == Approx(1.5));
  REQUIRE(p.batches.size() == 1);
  CHECK(p.batches[0].batch == 4);
  CHECK(p.batches[0].one_token_cost == Approx(1.25));  // 250 / 200
  REQUIRE(p.batches[0].rows.size() == 2);
  CHECK(p.batches[0].rows[1].rows == 8);  // rows per sequence
  CHECK(p.batches[0].rows[1].cost == Approx(4.0));
}

TEST_CASE("the summary predicts each setting's speedup from a profile and the run's acceptance", "[runner][summary]") {
  TempDir dir;
  const CostProfile p = profile_from(dir, profile_json());
  // 25 steps of 5 rows: cost(5) = 1.3; the draft model (4 forwards a step at 0.05) costs 0.2; tau = 4.
  std::vector<int64_t> five(6, 0);
  five[5] = 25;
  SummaryRow s = summarize(chain_cost_records("transformer:models/draft", five, 100), p)[1];
  CHECK(s.profile_verify_cost == Approx(1.3));
  CHECK(s.profile_draft_cost == Approx(0.2));
  CHECK(s.profile_draft_source == "profile");
  CHECK(s.profile_speedup == Approx(4.0 / 1.5));
  CHECK(s.cost_model_speedup == Approx(4.0 / (0.2 + 1.2)));  // this run's own cost model is unchanged
  // A drafter the profile did not measure keeps this run's drafting cost (2 ms / 10 ms per step).
  s = summarize(chain_cost_records("ngram:some.txt", five, 0), p)[1];
  CHECK(s.profile_draft_source == "this run");
  CHECK(s.profile_draft_cost == Approx(0.2));
  CHECK(s.profile_speedup == Approx(4.0 / 1.5));
  // Steps of different sizes are costed one by one (the mean of the costs, not the cost of the mean rows: they
  // differ where the curve bends, at 4 rows): 10 steps of 2 rows, 15 of 7.
  std::vector<int64_t> mixed(8, 0);
  mixed[2] = 10, mixed[7] = 15;
  s = summarize(chain_cost_records("transformer:models/draft", mixed, 100), p)[1];
  const double cost2 = 1 + 0.2 / 3, cost7 = 1.2 + 0.4 * 3 / 4;
  CHECK(s.profile_verify_cost == Approx((10 * cost2 + 15 * cost7) / 25));
  CHECK(s.profile_verify_cost != Approx(p.verify_cost((10 * 2 + 15 * 7) / 25.0)));
  // Steps beyond the profile's rows, or records without rows: no prediction, not a guess.
  std::vector<int64_t> nine(10, 0);
  nine[9] = 25;
  CHECK(std::isnan(summarize(chain_cost_records("transformer:models/draft", nine, 100), p)[1].profile_speedup));
  CHECK(std::isnan(summarize(chain_cost_records("transformer:models/draft", {}, 100), p)[1].profile_speedup));
  // Without a profile the columns stay empty.
  CHECK(std::isnan(summarize(chain_cost_records("transformer:models/draft", five, 100))[1].profile_speedup));
}

TEST_CASE("a lockstep setting is costed on its batch's curve, or not at all", "[runner][summary]") {
  // Four prompts decoded in lockstep, each as chain_cost_records' setting: 25 steps of 5 rows a sequence.
  std::vector<int64_t> five(6, 0);
  five[5] = 25;
  std::vector<RunRecord> records;
  for (int prompt = 0; prompt < 4; ++prompt)
    for (RunRecord r : chain_cost_records("transformer:models/draft", five, 100)) {
      r.prompt_index = prompt;
      r.lockstep = true;
      records.push_back(r);
    }
  TempDir dir;
  // On the batch of 4's curve, cost(5) = 1.5 + 1.5 / 4 = 1.875; the draft model's cost alone does not carry over to a
  // batch, so this run's drafting share (0.2) is used.
  const SummaryRow s = summarize(records, profile_from(dir, batched_profile_json()))[1];
  CHECK(s.profile_verify_cost == Approx(1.875));
  CHECK(s.profile_draft_source == "this run");
  CHECK(s.profile_draft_cost == Approx(0.2));
  CHECK(s.profile_speedup == Approx(4.0 / (0.2 + 1.875)));
  // A batch's step pads every call to its widest, so a sequence's step costs the widest call's rows: sequences whose
  // own calls ran 2 rows in 10 of their steps, in steps where another ran 5, cost as the padded step.
  std::vector<int64_t> mixed(6, 0);
  mixed[2] = 10, mixed[5] = 15;
  std::vector<RunRecord> padded = records;
  for (RunRecord& r : padded)
    if (!r.baseline) {
      r.metrics.verify_rows_histogram = mixed;
      r.metrics.lockstep_rows_histogram = five;
    }
  const CostProfile batched = profile_from(dir, batched_profile_json());
  CHECK(summarize(padded, batched)[1].profile_verify_cost == Approx(1.875));
  // Records written before the widest rows were counted cost each sequence by its own.
  for (RunRecord& r : padded) r.metrics.lockstep_rows_histogram.clear();
  const double own = (10 * batched.verify_cost(2, 4) + 15 * batched.verify_cost(5, 4)) / 25;
  CHECK(own < 1.875);
  CHECK(summarize(padded, batched)[1].profile_verify_cost == Approx(own));
  // A profile without that batch predicts nothing for it (the lone curve would answer another question).
  CHECK(std::isnan(summarize(records, profile_from(dir, profile_json()))[1].profile_speedup));
  // The same records decoded one by one are costed on the lone curve.
  for (RunRecord& r : records) r.lockstep = false;
  CHECK(summarize(records, profile_from(dir, batched_profile_json()))[1].profile_verify_cost == Approx(1.3));
}

TEST_CASE(
    "run --cost-profile: the folder keeps the profile and the summary its predictions; a profile of another "
    "target is refused before a folder is made",
    "[runner][cli]") {
  TempDir dir;
  const std::string target = "bigram:" + kTable + "target-v16.txt";
  const std::string exp = dir.write(
      "exp.ini", "[experiment]\ntarget = " + target + "\nprompts = " + SPECULA_SOURCE_DIR +
                     "/experiments/prompts/table-prompts.txt\nmax_new_tokens = 12\nrepetitions = 1\nseed = 3\n\n"
                     "[draft]\ndrafter = bigram:" +
                     kTable +
                     "draft-v16.txt\nmethod = chain, tree\n"
                     "num_draft_tokens = 2\ntree = 2,1\n\n[sampling]\ntemperature = 0.8\n");
  json j = profile_json(target);
  j["drafts"] = json::array();
  const std::string profile = dir.write("profile.json", j.dump());
  const std::string out = " --set experiment.output_dir=" + dir.file("results");
  const CliResult r = run_specula("run " + exp + out + " --no-plots --cost-profile " + profile);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("profile") && Contains("on Test GPU (cuda, "));
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir.file("results") + "/exp")) runs.push_back(e.path());
  REQUIRE(runs.size() == 1);
  CHECK(read_cost_profile((runs[0] / "cost-profile.json").string()).max_rows() == 8);
  CHECK_THAT(r.err, !Contains("measured no batch"));
  // In lockstep, a profile without the run's batch size is said to give no prediction, before the run.
  const CliResult batched = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("batched") +
                                        " --set experiment.lockstep=true --no-plots --cost-profile " + profile);
  INFO(batched.err);
  CHECK(batched.exit_code == 0);
  CHECK_THAT(batched.err, Contains("measured no batch of 4 sequences, which this lockstep run decodes"));
  CHECK_THAT(read_text((runs[0] / "config.resolved.ini").string()), Contains("cost_profile = " + profile));
  // Every step's rows are recorded, the row after the context included: the bigram drafter always fills its
  // draft, so chain K = 2 runs 3 rows a step and the 2,1 tree (4 nodes) 5.
  for (const RunRecord& rec : read_records((runs[0] / "records.jsonl").string())) {
    if (rec.baseline) continue;
    const size_t rows = rec.setting.at("draft.method") == "tree" ? 5 : 3;
    REQUIRE(rec.metrics.verify_rows_histogram.size() == rows + 1);
    CHECK(rec.metrics.verify_rows_histogram[rows] == rec.metrics.steps);
  }
  const std::string summary = read_text((runs[0] / "summary.csv").string());
  CHECK_THAT(summary, Contains("profile_verify_cost,profile_draft_cost,profile_draft_source,profile_speedup\n"));
  CHECK_THAT(summary, Contains(",this run,"));
  // A resumed run keeps predicting with the folder's copy, wherever the file it came from has gone.
  fs::rename(profile, dir.file("moved.json"));
  std::ofstream(runs[0] / "status") << "interrupted (SIGTERM)\n";
  const CliResult resumed = run_specula("run --resume " + runs[0].string() + " --no-plots --quiet");
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(read_text((runs[0] / "summary.csv").string()), Contains(",this run,"));
  fs::rename(dir.file("moved.json"), profile);
  // The plot of the predictions beside the measured speedups.
  REQUIRE(run_specula("plot " + runs[0].string() + " --quiet").exit_code == 0);
  CHECK(fs::exists(runs[0] / "plots" / "speedup_on_profile.png"));

  const std::string other = dir.write("other.json", profile_json("transformer:models/target").dump());
  const CliResult refused = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("refused") +
                                        " --no-plots --cost-profile " + other);
  CHECK(refused.exit_code == 1);
  // Named by the option that gave it.
  CHECK_THAT(refused.err, Contains("--cost-profile: key 'experiment.cost_profile': " + other +
                                   " was measured on the target transformer:models/target, not on this "
                                   "experiment's target " +
                                   target));
  CHECK_FALSE(fs::exists(dir.file("refused")));
  const CliResult broken = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("refused") +
                                       " --cost-profile " + dir.write("broken.json", "{}"));
  CHECK(broken.exit_code == 1);
  CHECK_THAT(broken.err, Contains("--cost-profile: key 'experiment.cost_profile': cost profile " +
                                  dir.file("broken.json") + ": holds no cost profile"));
  CHECK_FALSE(fs::exists(dir.file("refused")));
}
