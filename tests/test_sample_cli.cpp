// Battery C (tests/TESTING.md): the sampler end to end through the shell, `specula sample`, on temporary logits
// and INI files. The output format is exactly N lines of token ids; 200k draws of three stage-activating
// configs must pass a G-test against the independent float64 reference; --config INI files work with the
// command line winning; bad input exits non-zero with a message naming the parameter (or file:line).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/reference_pipeline.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

// A scratch directory, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("specula_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& text) const {
    const fs::path file = path_ / name;
    std::ofstream(file) << text;
    return file.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string logits_text(const std::vector<float>& logits) {
  std::ostringstream os;
  os.precision(9);  // float32 round-trips
  for (float l : logits) os << l << '\n';
  return os.str();
}

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `specula sample ARGS` through the shell; stdout through the pipe, stderr via a file.
RunResult run_sample(const TempDir& dir, const std::string& args) {
  const std::string err_file = dir.path("stderr.txt");
  const std::string command = std::string("'") + SPECULA_BINARY + "' sample " + args + " 2>'" + err_file + "'";
  RunResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, got);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

// Exactly N lines, each a token id in [0, V) written as plain decimal digits, newline-terminated. Checked
// by hand, not one assertion per line: 200k lines should cost milliseconds.
std::vector<Token> parse_tokens(const std::string& out, int32_t vocab, int64_t expected_lines) {
  std::vector<Token> tokens;
  tokens.reserve(static_cast<size_t>(expected_lines));
  size_t start = 0;
  std::string bad;
  while (start < out.size() && bad.empty()) {
    const size_t end = out.find('\n', start);
    const std::string line = out.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const bool digits = !line.empty() && line.size() <= 9 && line.find_first_not_of("0123456789") == std::string::npos;
    if (end == std::string::npos || !digits || std::stol(line) >= vocab) {
      bad = "line " + std::to_string(tokens.size()) + ": '" + line + "'" +
            (end == std::string::npos ? " (no newline)" : "");
      break;
    }
    tokens.push_back(static_cast<Token>(std::stol(line)));
    start = end + 1;
  }
  INFO("bad output " << bad);
  REQUIRE(bad.empty());
  REQUIRE(static_cast<int64_t>(tokens.size()) == expected_lines);
  return tokens;
}

std::vector<double> parse_distribution(const std::string& out) {
  std::vector<double> p;
  std::istringstream in(out);
  double v;
  while (in >> v) p.push_back(v);
  return p;
}

// ---- Stage-activating configs ---------------------------------------------------------------------------

struct CliConfig {
  std::string name;
  std::vector<float> logits;
  std::string args;  // the same settings as `params` and `history`, as the command line spells them
  std::string ini;   // and an INI file's text for --config, if any
  SamplingParams params;
  TokenHistory history;
};

// A: masks, bias, all three penalties, temperature, top_k -> top_p. The banned token is the mode; the
// repetition penalty hits surviving tokens with positive (1) and negative (5) logits; a token seen twice in
// the output (3) survives, so frequency and presence both matter.
CliConfig config_a() {
  CliConfig c;
  c.name = "A: ban the mode, bias, repetition / frequency / presence, T, top_k, top_p";
  c.logits = {1.0f,  0.6f,  0.4f,  0.2f,  0.1f,  -0.1f, -0.2f, -0.35f,
              -0.5f, -0.7f, -0.9f, -1.2f, -1.6f, -2.0f, -2.5f, -3.0f};
  c.args =
      "--banned-tokens 0 --logit-bias 4:0.5,2:-0.55 --repetition-penalty 1.4 --prompt-tokens 1,5,9 "
      "--output-tokens 3,3,7 --frequency-penalty 0.2 --presence-penalty 0.25 --temperature 0.8 --top-k 10 --top-p 0.9";
  SamplingParams& s = c.params;
  s.banned_tokens = {0};
  s.logit_bias = {{4, 0.5f}, {2, -0.55f}};
  s.repetition_penalty = 1.4f;
  s.frequency_penalty = 0.2f;
  s.presence_penalty = 0.25f;
  s.temperature = 0.8f;
  s.top_k = 10;
  s.top_p = 0.9f;
  c.history.prompt = {1, 5, 9};
  c.history.output = {3, 3, 7};
  return c;
}

