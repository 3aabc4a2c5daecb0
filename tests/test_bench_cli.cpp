// `specula bench forward` end to end: the report's contract (cases, ratios, the weight-read floor, the draft
// against the target) and its errors, which name the flag.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "cli_runner.h"

using namespace specula::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

TEST_CASE(
    "bench forward reports every case against the 1-token forward and the weight-read floor, and the cost "
    "profile they make",
    "[cli]") {
  TempDir dir;
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  const std::string quick = " --context 8 --min-iterations 2 --min-time 0.001 --chunks 1,2 --trees 2,1";
  const CliResult r =
      run_specula("bench forward --model transformer:" + models + "target --model transformer:" + models + "draft" +
                  quick + " --output " + dir.file("forward.json") + " --cost-profile " + dir.file("p/profile.json"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("weight read (the floor)") && Contains("wrote " + dir.file("forward.json")));
  const json report = json::parse(read_text(dir.file("forward.json")));
  CHECK(report["benchmark"] == "forward");
  REQUIRE(report["models"].size() == 2);
  for (const json& model : report["models"]) {
    REQUIRE(model["cases"].size() == 3);
    CHECK(model["cases"][0]["name"] == "1-token");
    CHECK(model["cases"][0]["ratio_wall_vs_1_token"] == 1.0);
    CHECK(model["cases"][1]["name"] == "chunk K=2");
    CHECK(model["cases"][1]["rows"] == 2);
    CHECK(model["cases"][2]["name"] == "tree 2,1");
    CHECK(model["cases"][2]["rows"] == 4);  // 2 children, one under each
    CHECK(model["cases"][2]["iterations"].get<int>() >= 2);
    CHECK(model["weight_bytes"].get<int64_t>() > 0);
    CHECK(model["read_bandwidth_gb_s"].get<double>() > 0);
  }
  CHECK(report["draft_vs_target"]["c_draft_over_target"].get<double>() > 0);
  CHECK(report["options"]["chunks"] == json::array({1, 2}));
  // The cost profile `run --cost-profile` reads: in the report, and alone where --cost-profile asked.
  const json profile = json::parse(read_text(dir.file("p/profile.json")));
  CHECK(profile == report["cost_profile"]);
  CHECK(profile["format"] == "specula cost profile");
  CHECK(profile["target"]["model"] == "transformer:" + models + "target");
  REQUIRE(profile["rows"].size() == 2);
  CHECK(profile["rows"][0] == json({{"rows", 1}, {"cost", 1.0}}));
  CHECK(profile["rows"][1]["cost"] == report["models"][0]["cases"][1]["ratio_wall_vs_1_token"]);
  REQUIRE(profile["drafts"].size() == 1);
  CHECK(profile["drafts"][0]["model"] == "transformer:" + models + "draft");
  CHECK(profile["drafts"][0]["cost"].get<double>() ==
        Approx(report["models"][1]["one_token_median_wall_us"].get<double>() /
               report["models"][0]["one_token_median_wall_us"].get<double>()));
}

TEST_CASE("bench forward --device cuda times the model on the GPU, or says why this LibTorch cannot", "[cli]") {
  TempDir dir;
  const std::string model = std::string(SPECULA_SOURCE_DIR) + "/results/models/draft";
  const CliResult r = run_specula(
      "bench forward --device cuda --model transformer:" + model +
      " --context 8 --min-iterations 2 --min-time 0.001 --chunks 1,2 --trees 2,1 --output " + dir.file("forward.json"));
  if (r.exit_code == 0) {  // a GPU machine's CUDA LibTorch
    const json report = json::parse(read_text(dir.file("forward.json")));
    CHECK(report["options"]["device"] == "cuda");
    CHECK(report["models"][0]["device"] == "cuda");
    CHECK_FALSE(report["machine"]["gpu_name"].get<std::string>().empty());
    CHECK(report["cost_profile"]["device"] == "cuda");
    CHECK_THAT(r.out, Contains("half a device-to-device copy"));
  } else {
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("--device cuda: this LibTorch (") && Contains("sees no CUDA device"));
    CHECK_FALSE(std::ifstream(dir.file("forward.json")).good());
  }
}

