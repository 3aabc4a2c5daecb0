// `specula generate` end to end: the output and metrics formats other tools rely on, the errors for bad
// models and options, and greedy speculation equal to greedy decoding through the command line.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "cli_runner.h"
#include "harness/config/device_options.h"
#include "harness/io/output_file.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// A command that must fail (exit 1) with `message` in its error.
struct RefusalCase {
  std::string args, message;
};

void expect_refusals(const std::vector<RefusalCase>& cases) {
  for (const RefusalCase& c : cases) {
    INFO(c.args);
    const CliResult r = run_specula(c.args);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(c.message));
  }
}

}  // namespace

TEST_CASE("generate writes L tokens per sample (no stop token) and the documented metrics", "[cli][generate]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable), draft = dir.write("d.txt", kCliDraftTable);
  for (const std::string method : {"ar", "chain", "block", "tree", "greedy", "typical"}) {
    INFO(method);
    std::string extra = method == "tree" ? " --tree 2,1" : method == "ar" ? "" : " --num-draft-tokens 3";
    if (method == "greedy") extra += " --temperature 0";
    const CliResult r = run_specula("generate --target bigram:" + target +
                                    (method == "ar" ? "" : " --draft bigram:" + draft) + " --method " + method + extra +
                                    " --prompt-tokens 0,3 --max-new-tokens 7 --num-samples 50 --seed 3 --output " +
                                    dir.file("out.txt") + " --metrics-json " + dir.file("m.json"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const auto lines = read_id_lines(dir.file("out.txt"));
    REQUIRE(lines.size() == 50);
    for (const auto& line : lines) {
      CHECK(line.size() == 7);
      for (int t : line) CHECK((t >= 0 && t < 4));
    }
    const nlohmann::json m = nlohmann::json::parse(read_text(dir.file("m.json")));
    for (const char* key : {"acceptance_rate", "mean_accepted_length", "per_position_acceptance",
                            "accepted_length_histogram", "expected_acceptance", "target_calls", "draft_calls", "steps"})
      CHECK(m.contains(key));
    if (method != "ar") {
      const size_t positions = method == "tree" ? 2 : 3;
      CHECK(m["per_position_acceptance"].size() == positions);
      CHECK(m["accepted_length_histogram"].size() == positions + 1);
      CHECK(m["mean_accepted_length"].get<double>() >= 1.0);
      CHECK(m["target_calls"].get<int64_t>() == m["steps"].get<int64_t>());
      CHECK(m["lossy"].get<bool>() == (method == "typical"));
    } else {
      CHECK(m["target_calls"].get<int64_t>() == 50 * 7);
    }
  }
}

TEST_CASE("a draft with stop tokens of its own follows the target's automaton", "[cli][generate][constraints]") {
  // The draft is the target itself at temperature 0, so every draft is accepted when the draft masks as the target
  // does. The draft's stop token is a letter of the pattern: an automaton of its own would number states otherwise
  // (or mask the letter), and the run would fail or accept less.
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);
  for (const std::string pattern : {"(ab|cd)+", "a(b|c)d|c(a|b)a", "(a|cb)(d|ba)(c|d)"})
    for (const std::string draft_stop : {"0", "1", "2"}) {
      INFO(pattern << " --draft-stop-tokens " << draft_stop);
      const CliResult r = run_specula("generate --target bigram:" + target + " --draft bigram:" + target +
                                      " --method chain --num-draft-tokens 3 --temperature 0 --regex '" + pattern +
                                      "' --draft-stop-tokens " + draft_stop +
                                      " --prompt-tokens 0 --max-new-tokens 8 --num-samples 3 --output " +
                                      dir.file("o.txt") + " --metrics-json " + dir.file("m.json"));
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      CHECK(nlohmann::json::parse(read_text(dir.file("m.json"))).at("acceptance_rate") == 1.0);
    }
  // The draft's own masks ban the one letter the pattern allows ('d' is a draft stop token below its minimum
  // length): the draft proposes without the pattern's mask there, and the target's output is greedy decoding's.
  std::string greedy;
  for (const std::string method : {"ar", "chain", "block", "tree --tree 2,1"}) {
    INFO(method);
    const CliResult r = run_specula(
        "generate --target bigram:" + target +
        (method == "ar" ? "" : " --draft bigram:" + target + " --draft-stop-tokens 3 --draft-min-tokens 2") +
        " --method " + method + " --temperature 0 --regex 'd(a|b)' --prompt-tokens 0 --max-new-tokens 8 --output " +
        dir.file("o.txt"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    if (method == "ar") greedy = read_text(dir.file("o.txt"));
    CHECK(read_text(dir.file("o.txt")) == greedy);
    CHECK(greedy.rfind("3 ", 0) == 0);
  }
}

TEST_CASE("generate says when a constrained output was cut by --max-new-tokens", "[cli][generate][constraints]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);  // tokens read as a, b, c, d
  const std::string base = "generate --target bigram:" + target + " --regex 'abcd(ab)?' --prompt-tokens 0 --seed 1 " +
                           "--num-samples 5 --output " + dir.file("o.txt") + " --max-new-tokens ";
  const CliResult cut = run_specula(base + "3");
  INFO(cut.err);
  REQUIRE(cut.exit_code == 0);
  CHECK_THAT(cut.err, Contains("warning: 5 of 5 samples reached --max-new-tokens before a whole match"));
  // Beam search's answer too.
  const CliResult beam = run_specula("generate --target bigram:" + target +
                                     " --regex 'abcd(ab)?' --prompt-tokens 0 --method beam --output " +
                                     dir.file("b.txt") + " --max-new-tokens 3");
  INFO(beam.err);
  CHECK(beam.exit_code == 0);
  CHECK_THAT(beam.err, Contains("warning: the best hypothesis reached --max-new-tokens before a whole match"));
  // Long enough: every sample is a whole match (abcd, which may go on, or abcdab, where the match ends).
  const CliResult whole = run_specula(base + "4");
  INFO(whole.err);
  REQUIRE(whole.exit_code == 0);
  CHECK_THAT(whole.err, !Contains("whole match"));
  CHECK_THAT(
      run_specula("generate --target bigram:" + target + " --regex 'abcd(ab)?' --prompt-tokens 0 --method beam " +
                  "--output " + dir.file("b.txt") + " --max-new-tokens 4")
          .err,
      !Contains("whole match"));
}

TEST_CASE("a JSON schema given to generate is read once: a pipe works", "[cli][generate][constraints]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);
  const std::string schema = dir.write("s.json", R"({"type":"boolean"})");
  const std::string strings = dir.write("ts.txt", "t\nr\nu\ne\n");  // "true" only: "false" cannot be spelled
  const std::string command = "cat '" + schema + "' | " + SPECULA_BINARY + " generate --target bigram:" + target +
                              " --token-strings " + strings +
                              " --json-schema /dev/stdin --prompt-tokens 0 --max-new-tokens 8 --output " +
                              dir.file("o.txt") + " 2>" + dir.file("err.txt");
  const int status = std::system(command.c_str());
  INFO(read_text(dir.file("err.txt")));
  REQUIRE(status == 0);
  CHECK(read_text(dir.file("o.txt")) == "0 1 2 3\n");  // "true", ended: nothing can follow it
}

TEST_CASE("speculative decoding at temperature 0 prints exactly greedy decoding's output", "[cli][generate]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable), draft = dir.write("d.txt", kCliDraftTable);
  const std::string common =
      " --prompt-tokens 1 --max-new-tokens 20 --num-samples 3 --temperature 0 --repetition-penalty 1.3";
  REQUIRE(
      run_specula("generate --target bigram:" + target + " --method ar" + common + " --output " + dir.file("ar.txt"))
          .exit_code == 0);
  for (const std::string method : {"chain", "block", "tree", "greedy", "chain --num-draft-tokens-schedule heuristic",
                                   "block --num-draft-tokens-schedule heuristic --num-draft-tokens 6"}) {
    INFO(method);
    REQUIRE(run_specula("generate --target bigram:" + target + " --draft bigram:" + draft + " --method " + method +
                        common + " --draft-temperature 1 --output " + dir.file("s.txt"))
                .exit_code == 0);
    CHECK(read_text(dir.file("s.txt")) == read_text(dir.file("ar.txt")));
  }
}

TEST_CASE("generate refuses bad models and options with a message naming them", "[cli][generate][errors]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable), draft = dir.write("d.txt", kCliDraftTable);
  const std::string ragged = dir.write("ragged.txt", "0 1 2\n0 1\n0 1 2\n");
  const std::string nan = dir.write("nan.txt", "0 1\n0 nan\n");
  const std::string word = dir.write("word.txt", "0 1\n0 x\n");
  const std::string small = dir.write("small.txt", "0 1\n1 0\n");
  const std::string out = " --output " + dir.file("o.txt");
  const std::string unloadable = "--target bigram:" + dir.file("missing.txt") + " --prompt-tokens 0 --max-new-tokens 2";
  const std::string schema = dir.write("s.json", R"({"type":"boolean"})");
  const std::string bad_schema = dir.write("bad.json", R"({"type":"integer","minimum":0})");
  const std::string huge_schema = dir.write(
      "huge.json",
      R"({"type":"array","items":{"type":"array","items":{"type":"string","maxLength":1000},"maxItems":1000},)"
      R"("maxItems":1000})");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--target bigram:" + ragged + " --prompt-tokens 0 --max-new-tokens 2" + out, ragged + ":2: row has 2 logits"},
      {"--target bigram:" + nan + " --prompt-tokens 0 --max-new-tokens 2" + out, nan + ":2: column 2: NaN"},
      {"--target bigram:" + word + " --prompt-tokens 0 --max-new-tokens 2" + out, word + ":2: column 2: 'x'"},
      {"--target bigram:" + dir.file("missing.txt") + " --prompt-tokens 0 --max-new-tokens 2" + out, "cannot open"},
      {"--target bigram:" + target + " --draft bigram:" + small +
           " --method chain --prompt-tokens 0 --max-new-tokens 2" + out,
       "vocabulary mismatch"},
      {"--target bigram:" + target + " --draft bigram:" + draft +
           " --method sideways --prompt-tokens 0 --max-new-tokens 2" + out,
       "--method: unknown method 'sideways' (known: ar, greedy, chain, tree, block, typical"},  // an added one next
      {"--target bigram:" + target + " --method chain --prompt-tokens 0 --max-new-tokens 2" + out,
       "--method chain needs a draft model"},
      {"--target bigram:" + target + " --draft bigram:" + draft +
           " --method greedy --temperature 0.7 --prompt-tokens 0 --max-new-tokens 2" + out,
       "--method greedy verifies greedy decoding: use temperature 0 (got 0.7)"},
      {"--target bigram:" + target + " --draft bigram:" + draft +
           " --method chain --tree 2,2 --prompt-tokens 0 --max-new-tokens 2" + out,
       "--tree"},
      {"--target bigram:" + target + " --prompt-tokens 0,9 --max-new-tokens 2" + out, "token id 9"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --top-p 0" + out,
       "--top-p must be in (0, 1], got 0"},
      // Values are quoted as written, never as float32 turned them (1e-300 would read "got 0").
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --top-p 1e-300" + out,
       "--top-p: '1e-300' is too small for a 32-bit float (it would be 0)"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --min-p 1e40" + out,
       "--min-p: '1e40' is too large for a 32-bit float"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --top-p 0.9x" + out,
       "--top-p: '0.9x' is not a number"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --top-p 1.0000001" + out,
       "--top-p must be in (0, 1], got 1.0000001"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --temperature 0.00012345678" + out,
       "--temperature: 0.00012345678 is below the smallest temperature"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --temperature nan" + out,
       "--temperature: 'nan' is not a finite number (0 = greedy)"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --temperature inf" + out,
       "--temperature: 'inf' is not a finite number (0 = greedy)"},
      {"--target bigram:" + target + " --max-new-tokens 2" + out,
       "give one of --prompt TEXT, --prompt-file FILE and --prompt-tokens IDS"},
      {"--target bigram:" + target + " --prompt-tokens '' --max-new-tokens 2" + out,
       "--prompt-tokens: the prompt has no tokens: a model needs at least one token of context"},
      {"--target unicorn:x --prompt-tokens 0 --max-new-tokens 2" + out, "unknown model 'unicorn:x'"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --temperature 1e-50" + out,
       "below the smallest temperature"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 stray" + out,
       "unexpected argument 'stray'"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --config " + dir.file("") + out,
       "config file: '" + dir.file("") + "' is a folder, not a file"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --logit-bias 1:2,1:3" + out,
       "token 1 is biased twice"},
      {"--target bigram:" + target + " --draft bigram:" + draft +
           " --method tree --tree 2,1, --prompt-tokens 0 --max-new-tokens 2" + out,
       "ends with a comma"},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --regex ''" + out, "the pattern is empty"},
      {"--target bigram:" + target + " --prompt-tokens 0,,1 --max-new-tokens 2" + out, "empty item in '0,,1'"},
      // A constraint's options are checked before the target loads (it cannot load here); the vocabulary's checks
      // come after.
      {unloadable + " --regex '(ab'" + out, "regex '(ab': position 0"},
      {unloadable + " --regex a --json-schema " + schema + out,
       "--regex and --json-schema: give one constraint, not both"},
      {unloadable + " --token-strings " + schema + out,
       "--token-strings: token strings are read only with --regex or --json-schema"},
      {unloadable + " --device cuda-host --regex a" + out,
       "--regex is not supported on --device cuda-host (constrained decoding runs on the CPU)"},
      {unloadable + " --json-schema " + bad_schema + out,
       "json schema '" + bad_schema + "': at /: unsupported feature 'minimum'"},
      {unloadable + " --json-schema " + huge_schema + out,
       "json schema '" + huge_schema + "': its regular expression ("},
      {"--target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 2 --regex zz" + out,
       "--regex: regex 'zz': no token can begin a match"},
      // --print-text needs a tokenizer: refused before the run is assembled.
      {"--target bigram:" + target + " --draft bigram:" + draft +
           " --method chain --prompt-tokens 0 --max-new-tokens 2 --print-text" + out,
       "--print-text: the target"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const CliResult r = run_specula("generate " + c.args);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Contains(c.message));
  }
}

TEST_CASE("--device cuda: a clear error without a usable GPU, the CPU's output with one", "[cli][device]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);
  const std::string logits = dir.write("l.txt", "0.1 0.2 0.3\n");
  const std::string sample = "sample --logits " + logits + " --num-samples 3 --seed 1 --device ";
  const std::string generate = "generate --target bigram:" + target + " --draft bigram:" + target +
                               " --method chain --prompt-tokens 0 --max-new-tokens 6 --num-samples 20 --device ";
  const CliResult sample_cpu = run_specula(sample + "cpu");
  REQUIRE(sample_cpu.exit_code == 0);
  const CliResult generate_cpu = run_specula(generate + "cpu --output " + dir.file("cpu"));
  REQUIRE(generate_cpu.exit_code == 0);
  const CliResult sample_gpu = run_specula(sample + "cuda");
  const CliResult generate_gpu = run_specula(generate + "cuda --output " + dir.file("gpu"));
  if (specula::cuda_device_count_or_zero() == 0) {
    for (const CliResult& r : {sample_gpu, generate_gpu}) {
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Contains("no CUDA device: "));
      CHECK(r.out.empty());
    }
    CHECK_FALSE(std::filesystem::exists(dir.file("gpu")));
  } else {  // the same Philox keys: the same draws
    CHECK(sample_gpu.exit_code == 0);
    CHECK(sample_gpu.out == sample_cpu.out);
    CHECK(generate_gpu.exit_code == 0);
    CHECK(read_text(dir.file("gpu")) == read_text(dir.file("cpu")));
  }
  CHECK_THAT(run_specula(sample + "tpu").err, Contains("unknown device 'tpu'"));
}