// B: allowed tokens, a bad word whose prefix matches (bans 2), min_tokens banning the mode (0), dynamic
// temperature, min_p -> typical_p.
CliConfig config_b() {
  CliConfig c;
  c.name = "B: allowed, bad words, min_tokens, dynatemp, min_p, typical_p";
  c.logits = {2.1f, 0.3f, 1.7f, -0.4f, 1.2f, 0.9f, -1.1f, 0.5f, 1.5f, -0.2f, 0.0f, -2.0f, 0.8f, -0.8f, 1.0f, -1.5f};
  c.args =
      "--allowed-tokens 0,1,2,3,4,5,6,8,9,10,12,13,14,15 --bad-words '4 2;9 8' --min-tokens 4 --stop-tokens 0 "
      "--output-tokens 1,4 --dynatemp-range 0.6 --temperature 1.0 --min-p 0.3 --typical-p 0.9";
  SamplingParams& s = c.params;
  s.allowed_tokens = {0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15};
  s.bad_words = {{4, 2}, {9, 8}};
  s.min_tokens = 4;
  s.stop_tokens = {0};
  s.dynatemp_range = 0.6f;
  s.temperature = 1.0f;
  s.min_p = 0.3f;
  s.typical_p = 0.9f;
  c.history.output = {1, 4};
  return c;
}

const char* kConfigCIni =
    "# config C of test_sample_cli.cpp\n"
    "[sample]\n"
    "temperature = 0.5          ; overridden on the command line\n"
    "logit_bias = 7:0.8,1:-0.45\n"
    "tfs-z = 0.95\n"
    "\n"
    "mirostat = 2\n"
    "mirostat_tau = 3.0\n"
    "sampler_order = tfs,mirostat  # aliases of tfs_z\n";

// C: bias, T, tfs_z -> mirostat v2 from a given mu (explicit order). Given through an INI file whose
// temperature (0.5) the command line overrides (1.3); see the INI test.
CliConfig config_c() {
  CliConfig c;
  c.name = "C: bias, T, tfs_z, mirostat v2 with mu, explicit order";
  c.logits = {0.4f, 2.4f, -0.6f, 1.1f, 0.2f, 1.9f, -1.3f, 0.7f, -0.1f, 1.4f, -2.2f, 0.0f, 0.9f, -0.9f, 1.6f, -0.3f};
  c.args = "--temperature 1.3 --mirostat-mu 3.5";  // the rest comes from the INI file
  c.ini = kConfigCIni;
  SamplingParams& s = c.params;
  s.logit_bias = {{7, 0.8f}, {1, -0.45f}};
  s.temperature = 1.3f;
  s.tfs_z = 0.95f;
  s.mirostat = 2;
  s.mirostat_tau = 3.0f;
  s.order = {FilterStage::tfs_z, FilterStage::mirostat};
  c.history.mirostat_mu = 3.5;
  return c;
}

// The stages a config may switch on, each with how to switch it off.
struct Stage {
  const char* name;
  std::function<bool(const SamplingParams&)> on;
  std::function<void(SamplingParams&)> off;
};