TEST_CASE("bench forward --batches times each chunk and tree as one pooled step of B sequences on LibTorch's path",
          "[cli]") {
  TempDir dir;
  const std::string model = std::string(SPECULA_SOURCE_DIR) + "/results/models/draft";
  const CliResult r = run_specula("bench forward --device libtorch --model transformer:" + model +
                                  " --context 8 --min-iterations 2 --min-time 0.001 --chunks 1,2 --trees 2,1"
                                  " --batches 3 --output " +
                                  dir.file("forward.json"));
  REQUIRE(r.exit_code == 0);
  const json report = json::parse(read_text(dir.file("forward.json")));
  CHECK(report["options"]["batches"] == json::array({3}));
  const json& cases = report["models"][0]["cases"];
  // 1-token, chunk K=2, tree 2,1, then the two chunks and the tree as steps of 3 sequences.
  REQUIRE(cases.size() == 6);
  CHECK(cases[3]["name"] == "batch 3 x 1-token");
  CHECK(cases[3]["kind"] == "batch-chunk");
  CHECK(cases[3]["batch"] == 3);
  CHECK(cases[3]["rows"] == 3);
  CHECK(cases[4]["name"] == "batch 3 x K=2");
  CHECK(cases[4]["rows"] == 6);
  CHECK(cases[4]["positions"] == 2);
  CHECK(cases[5]["name"] == "batch 3 x tree 2,1");
  CHECK(cases[5]["kind"] == "batch-tree");
  CHECK(cases[5]["rows"] == 12);  // 4 nodes a sequence
  CHECK(cases[5]["positions"] == 2);
  CHECK_FALSE(cases[0].contains("batch"));
  // The profile keeps the batch-1 cases alone.
  CHECK(report["cost_profile"]["rows"].size() == 2);
  CHECK(report["cost_profile"]["device"] == "libtorch");
}

TEST_CASE("bench forward's errors name the flag and the value", "[cli]") {
  const std::string model = " --model transformer:" + std::string(SPECULA_SOURCE_DIR) + "/results/models/draft";
  const std::pair<std::string, std::string> cases[] = {
      {model + " --chunks 2,4", "--chunks must include 1: every ratio is against the 1-token forward"},
      {model + " --chunks 1,0", "--chunks: sizes must be >= 1, got 0"},
      {model + " --threads 0", "--threads must be >= 1, got 0"},
      {model + " --min-iterations 0", "--min-iterations must be >= 1, got 0"},
      {model + " --context 100000", "--context 100000 + 64 rows must fit the model's max_seq_len"},
      {" --model bigram:x", "--model: 'bigram:x' is not transformer:DIR"},
      {model + " --device gpu", "--device must be cpu, cuda or libtorch, got 'gpu'"},
      {model + " --batches 4", "--batches time pooled steps, LibTorch's path: give --device cuda or libtorch"},
      {model + " --device libtorch --batches 1", "--batches: sizes must be in [2, 1024], got 1"},
      {"", "--model is required"},
      {" --model transformer:", "--model: 'transformer:' is not transformer:DIR"},
  };
  for (const auto& [args, message] : cases) {
    INFO(args);
    const CliResult r = run_specula("bench forward" + args + " --output /dev/null");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(message));
  }
}

TEST_CASE("bench forward records the weight layout SPECULA_WEIGHT_LAYOUT chose, and names a bad value", "[cli]") {
  TempDir dir;
  const std::string args = "bench forward --model transformer:" + std::string(SPECULA_SOURCE_DIR) +
                           "/results/models/draft --context 8 --min-iterations 2 --min-time 0.001 --chunks 1,2 "
                           "--trees 2,1 --output " +
                           dir.file("forward.json");
  for (const std::string layout : {"", "panels", "row_major"}) {
    INFO(layout);
    const ScopedEnv env("SPECULA_WEIGHT_LAYOUT", layout);
    const CliResult r = run_specula(args);
    REQUIRE(r.exit_code == 0);
    const std::string expected = layout.empty() ? "panels" : layout;  // panels unless told
    CHECK_THAT(r.out, Contains(expected + " weights"));
    CHECK(json::parse(read_text(dir.file("forward.json")))["models"][0]["weight_layout"] == expected);
  }
  const ScopedEnv env("SPECULA_WEIGHT_LAYOUT", "rows");
  const CliResult bad = run_specula(args);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("SPECULA_WEIGHT_LAYOUT=rows: expected panels or row_major"));
}