TEST_CASE("--device cuda-host runs the kernels' code on the CPU: the CPU's output, refusals by name", "[cli][device]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);
  const std::string logits = dir.write("l.txt", "0.1 0.2 0.3 -0.4 1.5\n");
  const std::string sample = "sample --logits " + logits + " --num-samples 50 --seed 4 --top-k 3 --device ";
  const CliResult sample_cpu = run_specula(sample + "cpu"), sample_host = run_specula(sample + "cuda-host");
  REQUIRE(sample_cpu.exit_code == 0);
  CHECK(sample_host.exit_code == 0);
  CHECK(sample_host.out == sample_cpu.out);
  const std::string base = "generate --target bigram:" + target +
                           " --prompt-tokens 0 --max-new-tokens 9 --num-samples 30 --temperature 0.9"
                           " --repetition-penalty 1.2 --seed 3 ";
  const std::string draft = " --draft bigram:" + target;
  for (const std::string& method : std::vector<std::string>{"--method ar", "--method block" + draft,
                                                            "--method tree --tree 3,1 --tree-sampling topk" + draft}) {
    INFO(method);
    const CliResult cpu = run_specula(base + method + " --output " + dir.file("cpu"));
    REQUIRE(cpu.exit_code == 0);
    // One block per row, each row over a cluster of 3, and over 3 blocks exchanging through global memory.
    for (const std::string blocks : {"1", "3", "3 --cuda-host-exchange global_memory"}) {
      const CliResult host =
          run_specula(base + method + " --device cuda-host --cuda-host-threads 4 --cuda-host-blocks " + blocks +
                      " --output " + dir.file("host") + " --metrics-json " + dir.file("m.json"));
      INFO(blocks << " blocks: " << host.err);
      REQUIRE(host.exit_code == 0);
      CHECK(read_text(dir.file("host")) == read_text(dir.file("cpu")));
      CHECK_THAT(read_text(dir.file("m.json")), Contains("\"device\": \"cuda-host\""));
    }
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--method chain --typical-p 0.9", "--typical-p 0.9 is not supported on device cuda-host"},
      {"--method chain --mirostat 2", "--mirostat 2 is not supported on device cuda-host"},
      {"--method typical", "--method typical is not supported on device cuda-host"},
      {"--method chain --logprobs 2 --logprobs-output " + dir.file("lp"), "--logprobs is not supported"},
      {"--method beam", "beam search runs on the CPU"},
      {"--method chain --cuda-host-threads 5", "--cuda-host-threads: emulated kernels: threads per block must be"},
      {"--method chain --cuda-host-blocks 17",
       "--cuda-host-blocks: emulated kernels: blocks per cluster must be in [1, 16], got 17"},
      {"--method chain --cuda-host-exchange dsmem",
       "--cuda-host-exchange: unknown row exchange 'dsmem' (expected automatic or global_memory)"},
  };
  for (const auto& [options, message] : refused) {
    INFO(options);
    const bool beam = options == "--method beam";  // which drafts nothing
    const CliResult r =
        run_specula(base + options + (beam ? "" : draft) + " --device cuda-host --output " + dir.file("x"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(message));
  }
}

TEST_CASE("generate --prompt TEXT prints the decoded continuation for models with a tokenizer", "[cli][generate]") {
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  const CliResult r = run_specula("generate --target transformer:" + models + "target --draft transformer:" + models +
                                  "draft --method chain --prompt 'ROMEO:' --max-new-tokens 24 --temperature 0");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.size() == 24 + 1);  // the continuation: byte tokens, one character each, then '\n'
  TempDir dir;
  const CliResult no_tokenizer = run_specula("generate --target bigram:" + dir.write("t.txt", kCliTargetTable) +
                                             " --prompt 'hello' --max-new-tokens 2");
  CHECK(no_tokenizer.exit_code == 1);
  CHECK_THAT(no_tokenizer.err, Contains("has no tokenizer"));
}