const std::vector<Stage>& stages() {
  static const std::vector<Stage> list = {
      {"allowed_tokens", [](const SamplingParams& s) { return !s.allowed_tokens.empty(); },
       [](SamplingParams& s) { s.allowed_tokens.clear(); }},
      {"banned_tokens", [](const SamplingParams& s) { return !s.banned_tokens.empty(); },
       [](SamplingParams& s) { s.banned_tokens.clear(); }},
      {"bad_words", [](const SamplingParams& s) { return !s.bad_words.empty(); },
       [](SamplingParams& s) { s.bad_words.clear(); }},
      {"min_tokens", [](const SamplingParams& s) { return s.min_tokens > 0; },
       [](SamplingParams& s) { s.min_tokens = 0; }},
      {"logit_bias", [](const SamplingParams& s) { return !s.logit_bias.empty(); },
       [](SamplingParams& s) { s.logit_bias.clear(); }},
      {"repetition_penalty", [](const SamplingParams& s) { return s.repetition_penalty != 1.0f; },
       [](SamplingParams& s) { s.repetition_penalty = 1.0f; }},
      {"frequency_penalty", [](const SamplingParams& s) { return s.frequency_penalty != 0.0f; },
       [](SamplingParams& s) { s.frequency_penalty = 0.0f; }},
      {"presence_penalty", [](const SamplingParams& s) { return s.presence_penalty != 0.0f; },
       [](SamplingParams& s) { s.presence_penalty = 0.0f; }},
      {"temperature", [](const SamplingParams& s) { return s.temperature != 1.0f; },
       [](SamplingParams& s) { s.temperature = 1.0f; }},
      {"dynatemp", [](const SamplingParams& s) { return s.dynatemp_range > 0.0f; },
       [](SamplingParams& s) { s.dynatemp_range = 0.0f; }},
      {"min_p", [](const SamplingParams& s) { return s.min_p > 0.0f; }, [](SamplingParams& s) { s.min_p = 0.0f; }},
      {"top_k", [](const SamplingParams& s) { return s.top_k > 0; }, [](SamplingParams& s) { s.top_k = 0; }},
      {"top_p", [](const SamplingParams& s) { return s.top_p < 1.0f; }, [](SamplingParams& s) { s.top_p = 1.0f; }},
      {"typical_p", [](const SamplingParams& s) { return s.typical_p < 1.0f; },
       [](SamplingParams& s) { s.typical_p = 1.0f; }},
      {"tfs_z", [](const SamplingParams& s) { return s.tfs_z < 1.0f; }, [](SamplingParams& s) { s.tfs_z = 1.0f; }},
      {"mirostat", [](const SamplingParams& s) { return s.mirostat == 2; }, [](SamplingParams& s) { s.mirostat = 0; }},
  };
  return list;
}

// tests/TESTING.md "Stage-activating sampler configs": switching any active stage off moves the reference law by
// TV >= 0.02, so a bug in that stage cannot hide behind another; the decisions are not on a knife edge.
void require_stage_activating(const CliConfig& c) {
  const reference::Result base = reference::pipeline(c.logits, c.params, c.history);
  REQUIRE(!base.no_token_left);
  REQUIRE(base.margin > 1e-3);
  int active = 0;
  for (const Stage& stage : stages()) {
    if (!stage.on(c.params)) continue;
    ++active;
    SamplingParams off = c.params;
    stage.off(off);
    const reference::Result without = reference::pipeline(c.logits, off, c.history);
    const double tv = without.no_token_left ? 1.0 : reference::total_variation(base.probs, without.probs);
    INFO(c.name << ": switching off " << stage.name << " moves the law by TV " << tv);
    CHECK(tv >= 0.02);
  }
  CHECK(active >= 4);
  // Penalised tokens survive truncation with both logit signs.
  if (c.params.repetition_penalty != 1.0f) {
    bool positive = false, negative = false;
    std::vector<Token> seen = c.history.prompt;
    seen.insert(seen.end(), c.history.output.begin(), c.history.output.end());
    for (Token t : seen) {
      positive = positive || (c.logits[t] > 0 && base.probs[t] > 0);
      negative = negative || (c.logits[t] < 0 && base.probs[t] > 0);
    }
    CHECK(positive);
    CHECK(negative);
  }
  if (c.params.frequency_penalty != 0.0f || c.params.presence_penalty != 0.0f) {
    bool repeated_survivor = false;
    for (Token t : c.history.output)
      repeated_survivor = repeated_survivor ||
                          (std::count(c.history.output.begin(), c.history.output.end(), t) >= 2 && base.probs[t] > 0);
    CHECK(repeated_survivor);
  }
  // A banned token is the mode of the raw logits (banning an unlikely token proves little).
  for (Token t : c.params.banned_tokens)
    CHECK(std::max_element(c.logits.begin(), c.logits.end()) - c.logits.begin() == t);
}

}  // namespace