TEST_CASE("bench forward records whether SPECULA_HUGE_PAGES kept the weights on huge pages, and names a bad value",
          "[cli]") {
  // The 14 MB target: more than one 2 MB page of matrices, so "on" moves them all.
  TempDir dir;
  const std::string args = "bench forward --model transformer:" + std::string(SPECULA_SOURCE_DIR) +
                           "/results/models/target --context 8 --min-iterations 2 --min-time 0.001 --chunks 1,2 "
                           "--output " +
                           dir.file("forward.json");
  for (const std::string setting : {"", "on", "off"}) {
    INFO(setting);
    const ScopedEnv env("SPECULA_HUGE_PAGES", setting);
    const CliResult r = run_specula(args);
    REQUIRE(r.exit_code == 0);
    const std::string expected = setting.empty() ? "on" : setting;  // on unless told
    CHECK_THAT(r.out, Contains("huge pages " + expected));
    const json model = json::parse(read_text(dir.file("forward.json")))["models"][0];
    CHECK(model["huge_pages"] == expected);
    const int64_t moved = model["weight_bytes_moved_to_huge_pages"].get<int64_t>();
    if (expected == "on")
      CHECK(moved >= model["weight_bytes"].get<int64_t>());  // every matrix, each at a 64-byte boundary
    else
      CHECK(moved == 0);
    const long long granted = model["process_huge_page_bytes_after_load"].get<long long>();
    CHECK((granted == -1 || (granted >= 0 && granted % (2 << 20) == 0)));
    CHECK(model["process_resident_bytes_after_load"].get<long long>() > moved);
  }
  const ScopedEnv env("SPECULA_HUGE_PAGES", "yes");
  const CliResult bad = run_specula(args);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("SPECULA_HUGE_PAGES=yes: expected on or off"));
}

TEST_CASE("bench verify and bench sampler run the cases their filter names, and say when it names none", "[cli]") {
  TempDir dir;
  const CliResult verify = run_specula("bench verify --filter 'verify/chain/K=1/V=32000$' --min-time 0.01 --output " +
                                       dir.file("verify.json"));
  REQUIRE(verify.exit_code == 0);
  const json v = json::parse(read_text(dir.file("verify.json")));
  REQUIRE(v["cases"].size() == 1);
  CHECK(v["cases"][0]["name"] == "verify/chain/K=1/V=32000");
  CHECK(v["cases"][0]["iterations"].get<int64_t>() > 0);
  CHECK(v["cases"][0]["mean_us_per_step"].get<double>() > 0);
  const CliResult sampler = run_specula(
      "bench sampler --filter 'sampler/specula/V=32000/B=1$' --min-time 0.01 --output " + dir.file("sampler.json"));
  REQUIRE(sampler.exit_code == 0);
  const json s = json::parse(read_text(dir.file("sampler.json")));
  REQUIRE(s["cases"].size() == 1);
  CHECK(s["cases"][0]["name"] == "sampler/specula/V=32000/B=1");
  for (const char* bench : {"verify", "sampler"}) {
    INFO(bench);
    const std::string command = std::string("bench ") + bench;
    CHECK_THAT(run_specula(command + " --filter nomatch --output /dev/null").err,
               Contains("--filter 'nomatch' matches no benchmark case"));
    CHECK_THAT(run_specula(command + " --filter '(' --output /dev/null").err,
               Contains("--filter: '(' is not a regular expression"));
    CHECK_THAT(run_specula(command + " --min-time 0 --output /dev/null").err,
               Contains("--min-time must be > 0 seconds, got 0"));
    CHECK_THAT(run_specula(command + " --threads 0 --output /dev/null").err,
               Contains("--threads must be in 1..1024, got 0"));
  }
}

namespace {

// A small end-to-end experiment: the bundled 3.5 M target and 4-gram, chain at T = 0, one 16-token prompt from the
// corpus, 8 new tokens; `draft` adds to its [draft] section.
std::string small_experiment(TempDir& dir, const std::string& name, int repetitions, const std::string& draft) {
  const std::string source = SPECULA_SOURCE_DIR;
  return dir.write(name + ".ini", "[experiment]\nname = " + name + "\ntarget = transformer:" + source +
                                      "/results/models/target\nprompts_from_corpus = " + source +
                                      "/../shared/data/tinyshakespeare.txt\nnum_prompts = 1\nprompt_length = 16\n"
                                      "max_new_tokens = 8\nrepetitions = " +
                                      std::to_string(repetitions) + "\noutput_dir = " + dir.file("results") +
                                      "\n\n[draft]\ndrafter = ngram:" + source +
                                      "/results/models/ngram-order4.txt\nmethod = chain\n" + draft +
                                      "\n[sampling]\ntemperature = 0\n");
}

}  // namespace