TEST_CASE("a failed write is an error naming the output, and an old file survives it", "[cli][errors]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);
  const std::string base =
      "generate --target bigram:" + target + " --prompt-tokens 0 --max-new-tokens 8 --num-samples 200";
  for (const std::string option : {"--output", "--metrics-json", "--logprobs-output"}) {
    INFO(option);
    std::string args = base + " " + option + " /dev/full";
    if (option == "--logprobs-output")
      args += " --logprobs 2";
    else if (option != "--output")
      args += " --output " + dir.file("o.txt");
    const CliResult r = run_specula(args);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(option) && Contains("/dev/full"));
  }
  // Standard output to a full device.
  const std::string err = dir.file("err.txt");
  const int status =
      std::system((std::string(SPECULA_BINARY) + " sample --logits " + dir.write("l.txt", "0.1 0.2 0.3") +
                   " --num-samples 5000 --seed 1 >/dev/full 2>" + err)
                      .c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(read_text(err), Contains("standard output"));
  // A file-size limit (a full disk): the write fails, the error names the file, the old content is intact.
  const std::string out = dir.write("kept.txt", "old content\n");
  const int limited = std::system(("bash -c \"trap '' XFSZ; ulimit -f 1; " + std::string(SPECULA_BINARY) + " " + base +
                                   " --output " + out + "\" 2>" + err)
                                      .c_str());
  CHECK(WIFEXITED(limited));
  CHECK(WEXITSTATUS(limited) == 1);
  CHECK_THAT(read_text(err), Contains("--output") && Contains(out));
  CHECK(read_text(out) == "old content\n");
}

TEST_CASE("a file replaced atomically keeps its old content, and leaves no temporary, when the write fails",
          "[errors]") {
  TempDir dir;
  const std::string path = dir.write("weights.bin", "old weights\n");
  const auto temporaries = [&] {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
      n += entry.path().filename().string().rfind("weights.bin.tmp", 0) == 0;
    return n;
  };
  // The writer fails halfway (a full disk, a serialisation error): its error, the old file, no temporary.
  CHECK_THROWS_WITH(specula::replace_file_atomically(path, "weights",
                                                     [](const std::string& temporary) {
                                                       std::ofstream(temporary) << "half";
                                                       specula::fail("disk full");
                                                     }),
                    Contains("disk full"));
  CHECK(read_text(path) == "old weights\n");
  CHECK(temporaries() == 0);
  // The rename fails (the path is a non-empty folder): an error naming the file, no temporary left.
  const std::string folder = dir.file("folder");
  std::filesystem::create_directories(folder + "/inside");
  CHECK_THROWS_WITH(specula::replace_file_atomically(
                        folder, "the folder", [](const std::string& temporary) { std::ofstream(temporary) << "new"; }),
                    Contains("the folder: cannot move the finished file into place"));
  CHECK(std::filesystem::is_directory(folder + "/inside"));
  // A successful write replaces the content.
  specula::replace_file_atomically(path, "weights",
                                   [](const std::string& temporary) { std::ofstream(temporary) << "new weights\n"; });
  CHECK(read_text(path) == "new weights\n");
  CHECK(temporaries() == 0);
}