TEST_CASE("specula sample streams its samples: four billion start at once in bounded memory", "[cli]") {
  TempDir dir;
  const std::string logits = dir.write("logits.txt", "0.5 1.0 2.0\n");
  // Under a 2 GiB address-space limit (holding the samples would take ~16 GB) the first lines arrive at once,
  // and the reader's exit ends the process through the closed pipe.
  const std::string command = "ulimit -v 2000000; '" + std::string(SPECULA_BINARY) + "' sample --logits '" + logits +
                              "' --num-samples 4000000000 --seed 3 2>'" + dir.path("err.txt") + "' | head -n 5";
  FILE* pipe = ::popen(("bash -c \"" + command + "\"").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, got);
  ::pclose(pipe);
  CHECK(std::count(out.begin(), out.end(), '\n') == 5);
}

TEST_CASE("specula sample prints exactly N token ids, one per line, reproducibly", "[cli]") {
  TempDir dir;
  const std::string logits = dir.write("logits.txt", "0.5, 1.0, -inf, 2.0 -0.5\t0.25\n");  // commas, spaces, -inf
  const RunResult r = run_sample(dir, "--logits '" + logits + "' --num-samples 1000 --seed 7");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const std::vector<Token> tokens = parse_tokens(r.out, 6, 1000);
  for (Token t : tokens) CHECK(t != 2);  // -inf is never drawn
  // The draws are the library's: draw i uses Philox (seed, stream 0, offset i) on the processed row.
  const SamplerPipeline pipeline(SamplingParams{}, 6);
  const std::vector<float> probs = pipeline.process({0.5f, 1.0f, -INFINITY, 2.0f, -0.5f, 0.25f}, TokenHistory{});
  for (size_t i = 0; i < tokens.size(); ++i)
    REQUIRE(tokens[i] == sample_categorical(probs.data(), 6, RandomKey{7, philox_stream(0, RandomRole::sample), i}));
  // Same seed, same output; another seed, another.
  CHECK(run_sample(dir, "--logits '" + logits + "' --num-samples 1000 --seed 7").out == r.out);
  // Output is streamed in blocks of 65536: sample i is the same whatever N, across block boundaries too.
  const std::string many = run_sample(dir, "--logits '" + logits + "' --num-samples 70000 --seed 7").out;
  CHECK(std::count(many.begin(), many.end(), '\n') == 70000);
  CHECK(many.compare(0, r.out.size(), r.out) == 0);
  CHECK(run_sample(dir, "--logits '" + logits + "' --num-samples 1000 --seed 8").out != r.out);
  // Zero samples: no output at all.
  const RunResult none = run_sample(dir, "--logits '" + logits + "' --num-samples 0 --seed 7");
  CHECK(none.exit_code == 0);
  CHECK(none.out.empty());
  // Greedy: every line the argmax.
  const RunResult greedy = run_sample(dir, "--logits '" + logits + "' --num-samples 50 --seed 7 --temperature 0");
  for (Token t : parse_tokens(greedy.out, 6, 50)) CHECK(t == 3);
}

TEST_CASE("specula sample: 200k draws of three stage-activating configs pass a G-test against the reference",
          "[cli][sampler][frequency]") {
  TempDir dir;
  constexpr int64_t n = 200000;
  uint64_t seed = 2024;
  for (const CliConfig& c : {config_a(), config_b(), config_c()}) {
    INFO(c.name);
    require_stage_activating(c);
    const std::string logits = dir.write("logits.txt", logits_text(c.logits));
    std::string args = "--logits '" + logits + "' " + c.args;
    if (!c.ini.empty()) args += " --config '" + dir.write("config.ini", c.ini) + "'";
    INFO("args: " << args);
    const std::vector<double> law = reference::probs(c.logits, c.params, c.history);

    // The processed distribution, exactly: this also checks that the command line means `params`.
    const RunResult dist = run_sample(dir, args + " --print-distribution");
    INFO(dist.err);
    REQUIRE(dist.exit_code == 0);
    const std::vector<double> printed = parse_distribution(dist.out);
    REQUIRE(printed.size() == law.size());
    for (size_t i = 0; i < law.size(); ++i) CHECK(std::fabs(printed[i] - law[i]) <= 1e-6);

    const RunResult r =
        run_sample(dir, args + " --num-samples " + std::to_string(n) + " --seed " + std::to_string(++seed));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::vector<int64_t> counts(c.logits.size(), 0);
    for (Token t : parse_tokens(r.out, static_cast<int32_t>(c.logits.size()), n)) ++counts[t];
    const stats::GofResult g = stats::g_test(counts, law);
    INFO(g.detail);
    CHECK(g.passed(stats::kAlpha));
  }
}