TEST_CASE("bench end-to-end --batch runs each batch size in lockstep and reports the speedup curve", "[cli]") {
  TempDir dir;
  const std::string source = SPECULA_SOURCE_DIR;
  const std::string experiment = small_experiment(dir, "batch", 2, "num_draft_tokens = 2\n");
  const CliResult r =
      run_specula("bench end-to-end --experiment " + experiment + " --batch 1,3 --output " + dir.file("report.json"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("best decoding speedup against autoregressive decoding of the same batch"));
  const json report = json::parse(read_text(dir.file("report.json")));
  REQUIRE(report["batches"].size() == 2);
  REQUIRE(report["batch_curve"].size() == 2);
  CHECK(report["device"] == "cpu");
  for (size_t i = 0; i < 2; ++i) {
    const int batch = i == 0 ? 1 : 3;
    const json& run = report["batches"][i];
    CHECK(run["batch"] == batch);
    CHECK(report["batch_curve"][i]["batch"] == batch);
    CHECK(report["batch_curve"][i]["best_at_temperature_0"]["decode_speedup"].is_number());
    // The run decoded `batch` prompts together: its configuration says so, and every prompt has its records.
    const std::string config = read_text(run["results_dir"].get<std::string>() + "/config.resolved.ini");
    CHECK_THAT(config, Contains("num_prompts = " + std::to_string(batch)) && Contains("lockstep = true"));
    const std::string records = read_text(run["results_dir"].get<std::string>() + "/records.jsonl");
    CHECK(std::count(records.begin(), records.end(), '\n') == 2 * 2 * batch);  // baseline and chain, 2 repetitions
    CHECK_THAT(records, Contains("\"lockstep\":true"));
    CHECK(run["settings"].size() == 2);
    for (const json& setting : run["settings"]) {
      CHECK(setting["device_waits_per_step"] == 0.0);       // on the CPU
      CHECK(setting["step_graph_replay_share"].is_null());  // table models: no step graph
      CHECK(setting["step_graphs_evicted_per_step"] == 0.0);
    }
  }
  // On cuda-host: the baseline's draw and a host drafter's verification wait once a step.
  const CliResult host =
      run_specula("bench end-to-end --experiment " + experiment +
                  " --device cuda-host --set experiment.repetitions=1 --output " + dir.file("host.json"));
  INFO(host.err);
  REQUIRE(host.exit_code == 0);
  const json host_report = json::parse(read_text(dir.file("host.json")));
  CHECK(host_report["device"] == "cuda-host");
  REQUIRE(host_report["settings"].size() == 2);
  for (const json& setting : host_report["settings"]) CHECK(setting["device_waits_per_step"] == 1.0);
  // Refused before any run, naming the flag and the value.
  const std::pair<std::string, std::string> cases[] = {
      {" --batch 0", "--batch: '0' in '0' is not a batch size in [1, 4096]"},
      {" --batch 1,x", "--batch: 'x' in '1,x' is not a batch size"},
      {" --batch 1,,2", "--batch: '' in '1,,2' is not a batch size"},
      {" --batch 1,4,", "--batch: '1,4,' is not a list of batch sizes"},
      {" --batch 2,2", "--batch: 2 is named twice in '2,2'"},
      {" --batch 1,4000 --set experiment.corpus_tail=0.001", "--batch 4000: "},
      {" --device gpu", "--device: 'gpu' is not cpu, cuda or cuda-host"},
  };
  for (const auto& [args, message] : cases) {
    INFO(args);
    const CliResult bad = run_specula("bench end-to-end --experiment " + experiment + args + " --output " +
                                      dir.file("bad.json") + " --set experiment.output_dir=" + dir.file("bad"));
    CHECK(bad.exit_code == 1);
    CHECK_THAT(bad.err, Contains(message));
    CHECK_FALSE(std::ifstream(dir.file("bad.json")).good());
    CHECK_FALSE(std::filesystem::exists(dir.file("bad")));  // no run began
  }
  // An experiment with a prompts file has no batch to draw.
  const std::string prompts = dir.write("prompts.txt", "hello there\n");
  const std::string listed = dir.write("listed.ini", "[experiment]\nname = listed\ntarget = transformer:" + source +
                                                         "/results/models/target\nprompts = " + prompts +
                                                         "\nmax_new_tokens = 4\noutput_dir = " + dir.file("results") +
                                                         "\n\n[draft]\ndrafter = prompt-lookup\nmethod = chain\n");
  const CliResult no_corpus =
      run_specula("bench end-to-end --experiment " + listed + " --batch 2 --output " + dir.file("bad.json"));
  CHECK(no_corpus.exit_code == 1);
  CHECK_THAT(no_corpus.err, Contains("--batch needs an experiment whose prompts come from a corpus"));
  // What --batch sets for each run is not --set beside it (it was overridden without a word).
  for (const char* key : {"experiment.num_prompts=5", "experiment.lockstep=false", "' experiment.num-prompts = 5'"}) {
    const CliResult set = run_specula("bench end-to-end --experiment " + experiment + " --batch 2 --set " + key +
                                      " --output " + dir.file("bad.json"));
    CHECK(set.exit_code == 1);
    CHECK_THAT(set.err, Contains(": --batch sets it for each run"));
  }
}

TEST_CASE("bench constraint reports each case's build, walks, rows and memory, and refuses bad options by name",
          "[cli]") {
  TempDir dir;
  const CliResult r = run_specula(
      "bench constraint --vocab-size 2000 --max-length 4,9 --bad-words 0,30 --fields 3 "
      "--repeats 2 --output " +
      dir.file("c.json"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("constraint/json/maxLength=9/bad_words=30") && Contains("wrote " + dir.file("c.json")));
  const json report = json::parse(read_text(dir.file("c.json")));
  CHECK(report["benchmark"] == "constraint");
  CHECK(report["options"]["vocab_size"] == 2000);
  CHECK(report["machine"].contains("cpu_model"));
  REQUIRE(report["cases"].size() == 4);
  CHECK(report["cases"][1]["name"] == "constraint/json/maxLength=4/bad_words=30");
  for (const json& c : report["cases"]) {
    INFO(c["name"]);
    CHECK(c["samples"].size() == 2);
    // Three fields of at most max_length characters each, and their names and punctuation: the output is a whole
    // object, so it has at least the bytes of {"field0":"","field1":"","field2":""}.
    CHECK(c["output_bytes"].get<int>() >= 39);
    CHECK(c["output_bytes"].get<int>() <= 39 + 3 * 4 * c["max_length"].get<int>());  // UTF-8: 4 bytes a character
    CHECK(c["output_tokens"].get<int>() > 0);
    CHECK(c["states_built"].get<int>() > 0);
    for (const char* figure : {"build_ms", "first_walk_ms", "cached_mask_us_per_token", "cached_step_us_per_token",
                               "sampler_row_us", "constrained_row_us"}) {
      INFO(figure);
      CHECK(c[figure]["min"].get<double>() > 0);
      CHECK(c[figure]["min"].get<double>() <= c[figure]["median"].get<double>());
      CHECK(c[figure]["median"].get<double>() <= c[figure]["max"].get<double>());
    }
    CHECK(c["ratios"]["constrained_row_over_sampler_row"]["median"].get<double>() > 0);
    // The peak memory is measured where the kernel lets a process reset its peak (Linux's clear_refs), else null.
    if (std::ofstream("/proc/self/clear_refs") << "5\n") {
      REQUIRE_FALSE(c["peak_resident_growth_mb"].is_null());
      CHECK(c["peak_resident_growth_mb"]["min"].get<double>() > 0);
    }
  }
  // Another run walks the same output: the vocabulary, the bad words and the draws are seeded.
  REQUIRE(run_specula("bench constraint --vocab-size 2000 --max-length 9 --bad-words 30 --fields 3 --repeats 1 "
                      "--output " +
                      dir.file("again.json"))
              .exit_code == 0);
  const json again = json::parse(read_text(dir.file("again.json")))["cases"][0];
  for (const char* key : {"output_tokens", "output_bytes", "states_built"})
    CHECK(again[key] == report["cases"][3][key]);

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {" --vocab-size 100", "--vocab-size must be in 1024..1048576, got 100"},
           {" --max-length 0", "--max-length: '0' in '0' is not a length in [1, 10000]"},
           {" --max-length 5,5", "--max-length: 5 is named twice in '5,5'"},
           {" --bad-words x", "--bad-words: 'x' in 'x' is not a count in [0, 1000000]"},
           {" --fields 0", "--fields must be in 1..1000, got 0"},
           {" --repeats 0", "--repeats must be in 1..100, got 0"},
           {" --max-length 20,300", "--max-length: 300 with --fields 12 makes a schema too large to compile"},
           {" --output " + dir.file("c.json") + "/x", "--output"}}) {
    INFO(args);
    // Refused before any case runs: the rest of the command is a workload of many minutes (the largest vocabulary,
    // every repetition), which a check made after the timings would let run. A default --output would be written
    // into the source tree.
    std::string heavy;  // the options of that workload the case does not give itself
    for (const auto& [flag, value] :
         std::vector<std::pair<std::string, std::string>>{{"--vocab-size", "1048576"},
                                                          {"--max-length", "20,100"},
                                                          {"--repeats", "100"},
                                                          {"--output", dir.file("never.json")}})
      if (args.find(flag) == std::string::npos) heavy += " " + flag + " " + value;
    const auto start = std::chrono::steady_clock::now();
    const CliResult refused = run_specula("bench constraint" + heavy + args);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
    CHECK(refused.exit_code != 0);
    CHECK_THAT(refused.err, Contains(message));
    CHECK_FALSE(std::filesystem::exists(dir.file("never.json")));
  }
}