TEST_CASE("the draft length is bounded before any work", "[cli][errors]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable), draft = dir.write("d.txt", kCliDraftTable);
  const CliResult r = run_specula("generate --target bigram:" + target + " --draft bigram:" + draft +
                                  " --method chain --num-draft-tokens 2147483647 --prompt-tokens 0 --max-new-tokens 4 "
                                  "--output " +
                                  dir.file("o.txt"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("--num-draft-tokens must be <= 256"));
  // Deeper than the whole generation: its tail could never be emitted.
  const std::string base = "generate --target bigram:" + target + " --draft bigram:" + draft +
                           " --prompt-tokens 0 --max-new-tokens 4 --output " + dir.file("o.txt");
  const CliResult chain = run_specula(base + " --method chain --num-draft-tokens 5");
  CHECK(chain.exit_code == 1);
  CHECK_THAT(chain.err,
             Contains("--num-draft-tokens asks for a draft 5 deep, more than the 4 tokens of max_new_tokens"));
  const CliResult tree = run_specula(base + " --method tree --tree 2,1,1,1,1");
  CHECK(tree.exit_code == 1);
  CHECK_THAT(tree.err, Contains("--tree asks for a draft 5 deep"));
  CHECK(run_specula(base + " --method chain --num-draft-tokens 4").exit_code == 0);
  // The default K (4) is cut to a shorter generation rather than refused: the user did not ask for it.
  std::string shorter = base;
  shorter.replace(shorter.find("--max-new-tokens 4"), 18, "--max-new-tokens 2");
  CHECK(run_specula(shorter + " --method chain").exit_code == 0);
}

namespace {

// `generate` over the CLI's bigram tables: `plain` without a draft, `base` with the draft table.
struct BigramGenerate {
  TempDir dir;
  std::string plain, base;
  BigramGenerate()
      : plain("generate --target bigram:" + dir.write("t.txt", kCliTargetTable) +
              " --prompt-tokens 0 --max-new-tokens 8 --output " + dir.file("o.txt")),
        base(plain + " --draft bigram:" + dir.write("d.txt", kCliDraftTable)) {}
};

// Each of `refused` (options, and the message) exits 1 naming it: after `plain` where the options draft nothing
// (--method ar, which would refuse a --draft first) or name their own --draft, else after `base`.
void check_generate_refusals(const BigramGenerate& g, const std::vector<std::pair<std::string, std::string>>& refused) {
  for (const auto& [options, message] : refused) {
    INFO(options);
    const bool plain =
        options.find("--method ar") != std::string::npos || options.find("--draft ") != std::string::npos;
    const CliResult r = run_specula((plain ? g.plain : g.base) + options);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(message));
  }
}

}  // namespace

TEST_CASE(
    "--num-draft-tokens-schedule: a chain's K moves; a tree, a method that drafts nothing, a bad name are refused",
    "[cli][errors]") {
  const BigramGenerate g;
  const std::string& base = g.base;
  CHECK(run_specula(base + " --method chain --num-draft-tokens-schedule heuristic").exit_code == 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {" --method tree --tree 2,1 --num-draft-tokens-schedule heuristic",
       "error: --num-draft-tokens-schedule: method tree verifies a tree of a fixed shape (only the methods that verify "
       "chains read it)"},
      {" --method ar --num-draft-tokens-schedule heuristic", "--num-draft-tokens-schedule: --method ar drafts nothing"},
      {" --method chain --num-draft-tokens-schedule adaptive",
       "--num-draft-tokens-schedule: unknown num_draft_tokens_schedule 'adaptive' (known: constant, heuristic)"}};
  check_generate_refusals(g, refused);
}

TEST_CASE("--confidence-threshold: a chain stops early; a tree, a method that drafts nothing, a bad value are refused",
          "[cli][errors]") {
  const BigramGenerate g;
  const std::string& base = g.base;
  CHECK(run_specula(base + " --method chain --confidence-threshold 0.4").exit_code == 0);
  CHECK(run_specula(base + " --method chain --confidence-threshold 0.4 --num-draft-tokens-schedule heuristic")
            .exit_code == 0);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {" --method tree --tree 2,1 --confidence-threshold 0.4",
       "error: --confidence-threshold: method tree verifies a tree of a fixed shape (only the methods that verify "
       "chains read it)"},
      {" --method ar --confidence-threshold 0.4", "--confidence-threshold: --method ar drafts nothing"},
      {" --method chain --confidence-threshold 1", "error: --confidence-threshold must be in [0, 1)"},
      {" --method chain --confidence-threshold -0.1", "error: --confidence-threshold must be in [0, 1)"},
      {" --method chain --draft prompt-lookup --confidence-threshold 0.4",
       "error: --confidence-threshold 0.4: drafter prompt-lookup does not stop on its confidence"}};
  check_generate_refusals(g, refused);
}

TEST_CASE("train refuses to replace an existing checkpoint unless --overwrite", "[cli][errors]") {
  TempDir dir;
  std::filesystem::create_directory(dir.file("out"));
  const std::string config = dir.write("out/config.json", "{}");
  const CliResult r = run_specula("train --corpus " + dir.write("corpus.txt", "to be or not to be") + " --output " +
                                  dir.file("out") + " --steps 1");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("already holds a model (config.json)") && Contains("--overwrite"));
  CHECK(read_text(config) == "{}");
}

TEST_CASE("train stopped by a signal ends after the step in progress, its last save loadable and marked so",
          "[cli][train]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "To be, or not to be, that is the question. ";
  const std::string corpus = dir.write("corpus.txt", text);
  // A tiny model and more steps than the test waits for, started as a shell starts a script's background job (SIGINT
  // ignored); the signal is sent once `ready` holds: a step logged (the loop's handlers are in place), or the first
  // save there. Returns waitpid's status: the run ends by the signal itself, after its cleanup, so that a script
  // running it stops too. One that does not stop within a minute is killed.
  const auto train = [&](const std::string& output, int eval_interval, int signal, const std::function<bool()>& ready) {
    const std::string command = "exec " + std::string(SPECULA_BINARY) + " train --corpus " + corpus + " --output " +
                                output + " --d-model 32 --n-layers 1 --n-heads 2 --d-ff 64 --max-seq-len 32" +
                                " --seq-len 16 --batch-size 2 --steps 1000000 --eval-windows 2 --log-interval 1" +
                                " --eval-interval " + std::to_string(eval_interval) + " >/dev/null 2>" +
                                dir.file("err");
    const pid_t pid = fork();
    if (pid == 0) {
      std::signal(SIGINT, SIG_IGN);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    bool reaped = false;  // ended before the signal: its pid may be another process's by now
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!ready() && std::chrono::steady_clock::now() < deadline && !(reaped = waitpid(pid, &status, WNOHANG) != 0))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (reaped) return status;
    kill(pid, signal);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline + std::chrono::seconds(60)) kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status;
  };
  const auto ended_by = [](int status, int signal) { return WIFSIGNALED(status) && WTERMSIG(status) == signal; };
  SECTION("after a save: the save stays whole and loadable, its record's status saying where the run stopped") {
    const std::string output = dir.file("ckpt");
    CHECK(ended_by(train(output, 5, SIGINT, [&] { return std::filesystem::exists(output + "/config.json"); }), SIGINT));
    const std::string err = read_text(dir.file("err"));
    const std::smatch said = [&] {
      std::smatch m;
      std::regex_search(err, m,
                        std::regex("interrupted \\(SIGINT\\) after step ([0-9]+) of 1000000; " + output +
                                   " holds the model of step ([0-9]+),"));
      return m;
    }();
    REQUIRE(said.size() == 3);
    const nlohmann::json training = nlohmann::json::parse(read_text(output + "/config.json")).at("training");
    CHECK(training.at("status") == "interrupted (SIGINT) after step " + said[1].str() + " of 1000000");
    CHECK(training.at("step") == std::stoi(said[2].str()));
    CHECK(std::stoi(said[2].str()) % 5 == 0);
    CHECK(std::stoi(said[2].str()) <= std::stoi(said[1].str()));
    const CliResult loaded = run_specula("generate --target transformer:" + output +
                                         " --prompt-tokens 84,111 --max-new-tokens 3 --output " + dir.file("ids.txt"));
    INFO(loaded.err);
    CHECK(loaded.exit_code == 0);
  }
  SECTION("before the first save: nothing is written, and the message says when the first save would have been") {
    const std::string output = dir.file("none");
    const auto logged = [&] { return read_text(dir.file("err")).find("\nstep 3/") != std::string::npos; };
    CHECK(ended_by(train(output, 100000, SIGTERM, logged), SIGTERM));
    CHECK_THAT(read_text(dir.file("err")), Contains("interrupted (SIGTERM) after step ") &&
                                               Contains("; nothing was saved to " + output +
                                                        " (the first save follows the validation at step "
                                                        "100000)"));
    CHECK_FALSE(std::filesystem::exists(output));
  }
}