TEST_CASE("specula sample --config: INI values apply, the command line wins", "[cli]") {
  TempDir dir;
  const CliConfig c = config_c();
  const std::string logits = dir.write("logits.txt", logits_text(c.logits));
  const std::string ini = dir.write("config_c.ini", kConfigCIni);
  auto distribution = [&](const std::string& args) {
    const RunResult r = run_sample(dir, "--logits '" + logits + "' --print-distribution " + args);
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return parse_distribution(r.out);
  };
  auto max_diff = [](const std::vector<double>& a, const std::vector<double>& b) {
    REQUIRE(a.size() == b.size());
    double m = 0.0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
  };
  // The INI alone: temperature 0.5 from the file.
  SamplingParams from_file = c.params;
  from_file.temperature = 0.5f;
  const std::vector<double> file_law = reference::probs(c.logits, from_file, c.history);
  const std::vector<double> override_law = reference::probs(c.logits, c.params, c.history);
  REQUIRE(reference::total_variation(file_law, override_law) >= 0.02);  // the override is observable
  CHECK(max_diff(distribution("--mirostat-mu 3.5 --config '" + ini + "'"), file_law) <= 1e-6);
  // The command line wins, whether it comes before or after --config.
  CHECK(max_diff(distribution("--temperature 1.3 --mirostat-mu 3.5 --config '" + ini + "'"), override_law) <= 1e-6);
  CHECK(max_diff(distribution("--config '" + ini + "' --mirostat-mu 3.5 --temperature 1.3"), override_law) <= 1e-6);
  // Keys without a section work too, with '-' or '_'.
  const std::string flat = dir.write("flat.ini", "top_k = 1\nbanned-tokens = 1\n");
  std::vector<double> expected(c.logits.size(), 0.0);
  expected[5] = 1.0;  // the mode (1) is banned: the runner-up
  CHECK(max_diff(distribution("--config '" + flat + "'"), expected) <= 1e-6);
}

TEST_CASE("specula sample notes --mirostat-mu and other options its values leave unread", "[cli]") {
  TempDir dir;
  const std::string logits = dir.write("logits.txt", "0.5 1 -0.25 2\n");
  const std::string base = "--logits '" + logits + "' --print-distribution ";
  const RunResult off = run_sample(dir, base + "--mirostat-mu 3 --temperature 0 --top-k 2");
  REQUIRE(off.exit_code == 0);
  CHECK_THAT(off.err, Contains("note: --mirostat-mu is left unread: greedy decoding (temperature 0)") &&
                          Contains("note: --top-k is left unread: greedy decoding"));
  CHECK_THAT(run_sample(dir, base + "--mirostat-mu 3").err,
             Contains("note: --mirostat-mu is left unread: mirostat is off (mirostat = 0)"));
  CHECK_THAT(run_sample(dir, base + "--mirostat 2 --mirostat-mu 3 --mirostat-tau 2").err, !Contains("note:"));
}