TEST_CASE("bench end-to-end names a setting's draft-length schedule where the sweep gives one", "[cli]") {
  TempDir dir;
  const std::string experiment =
      small_experiment(dir, "schedule", 1, "num_draft_tokens = 3\nnum_draft_tokens_schedule = constant, heuristic\n");
  const CliResult r = run_specula("bench end-to-end --experiment " + experiment + " --output " + dir.file("r.json"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json report = json::parse(read_text(dir.file("r.json")));
  std::multiset<std::string> schedules;
  for (const json& setting : report["settings"])
    schedules.insert(setting["method"] == "ar"
                         ? "baseline: " + std::to_string(setting.contains("num_draft_tokens_schedule"))
                         : setting.value("num_draft_tokens_schedule", "none"));
  CHECK(schedules == std::multiset<std::string>{"baseline: 0", "constant", "heuristic"});
  // The heuristic row has no Leviathan prediction.
  for (const json& setting : report["settings"])
    if (setting.value("num_draft_tokens_schedule", "") == "heuristic") CHECK(setting["predicted_speedup"].is_null());
  // A confidence threshold is named the same way, as a number.
  const std::string doubting = small_experiment(
      dir, "doubt", 1, "num_draft_tokens = 3\nconfidence_threshold = 0, 0.4\n[draft_sampling]\ntemperature = 0.8\n");
  const CliResult d = run_specula("bench end-to-end --experiment " + doubting + " --output " + dir.file("d.json"));
  INFO(d.err);
  REQUIRE(d.exit_code == 0);
  std::multiset<double> thresholds;
  const json doubt_report = json::parse(read_text(dir.file("d.json")));
  for (const json& setting : doubt_report["settings"])
    if (setting["method"] != "ar") thresholds.insert(setting.at("confidence_threshold").get<double>());
  CHECK(thresholds == std::multiset<double>{0.0, 0.4});
}

TEST_CASE("bench all: its help, no options, and end-to-end's prompts checked before the first benchmark runs",
          "[cli]") {
  const CliResult help = run_specula("bench all --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Contains("Runs sampler, verify, forward") && Contains("It takes no options"));
  const CliResult option = run_specula("bench all --min-time 1");
  CHECK(option.exit_code == 1);
  CHECK_THAT(option.err, Contains("bench all takes no options (got '--min-time')"));
  // From a folder whose end-to-end experiment names a corpus that is not there: refused before the sampler's turn.
  TempDir dir;
  std::filesystem::create_directories(dir.file("experiments"));
  dir.write("experiments/bench-end-to-end.ini",
            read_text(std::string(SPECULA_SOURCE_DIR) + "/experiments/bench-end-to-end.ini"));
  const int status = std::system(
      ("cd " + dir.file("") + " && " + SPECULA_BINARY + " bench all >" + dir.file("out") + " 2>" + dir.file("err"))
          .c_str());
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(read_text(dir.file("err")),
             Contains("key 'experiment.prompts_from_corpus'") && Contains("tinyshakespeare.txt"));
  CHECK_THAT(read_text(dir.file("out")), !Contains("== specula bench"));
}
