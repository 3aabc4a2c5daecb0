// `specula bench forward` end to end: the report's contract (cases, ratios, the weight-read floor, the draft
// against the target) and its errors, which name the flag.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli_runner.h"

using namespace specula::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// Sets an environment variable the child `specula` reads (unsets it for ""), and puts back what was there when
// it goes, whatever a failed REQUIRE leaves behind.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* was = std::getenv(name)) before_ = was;
    value.empty() ? ::unsetenv(name) : ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { before_ ? ::setenv(name_, before_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

}  // namespace

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

TEST_CASE("bench forward's errors name the flag and the value", "[cli]") {
  const std::string model = " --model transformer:" + std::string(SPECULA_SOURCE_DIR) + "/results/models/draft";
  const std::pair<std::string, std::string> cases[] = {
      {model + " --chunks 2,4", "--chunks must include 1: every ratio is against the 1-token forward"},
      {model + " --chunks 1,0", "--chunks: sizes must be >= 1, got 0"},
      {model + " --threads 0", "--threads must be >= 1, got 0"},
      {model + " --min-iterations 0", "--min-iterations must be >= 1, got 0"},
      {model + " --context 100000", "--context 100000 + 64 rows must fit the model's max_seq_len"},
      {" --model bigram:x", "--model: 'bigram:x' is not transformer:DIR"},
      {model + " --device gpu", "--device must be cpu or cuda, got 'gpu'"},
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