TEST_CASE("specula sample: bad input exits non-zero with a message naming the parameter or file:line", "[cli]") {
  TempDir dir;
  const std::string logits = dir.write("logits.txt", "0.5 1.0 -0.5 2.0\n");
  const std::string base = "--logits '" + logits + "' --num-samples 10 --seed 1 ";
  auto expect_error = [&](const std::string& args, const auto& matcher) {
    const RunResult r = run_sample(dir, args);
    INFO("args: " << args << "\nstderr: " << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());  // nothing half-written on stdout
    CHECK_THAT(r.err, matcher);
  };
  // Each parameter's range is tested in-process (test_sampler_errors.cpp); here, that the CLI reports it.
  expect_error(base + "--top-p 1.5", Contains("--top-p must be in (0, 1], got 1.5"));
  expect_error(base + "--temperature -1", Contains("--temperature must be"));
  expect_error(base + "--banned-tokens 4", Contains("--banned-tokens: token id 4 is outside the vocabulary [0, 4)"));
  // A value out of range is refused before the logits file is read (it does not exist here).
  expect_error("--logits '" + dir.path("missing.txt") + "' --num-samples 10 --seed 1 --min-p 2",
               Contains("--min-p must be in [0, 1], got 2"));
  expect_error(base + "--output-tokens 2,9 --frequency-penalty 1", Contains("output-tokens") && Contains("9"));
  expect_error(base + "--allowed-tokens 1 --banned-tokens 1", Contains("no token"));
  expect_error(base + "--sampler-order top_p,nucleus", Contains("sampler-order") && Contains("nucleus"));
  expect_error(base + "--top-p abc", Contains("top-p"));
  expect_error("--logits '" + logits + "' --seed 1", Contains("--num-samples"));

  const std::string nan_file = dir.write("nan.txt", "0.5 nan 1.0\n");
  expect_error("--logits '" + nan_file + "' --num-samples 10 --seed 1", Contains(nan_file) && Contains("NaN"));
  const std::string inf_file = dir.write("inf.txt", "0.5, 1.0, inf\n");
  expect_error("--logits '" + inf_file + "' --num-samples 10 --seed 1", Contains(inf_file) && Contains("+inf"));
  expect_error("--logits '" + dir.path("missing.txt") + "' --num-samples 10 --seed 1", Contains("missing.txt"));
  // A value float32 cannot hold is named with its file, not found later as +inf.
  const std::string big_file = dir.write("big.txt", "1e40 0.5\n");
  expect_error("--logits '" + big_file + "' --num-samples 10 --seed 1",
               Contains(big_file + ": entry 0 ('1e40') is beyond float32's range"));
  // A row of -inf alone: said as such, not blamed on filters nobody gave.
  const std::string masked_file = dir.write("masked.txt", "-inf -inf\n");
  expect_error("--logits '" + masked_file + "' --num-samples 10 --seed 1",
               Contains("every logit of the row is -inf") && !Contains("banned_tokens"));
  // What the device's sampler cannot do is named by its flag and the device.
  expect_error(base + "--mirostat 2 --device cuda-host", Contains("--mirostat 2 is not supported on device cuda-host"));
  expect_error(base + "--mirostat 2 --mirostat-mu nan", Contains("--mirostat-mu must be a finite number"));
  for (const char* text : {"0.5,,1.0\n", ",0.5 1.0\n", "0.5 1.0,\n"}) {
    INFO(text);
    expect_error("--logits '" + dir.write("empty-item.txt", text) + "' --num-samples 10 --seed 1",
                 Contains("empty item"));
  }
  expect_error("--logits '" + dir.write("table.txt", "0.5 1.0\n0.2 0.1\n") + "' --num-samples 10 --seed 1",
               Contains("table.txt") && Contains("one row"));

  const std::string unknown = dir.write("unknown.ini", "[sample]\ntemperature = 0.7\n\ntop_q = 0.5\n");
  expect_error(base + "--config '" + unknown + "'",
               Contains(unknown + ":4") && Contains("unknown key") && Contains("top_q"));
  const std::string bad_value = dir.write("bad_value.ini", "top_p = lots\n");
  expect_error(base + "--config '" + bad_value + "'", Contains(bad_value + ":1") && Contains("top_p"));
  const std::string out_of_range = dir.write("range.ini", "# comment\ntop_p = 1.5\n");
  expect_error(base + "--config '" + out_of_range + "'",
               Contains(out_of_range + ":2") && Contains("top_p") && Contains("1.5"));
  const std::string duplicate = dir.write("dup.ini", "top_k = 3\ntop_k = 4\n");
  expect_error(base + "--config '" + duplicate + "'", Contains(duplicate + ":2") && Contains("top_k"));
}