TEST_CASE("specula --version and specula version print the version, git revision and build type", "[cli]") {
  for (const char* flag : {"--version", "version"}) {
    const CliResult r = run_specula(flag);
    INFO(flag << ": " << r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, StartsWith("specula 0.") && Contains("(git ") && Contains(" build)"));
    CHECK(r.out == run_specula("--version").out);
  }
  CHECK_THAT(run_specula("--help").out, Contains("version"));
  // Its --help describes it; an argument is refused; output lost to a full device fails, as every command's does.
  const CliResult help = run_specula("version --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, StartsWith("specula version (or specula --version)\n  prints the version"));
  const CliResult extra = run_specula("version 2");
  CHECK(extra.exit_code == 1);
  CHECK_THAT(extra.err, Contains("specula version: error: unexpected argument '2' (it takes none)"));
  TempDir dir;
  for (const char* args : {"--help", "version", "--version", "run --help"}) {
    INFO(args);
    const int status =
        std::system((std::string(SPECULA_BINARY) + " " + args + " >/dev/full 2>" + dir.file("err")).c_str());
    CHECK((WIFEXITED(status) ? WEXITSTATUS(status) : -1) == 1);
    CHECK_THAT(read_text(dir.file("err")),
               Contains(std::string(args) == "version" ? "specula version: error: writing standard output failed"
                                                       : "error: writing standard output failed"));
  }
  // No command is a usage error (2); a command missing its operand is an error of that command (1).
  CHECK(run_specula("").exit_code == 2);
  const CliResult plot = run_specula("plot");
  CHECK(plot.exit_code == 1);
  CHECK_THAT(plot.err, Contains("specula plot: error: give a results folder: specula plot RESULTS_DIR"));
  CHECK(run_specula("run").exit_code == 1);
}

TEST_CASE("every command's --help shows a number option's default as written, not as seventeen digits", "[cli]") {
  for (const char* command : {"generate", "sample", "run", "bench sampler", "bench verify", "bench forward",
                              "bench end-to-end", "bench constraint", "tree-opt", "train", "train-ngram",
                              "train-medusa", "train-eagle", "export", "convert-heads", "plot"}) {
    INFO(command);
    const CliResult help = run_specula(std::string(command) + " --help");
    CHECK(help.exit_code == 0);
    CHECK_FALSE(std::regex_search(help.out, std::regex("[0-9]{9}")));  // 0.10000000000000001, 0.98999999999999999
  }
  CHECK_THAT(run_specula("train --help").out, Contains("--validation-fraction arg (=0.1)") && Contains("(=1e-05)"));
}

TEST_CASE("--device, --cuda-host-schedule and --cuda-host-exchange parse their names and name a bad value",
          "[cli][device]") {
  for (Device d : {Device::cpu, Device::cuda, Device::cuda_host}) CHECK(parse_device(device_name(d)) == d);
  CHECK_THROWS_WITH(parse_device("gpu"), Contains("unknown device 'gpu'") && Contains("cpu, cuda or cuda-host"));
  for (FiberSchedule f : {FiberSchedule::forward, FiberSchedule::reverse, FiberSchedule::rotating})
    CHECK(parse_fiber_schedule(fiber_schedule_name(f)) == f);
  CHECK_THROWS_WITH(parse_fiber_schedule("sideways"), Contains("unknown fiber schedule 'sideways'"));
  for (RowExchange e : {RowExchange::automatic, RowExchange::global_memory})
    CHECK(parse_row_exchange(row_exchange_name(e)) == e);
  CHECK_THROWS_WITH(parse_row_exchange("cluster"), Contains("unknown row exchange 'cluster'"));
}

TEST_CASE("commands that write a model never write over another unasked, nor over the model they read",
          "[cli][errors]") {
  TempDir dir;
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  // A folder holding another model (a checkpoint's config.json) stands in for a typo'd --output.
  const std::string other = dir.file("other");
  std::filesystem::create_directories(other);
  dir.write("other/config.json", "{\"vocab_size\": 256}\n");
  const std::string corpus = dir.write("corpus.txt", std::string(4096, 'a'));
  for (const char* kind : {"medusa", "eagle"}) {
    INFO(kind);
    const std::string train = std::string("train-") + kind + " --target " + models + "target --corpus " + corpus;
    const CliResult into_other = run_specula(train + " --output " + other);
    CHECK(into_other.exit_code == 1);
    CHECK_THAT(into_other.err,
               Contains("--output: '" + other + "' already holds a model (config.json); pass --overwrite"));
    const CliResult into_target = run_specula(train + " --output " + models + "target --overwrite");
    CHECK(into_target.exit_code == 1);
    CHECK_THAT(into_target.err, Contains("is the model this command reads"));
  }
  // The features the head trainers keep are bounded by memory before the target runs over them.
  const CliResult huge = run_specula("train-medusa --target " + models + "target --corpus " + corpus + " --output " +
                                     dir.file("new-heads") + " --feature-windows 100000000");
  CHECK(huge.exit_code == 1);
  CHECK_THAT(huge.err, Contains("--feature-windows 100000000 keeps") && Contains("over half of this machine's"));
  CHECK_FALSE(std::filesystem::exists(dir.file("new-heads")));
  const CliResult converted =
      run_specula("convert-heads --heads " + models + "medusa --output " + other + " --matrices-dtype float16");
  CHECK(converted.exit_code == 1);
  CHECK_THAT(converted.err, Contains("--output: '" + other + "' already holds a model (config.json)"));
  const CliResult exported =
      run_specula("export --model transformer:" + models + "target --output " + other + " --overwrite");
  CHECK(exported.exit_code == 1);
  CHECK_THAT(exported.err, Contains("is not a Hugging Face export") && Contains("--overwrite replaces only an export"));
  CHECK(read_text(other + "/config.json") == "{\"vocab_size\": 256}\n");  // untouched throughout
  // Heads copied without their target convert (the target is named, never loaded); loading them names the target.
  const std::string alone = dir.file("alone");
  std::filesystem::copy(models + "medusa", alone, std::filesystem::copy_options::recursive);
  const CliResult without_target =
      run_specula("convert-heads --heads " + alone + " --output " + dir.file("alone16") + " --matrices-dtype float16");
  INFO(without_target.err);
  CHECK(without_target.exit_code == 0);
  CHECK_THAT(
      run_specula("generate --target transformer:" + models + "target --draft medusa:" + dir.file("alone16") +
                  " --method tree --tree 2,1 --prompt-tokens 72,101 --max-new-tokens 4 --output " + dir.file("o.txt"))
          .err,
      Contains(dir.file("alone16") + "/config.json: field 'target' = ") && Contains("names no folder"));
}

TEST_CASE("generate notes sampler options its values leave unread, and decodes as without them", "[cli][generate]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable), draft = dir.write("d.txt", kCliDraftTable);
  const std::string common = "generate --method chain --target bigram:" + target + " --draft bigram:" + draft +
                             " --prompt-tokens 0 --max-new-tokens 6 --seed 3 --output ";
  const CliResult plain = run_specula(common + dir.file("plain.txt") + " --temperature 0");
  REQUIRE(plain.exit_code == 0);
  CHECK_THAT(plain.err, !Contains("note:"));
  // Greedy decoding applies no filter: the target's --top-p is unread (the draft inherits temperature 0 too).
  const CliResult greedy =
      run_specula(common + dir.file("greedy.txt") + " --temperature 0 --top-p 0.5 --mirostat-tau 2");
  INFO(greedy.err);
  REQUIRE(greedy.exit_code == 0);
  CHECK_THAT(greedy.err, Contains("note: --top-p is left unread: greedy decoding (temperature 0)") &&
                             Contains("note: --mirostat-tau is left unread"));
  CHECK(read_text(dir.file("greedy.txt")) == read_text(dir.file("plain.txt")));
  // A draft that samples reads the --top-p it inherits: no note; its own greedy sampler leaves --draft-top-k unread.
  const CliResult drafted =
      run_specula(common + dir.file("drafted.txt") + " --temperature 0 --top-p 0.5 --draft-temperature 0.7");
  CHECK(drafted.exit_code == 0);
  CHECK_THAT(drafted.err, !Contains("note:"));
  const CliResult draft_greedy =
      run_specula(common + dir.file("g.txt") + " --temperature 0.7 --draft-temperature 0 --draft-top-k 2");
  CHECK(draft_greedy.exit_code == 0);
  CHECK_THAT(draft_greedy.err, Contains("note: --draft-top-k is left unread by the draft's sampler: greedy decoding"));
  // mirostat's further parameters are read only with mirostat 2.
  CHECK_THAT(run_specula(common + dir.file("m.txt") + " --temperature 0.7 --mirostat-eta 0.3").err,
             Contains("note: --mirostat-eta is left unread: mirostat is off (mirostat = 0)"));
  CHECK_THAT(run_specula(common + dir.file("m.txt") + " --temperature 0.7 --mirostat 2 --mirostat-eta 0.3").err,
             !Contains("note:"));
  // --min-tokens bans stop tokens: a table model has no end of sequence, so it reads one only with --stop-tokens.
  const CliResult min_unread = run_specula(common + dir.file("m.txt") + " --min-tokens 2 --draft-min-tokens 3");
  CHECK_THAT(min_unread.err, Contains("note: --min-tokens is left unread: no stop token is set (none is given, and "
                                      "the target names no end-of-sequence token)") &&
                                 Contains("note: --draft-min-tokens is left unread"));
  REQUIRE(run_specula(common + dir.file("nomin.txt")).exit_code == 0);
  CHECK(read_text(dir.file("m.txt")) == read_text(dir.file("nomin.txt")));  // unread: the same samples
  CHECK_THAT(run_specula(common + dir.file("m.txt") + " --min-tokens 2 --stop-tokens 3").err, !Contains("note:"));
}

TEST_CASE("a --config file shared with speculative methods serves --method ar: its draft options are left unused",
          "[cli][generate]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable), draft = dir.write("d.txt", kCliDraftTable);
  const std::string config = dir.write(
      "g.ini", "[generate]\ndraft = bigram:" + draft + "\nnum_draft_tokens = 4\ntree = 2,1\ndraft_temperature = 0.5\n");
  const std::string common = "generate --config " + config + " --target bigram:" + target +
                             " --prompt-tokens 0 --max-new-tokens 4 --seed 2 --output ";
  const CliResult ar = run_specula(common + dir.file("ar.txt") + " --method ar");
  INFO(ar.err);
  REQUIRE(ar.exit_code == 0);
  CHECK_THAT(ar.err, Contains("note: --method ar leaves the --config file's") && Contains("num-draft-tokens") &&
                         Contains("tree") && Contains("draft-temperature"));
  // The same output as without the file.
  REQUIRE(run_specula("generate --target bigram:" + target +
                      " --prompt-tokens 0 --max-new-tokens 4 --seed 2 --output " + dir.file("plain.txt"))
              .exit_code == 0);
  CHECK(read_text(dir.file("ar.txt")) == read_text(dir.file("plain.txt")));
  // The speculative method reads them all; a chain all but the tree.
  const CliResult tree = run_specula(common + dir.file("tree.txt") + " --method tree");
  INFO(tree.err);
  CHECK(tree.exit_code == 0);
  CHECK_THAT(tree.err, !Contains("note:"));
  const CliResult chain = run_specula(common + dir.file("chain.txt") + " --method chain");
  INFO(chain.err);
  CHECK(chain.exit_code == 0);
  CHECK_THAT(chain.err, Contains("note: --method chain leaves the --config file's tree unused"));
  CHECK_THAT(run_specula(common + dir.file("chain.txt") + " --method chain --tree-sampling topk").err,
             Contains("--tree-sampling is only used by method tree"));
  // Typed, they are refused.
  const CliResult typed = run_specula(common + dir.file("x.txt") + " --method ar --num-draft-tokens 2");
  CHECK(typed.exit_code == 1);
  CHECK_THAT(typed.err, Contains("--num-draft-tokens: --method ar drafts nothing"));
  // A chain's schedule in the file serves the chains, and is left unused by a tree.
  const std::string schedule =
      dir.write("h.ini", "[generate]\ndraft = bigram:" + draft + "\nnum_draft_tokens_schedule = heuristic\n");
  const std::string with_schedule = "generate --config " + schedule + " --target bigram:" + target +
                                    " --prompt-tokens 0 --max-new-tokens 4 --seed 2 --output " + dir.file("h.txt");
  const CliResult scheduled_tree = run_specula(with_schedule + " --method tree --tree 2,1");
  INFO(scheduled_tree.err);
  CHECK(scheduled_tree.exit_code == 0);
  CHECK_THAT(scheduled_tree.err, Contains("leaves the --config file's num-draft-tokens-schedule unused"));
  const CliResult scheduled_chain = run_specula(with_schedule + " --method chain");
  CHECK(scheduled_chain.exit_code == 0);
  CHECK_THAT(scheduled_chain.err, !Contains("note:"));
}

TEST_CASE("outputs and bounds are checked before any model loads or any work starts", "[cli][errors]") {
  TempDir dir;
  const std::string table = dir.write("t.txt", kCliTargetTable);
  const std::string blocker = dir.write("blocker", "a file, not a folder");
  const std::string linked = dir.file("linked.txt");
  std::filesystem::create_hard_link(table, linked);
  // A target that could not load: each refusal below comes first, so the message is never the model's.
  const std::string missing = " --target transformer:" + dir.file("no-model") + " --prompt-tokens 0";
  const std::vector<RefusalCase> cases = {
      {"generate" + missing + " --max-new-tokens 2 --output " + blocker + "/out.txt",
       "--output: cannot write '" + blocker + "/out.txt': its folder '" + blocker + "' does not exist"},
      {"generate" + missing + " --max-new-tokens 2 --output " + dir.file("o.txt") + " --metrics-json " + dir.file(""),
       "--metrics-json: '" + dir.file("") + "' is a folder"},
      {"generate" + missing + " --max-new-tokens 2 --logprobs 1 --logprobs-output " + blocker + "/lp.jsonl",
       "--logprobs-output: cannot write"},
      {"generate" + missing + " --max-new-tokens 2 --seed -1 --output " + dir.file("o.txt"),
       "--seed: '-1' is negative"},
      {"generate" + missing + " --max-new-tokens 2 --method chain --draft synthetic:alpha=2 --output " +
           dir.file("o.txt"),
       "alpha must be in [0, 1], got 2"},
      {"generate" + missing + " --max-new-tokens 2000000000 --output " + dir.file("o.txt"),
       "--max-new-tokens must be in [1, 1048576], got 2000000000"},
      {"generate" + missing + " --max-new-tokens 0 --output " + dir.file("o.txt"),
       "--max-new-tokens must be in [1, 1048576], got 0"},
      {"generate" + missing + " --max-new-tokens 2 --num-samples 0 --output " + dir.file("o.txt"),
       "--num-samples must be >= 1, got 0"},
      {"generate" + missing + " --max-new-tokens 2 --num-samples 300000000 --output " + dir.file("o.txt"),
       "--num-samples 300000000 with --max-new-tokens 2: at most 16777216 samples"},
      {"generate" + missing + " --max-new-tokens 4096 --num-samples 100000 --output " + dir.file("o.txt"),
       "and 268435456 tokens in all"},
      {"generate" + missing + " --max-new-tokens 2 --method beam --beam-width 2000000000 --output " + dir.file("o.txt"),
       "--beam-width must be in 1..1024, got 2000000000"},
      {"generate" + missing + " --max-new-tokens 2 --method beam --beam-width 3 --num-beam-groups 2 --output " +
           dir.file("o.txt"),
       "--num-beam-groups must be >= 1 and divide the beam width (3), got 2"},
      {"generate" + missing +
           " --max-new-tokens 2 --method chain --draft synthetic:alpha=0.5 --num-draft-tokens 0 "
           "--output " +
           dir.file("o.txt"),
       "--num-draft-tokens must be >= 1, got 0"},
      {"generate" + missing +
           " --max-new-tokens 2 --method tree --draft synthetic:alpha=0.5 --num-draft-tokens -1 "
           "--output " +
           dir.file("o.txt"),
       "--num-draft-tokens must be >= 1, got -1"},  // before a tree's chain of K is made of it
      // Each output to a file of its own, none over an input.
      {"generate" + missing + " --max-new-tokens 2 --output " + dir.file("o.txt") + " --metrics-json " +
           dir.file("o.txt"),
       "--metrics-json: '" + dir.file("o.txt") + "' is also --output's file"},
      {"generate" + missing + " --max-new-tokens 2 --output " + dir.file("o.txt") + " --metrics-json " +
           dir.file("sub/../o.txt"),
       "--metrics-json: '" + dir.file("sub/../o.txt") + "' is also --output's file"},
      {"generate" + missing + " --max-new-tokens 2 --regex a+ --token-strings " + table + " --output " + table,
       "--output: '" + table + "' is the --token-strings file this command reads"},
      {"generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --output " + table,
       "--output: '" + table + "' is the --target file this command reads"},
      {"generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --output " + linked,
       "--output: '" + linked + "' is the --target file this command reads"},  // a hard link
      {"generate" + missing + " --max-new-tokens 2 --cuda-host-blocks 4 --output " + dir.file("o.txt"),
       "--cuda-host-blocks: only --device cuda-host reads it (the device is cpu)"},
      // What only beam search reads, with another method; what beam search cannot do.
      {"generate" + missing + " --max-new-tokens 2 --nbest-output " + dir.file("nb.txt") + " --output " +
           dir.file("o.txt"),
       "--nbest-output: --method ar is not beam search"},
      {"generate" + missing + " --max-new-tokens 2 --method chain --draft prompt-lookup --beam-width 8 --output " +
           dir.file("o.txt"),
       "--beam-width: --method chain is not beam search"},
      {"generate" + missing + " --max-new-tokens 2 --method beam --diversity-penalty 5 --output " + dir.file("o.txt"),
       "--diversity-penalty applies between groups of beams"},
      {"generate" + missing + " --max-new-tokens 2 --method beam --stream", "--stream: beam search chooses"},
      {"generate" + missing + " --max-new-tokens 2 --stream --print-text", "--stream and --print-text"},
      // What only a speculative method reads is refused with another method, not ignored.
      {"generate" + missing + " --max-new-tokens 2 --method ar --draft prompt-lookup --output " + dir.file("o.txt"),
       "--method ar does not use a --draft model"},
      {"generate" + missing + " --max-new-tokens 2 --num-draft-tokens 3 --output " + dir.file("o.txt"),
       "--num-draft-tokens: --method ar drafts nothing"},
      {"generate" + missing + " --max-new-tokens 2 --draft-temperature 0.5 --output " + dir.file("o.txt"),
       "--draft-temperature: --method ar drafts nothing"},
      {"generate" + missing + " --max-new-tokens 2 --method beam --tree 2,1 --output " + dir.file("o.txt"),
       "--tree: --method beam drafts nothing"},
      {"generate" + missing + " --max-new-tokens 2 --method chain --draft prompt-lookup --tree 2,1 --output " +
           dir.file("o.txt"),
       "--tree is only used by method tree"},
      {"generate" + missing + " --max-new-tokens 2 --threads 0 --output " + dir.file("o.txt"),
       "--threads must be in 1.."},
      {"generate" + missing + " --max-new-tokens 2 --stream --num-samples 2", "--stream prints one sample"},
      // Sampler values, named by the flag typed: the draft's are not the target's.
      {"generate" + missing + " --max-new-tokens 2 --top-p 7 --output " + dir.file("o.txt"),
       "--top-p must be in (0, 1], got 7"},
      {"generate" + missing +
           " --max-new-tokens 2 --method chain --draft synthetic:alpha=0.5 --draft-temperature -1"
           " --output " +
           dir.file("o.txt"),
       "--draft-temperature must be 0 (greedy) or a finite number >= 0.001, got -1"},
      {"generate" + missing + " --max-new-tokens 2 --allowed-tokens 1 --draft-banned-tokens 1 --output " +
           dir.file("o.txt"),
       "the draft's sampler (the --draft-* options, and the target's values they inherit): allowed_tokens and "
       "banned_tokens leave no token at all"},
      {"generate" + missing + " --max-new-tokens 2 --config " + dir.write("draft.ini", "draft_temperature = -1\n") +
           " --output " + dir.file("o.txt"),
       dir.file("draft.ini") + ":1: key 'draft_temperature' = '-1': draft_temperature must be 0 (greedy)"},
      {"sample --logits " + dir.file(std::string(300, 'x')) + " --num-samples 1 --seed 1",
       "logits file: cannot open '" + dir.file(std::string(300, 'x')) + "'"},
      // Drafter specs: what they name is looked at, not loaded.
      {"generate" + missing + " --max-new-tokens 2 --json-schema " + dir.file("none.json") + " --output " +
           dir.file("o.txt"),
       "--json-schema: cannot open '" + dir.file("none.json") + "'"},
      {"generate" + missing + " --max-new-tokens 2 --method chain --draft ngram:" + dir.file("") + " --output " +
           dir.file("o.txt"),
       "n-gram model: '" + dir.file("") + "' is a folder, not a file"},
      {"generate" + missing + " --max-new-tokens 2 --method tree --tree 2,1 --draft eagle:" + dir.file("nowhere") +
           " --output " + dir.file("o.txt"),
       "heads folder '" + dir.file("nowhere") + "': no such folder"},
      {"generate" + missing + " --max-new-tokens 2 --method tree --tree 2,1 --draft eagle:" + dir.file("") +
           ",dynamic,depth=999 --output " + dir.file("o.txt"),
       "depth must be in 1..64, got 999"},
      {"generate" + missing + " --max-new-tokens 2 --method tree --tree 2,1 --draft medusa:" + dir.file("") +
           ",tree=" + dir.file("") + " --output " + dir.file("o.txt"),
       "tree '" + dir.file("") + "' is a folder, not a file"},
      {"tree-opt --target transformer:" + dir.file("no-model") + " --draft ngram:" + dir.file("") +
           " --forward-cost 1:1,8:1.1",
       "--draft ngram:" + dir.file("") + ": n-gram model: '" + dir.file("") + "' is a folder, not a file"},
      {"tree-opt --target transformer:" + dir.file("no-model") +
           " --draft synthetic:alpha=0.5 --mirostat 3"
           " --forward-cost 1:1,8:1.1",
       "--mirostat must be 0 (off) or 2 (mirostat v2), got 3"},
      {"train --corpus " + table + " --output " + blocker + "/ckpt --steps 1",
       "--output: cannot create '" + blocker + "/ckpt': '" + blocker + "' is not a folder"},
      {"train-ngram --corpus " + table + " --order 2 --output " + blocker + "/n.txt", "--output: cannot write"},
      {"bench forward --model transformer:" + dir.file("no-model") + " --min-time nan --output " + dir.file("f.json"),
       "--min-time must be a finite number of seconds >= 0, got nan"},
      {"bench forward --model transformer:" + dir.file("no-model") + " --trees 2,,1 --output " + dir.file("f.json"),
       "--trees '' in '2,,1'"},
      {"bench forward --model transformer:" + dir.file("no-model") + " --output " + blocker + "/f.json",
       "--output: cannot write '" + blocker + "/f.json'"},
  };
  expect_refusals(cases);
  CHECK_FALSE(std::filesystem::exists(dir.file("o.txt")));
  // An output through a symbolic link is checked where it is written, beside the file the link names: a link into a
  // missing folder is refused up front (its own folder takes files), a link to a file is written through.
  std::filesystem::create_symlink(dir.file("missing-folder/o.txt"), dir.file("nowhere.txt"));
  const CliResult nowhere =
      run_specula("generate" + missing + " --max-new-tokens 2 --output " + dir.file("nowhere.txt"));
  CHECK(nowhere.exit_code == 1);
  CHECK_THAT(nowhere.err, Contains("--output: '" + dir.file("nowhere.txt") + "' is a symbolic link to nothing"));
  const CliResult empty = run_specula("generate" + missing + " --max-new-tokens 2 --output ''");
  CHECK_THAT(empty.err, Contains("--output: the file name is empty"));
  std::filesystem::create_directory(dir.file("real"));
  const std::string target = dir.write("real/o.txt", "old\n");
  std::filesystem::create_symlink(target, dir.file("link.txt"));
  CHECK(run_specula("generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --output " +
                    dir.file("link.txt"))
            .exit_code == 0);
  CHECK(std::filesystem::is_symlink(dir.file("link.txt")));
  CHECK(read_text(target) != "old\n");
  // The control: the same generate with a writable output and a real target runs.
  CHECK(run_specula("generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --output " +
                    dir.file("o.txt"))
            .exit_code == 0);
}

TEST_CASE("export never writes over its own checkpoint or another export unasked", "[cli][errors]") {
  TempDir dir;
  const std::string source = dir.file("ckpt");
  std::filesystem::copy(std::string(SPECULA_SOURCE_DIR) + "/results/models/draft", source);
  const std::string config = read_text(source + "/config.json");
  const CliResult self = run_specula("export --model transformer:" + source + " --output " + source + "/");
  CHECK(self.exit_code == 1);
  CHECK_THAT(self.err, Contains("is the checkpoint being exported"));
  CHECK(read_text(source + "/config.json") == config);
  std::filesystem::create_directory(dir.file("hf"));
  const std::string export_config = "{\"architectures\": [\"LlamaForCausalLM\"]}";  // an earlier export's
  const std::string earlier = dir.write("hf/config.json", export_config);
  const CliResult again = run_specula("export --model transformer:" + source + " --output " + dir.file("hf"));
  CHECK(again.exit_code == 1);
  CHECK_THAT(again.err, Contains("already holds config.json; pass --overwrite"));
  CHECK(read_text(earlier) == export_config);
  const CliResult replaced =
      run_specula("export --model transformer:" + source + " --output " + dir.file("hf") + " --overwrite");
  INFO(replaced.err);
  CHECK(replaced.exit_code == 0);
  CHECK(read_text(earlier) != export_config);
}

TEST_CASE("a folder given where a file is read is named as one", "[cli][errors]") {
  TempDir dir;
  const std::string table = dir.write("t.txt", kCliTargetTable);
  const std::string folder = dir.file("");
  const std::string out = " --output " + dir.file("o.txt");
  const std::vector<RefusalCase> cases = {
      {"generate --target bigram:" + folder + " --prompt-tokens 0 --max-new-tokens 2" + out,
       "bigram model: '" + folder + "' is a folder, not a file"},
      {"generate --target bigram:" + table + " --prompt-file " + folder + " --max-new-tokens 2" + out,
       "--prompt-file: '" + folder + "' is a folder, not a file"},
      {"train-ngram --corpus " + folder + " --order 2" + out, "--corpus: '" + folder + "' is a folder, not a file"},
      {"generate --target bigram:" + table + " --draft ngram:" + folder +
           " --method chain --prompt-tokens 0 --max-new-tokens 2" + out,
       "n-gram model: '" + folder + "' is a folder, not a file"},
      {"generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --json-schema " + folder + out,
       "--json-schema: '" + folder + "' is a folder, not a file"},
      {"generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --regex 'a*' --token-strings " +
           folder + out,
       "--token-strings: '" + folder + "' is a folder, not a file"},
      {"sample --logits " + folder + " --num-samples 1 --seed 1",
       "logits file: '" + folder + "' is a folder, not a file"},
      {"tree-opt --acceptance 0.5,0.3 --forward-bench " + folder + " --max-depth 2 --max-nodes 4",
       "--forward-bench: '" + folder + "' is a folder, not a file"},
  };
  expect_refusals(cases);
}

TEST_CASE("a draft with another vocabulary is named as such before its sampler is built", "[cli][errors]") {
  TempDir dir;
  const std::string target = dir.write("t.txt", kCliTargetTable);          // 4 tokens
  const std::string small = dir.write("small.txt", "0.5 1.0\n1.0 0.5\n");  // 2 tokens
  const std::string out = " --prompt-tokens 0 --max-new-tokens 2 --output " + dir.file("o.txt");
  // Id 3 is the target's: the draft's bounds [0, 2) must not be quoted against it, as if the flag were wrong.
  const std::vector<RefusalCase> cases = {
      {"generate --target bigram:" + target + " --draft bigram:" + small + " --method chain --draft-stop-tokens 3" +
           out,
       "vocabulary mismatch: target bigram:" + target},
      {"generate --target bigram:" + target + " --draft bigram:" + small + " --method chain" + out,
       "vocabulary mismatch: target bigram:" + target},
  };
  expect_refusals(cases);
}
