// Files a user hands the tool, made to break it: JSON nested past any real file (whose copies and messages would
// recurse off the stack), records whose arrays disagree in length (which a merge indexed one by another), and the
// command-line paths that read each. Each must end in an error naming the file, never in a crash.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "harness/config/ini_file.h"
#include "harness/experiment/run_record.h"
#include "harness/generation/generation_metrics.h"
#include "harness/io/input_file.h"
#include "harness/models/table_model.h"
#include "harness/runner/results_folder.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"
#include "verify/constraints/json_schema.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;

namespace {

std::string nested_array(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

}  // namespace

TEST_CASE("JSON nested past kMaxJsonDepth is refused as JSON; at the bound it reads", "[cli][errors]") {
  CHECK(parse_bounded_json(nested_array(kMaxJsonDepth)).is_array());
  CHECK(parse_bounded_json(std::string(kMaxJsonDepth, '[') + "1" + std::string(kMaxJsonDepth, ']')).is_array());
  CHECK_THROWS_AS(parse_bounded_json(nested_array(kMaxJsonDepth + 1)), nlohmann::json::exception);
  CHECK_THROWS_AS(parse_bounded_json("{\"a\": " + nested_array(kMaxJsonDepth) + "}"), JsonTooDeep);
  CHECK_THROWS_WITH(parse_bounded_json(nested_array(100000)), Contains("nested deeper than 256 levels"));
  CHECK_THROWS_WITH(parse_bounded_json<nlohmann::ordered_json>("{\"a\": " + nested_array(300) + "}"),
                    Contains("nested deeper"));
  // A key twice in one object is refused (the last one won without a word); the same key in two objects is not.
  CHECK_THROWS_WITH(parse_bounded_json(R"({"model": {"d_model": 128, "d_ff": 4, "d_model": 4096}})"),
                    Contains("key 'd_model' is given twice in one object"));
  CHECK(parse_bounded_json(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}, {"k": 4}], "k": 5})").size() == 4);
  // A schema: named by its source, also for a number past a double's range.
  CHECK_THROWS_WITH(compile_json_schema("{\"type\": \"string\", \"maxLength\": 1e400}", "s.json"),
                    Contains("json schema 's.json': ") && Contains("number overflow"));
  CHECK_THROWS_WITH(compile_json_schema("{\"enum\": [" + nested_array(100000) + "]}", "s.json"),
                    Contains("json schema 's.json': nested deeper than 256 levels"));
}

TEST_CASE("deeply nested JSON in a model's, a record's or a schema's file is an error naming the file",
          "[cli][errors]") {
  TempDir dir;
  const std::string deep = nested_array(100000);
  const std::string table = std::string(SPECULA_SOURCE_DIR) + "/experiments/tables/target-v16.txt";
  const std::string schema = dir.write("schema.json", "{\"enum\": [" + deep + "]}");
  const CliResult by_schema = run_specula(
      "generate --target bigram:" + table + " --prompt-tokens 0 --max-new-tokens 2 --json-schema " + schema +
      " --token-strings " + dir.write("ts.txt", std::string(16 * 2, 'a')) + " --output " + dir.file("o.txt"));
  CHECK(by_schema.exit_code == 1);
  CHECK_THAT(by_schema.err, Contains(schema) && Contains("nested deeper than 256 levels"));
  // A transformer checkpoint's config.json (read before any weights).
  std::filesystem::create_directories(dir.file("ckpt"));
  dir.write("ckpt/config.json", "{\"eos_token_id\": " + deep + "}");
  const CliResult by_config = run_specula("generate --target transformer:" + dir.file("ckpt") +
                                          " --prompt-tokens 0 --max-new-tokens 2 --output " + dir.file("o.txt"));
  CHECK(by_config.exit_code == 1);
  CHECK_THAT(by_config.err, Contains(dir.file("ckpt/config.json")) && Contains("nested deeper than 256 levels"));
  // A cost profile for tree-opt.
  const std::string profile = dir.write("profile.json", "{\"version\": " + deep + "}");
  const CliResult by_profile =
      run_specula("tree-opt --cost-profile " + profile + " --acceptance 0.5 --output " + dir.file("t.txt"));
  CHECK(by_profile.exit_code == 1);
  CHECK_THAT(by_profile.err, Contains("nested deeper than 256 levels"));
  // A record.
  CHECK_THROWS_WITH(RunRecord::from_json_line("{\"setting_id\": " + deep + "}", "records.jsonl:3"),
                    Contains("records.jsonl:3: malformed record") && Contains("nested deeper"));
}

TEST_CASE("a record whose per-position arrays disagree is refused by line; merging any arrays stays in bounds",
          "[runner][errors]") {
  RunRecord r;
  r.setting_id = r.baseline_id = "s";
  r.metrics.resize(2);
  r.metrics.steps = 3;
  r.metrics.proposed = 6;
  r.metrics.accepted = 4;
  r.metrics.position_reached = {3, 2};
  r.metrics.position_accepted = {2, 2};
  r.metrics.accepted_histogram = {1, 0, 2};
  const nlohmann::json good = nlohmann::json::parse(r.to_json_line());
  CHECK_NOTHROW(RunRecord::from_json_line(good.dump(), "r:1"));
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* message;
  };
  const Case cases[] = {
      {"accepted_length_histogram", std::vector<int>(1000, 1),
       "accepted_length_histogram has 1000 entries for 2 draft positions (at most 3)"},
      {"position_accepted", std::vector<int>{}, "position_accepted has 0 positions, position_reached 2"},
      {"position_reached", std::vector<int>(100000, 1), "position_reached has 100000 positions"},
      {"position_accepted", std::vector<int>{2, 3}, "draft position 2 accepted 3 of 2 reached"},
      {"position_reached", std::vector<int>{3, -1}, "draft position 2 accepted 2 of -1 reached"},
      {"new_tokens", -3, "a count is negative (-3)"},
      {"accepted_tokens", 7, "accepted_tokens 7 exceed proposed_tokens 6"},
      {"verify_rows_histogram", std::vector<int>{1, -2}, "a histogram holds a negative count (-2)"},
  };
  {  // A token id past int32 is refused whole, not wrapped into the vocabulary (2^32 + 5 read as 5).
    nlohmann::json bad = good;
    bad["tokens"] = {3, int64_t{4294967301}};
    CHECK_THROWS_WITH(RunRecord::from_json_line(bad.dump(), "records.jsonl:7"),
                      Contains("records.jsonl:7: token 4294967301 is not a token id"));
  }
  for (const Case& c : cases) {
    INFO(c.key);
    nlohmann::json bad = good;
    bad[c.key] = c.value;
    CHECK_THROWS_WITH(RunRecord::from_json_line(bad.dump(), "records.jsonl:7"),
                      Contains(std::string("records.jsonl:7: impossible record: ") + c.message));
  }
  // Merged as they come, arrays of any lengths are summed in bounds (sanitizers check the writes).
  GenerationMetrics total, odd;
  odd.position_reached = {5};
  odd.position_accepted = {1, 2, 3};
  odd.accepted_histogram = std::vector<int64_t>(50, 1);
  total.merge(odd);
  total.merge(r.metrics);
  CHECK(total.position_reached == std::vector<int64_t>{8, 2, 0});
  CHECK(total.position_accepted == std::vector<int64_t>{3, 4, 3});
  CHECK(total.accepted_histogram.size() == 50);
  CHECK(total.accepted_histogram[2] == 3);
}

TEST_CASE("a transformer config whose sizes would wrap the memory check is refused by field before any allocation",
          "[cli][errors]") {
  TempDir dir;
  nlohmann::json config =
      nlohmann::json::parse(read_text(std::string(SPECULA_SOURCE_DIR) + "/results/models/draft/config.json"));
  std::filesystem::create_directories(dir.file("big"));
  // d_model 2^30 with d_ff 1431655679: the parameter count wrapped int64 into a small number, the memory check
  // passed, and LibTorch was asked for 1 TiB.
  config["model"]["d_model"] = 1073741824;
  config["model"]["d_ff"] = 1431655679;
  config["model"]["max_seq_len"] = 1;
  config["weights"].erase("crc32");
  dir.write("big/config.json", config.dump());
  const CliResult r = run_specula("generate --target transformer:" + dir.file("big") +
                                  " --prompt-tokens 0 --max-new-tokens 2 --output " + dir.file("o.txt"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains(dir.file("big")) && Contains("d_model must be <= 1048576, got 1073741824"));
  config["model"]["d_model"] = 128;
  dir.write("big/config.json", config.dump());
  CHECK_THAT(run_specula("generate --target transformer:" + dir.file("big") + " --prompt-tokens 0 --max-new-tokens 2" +
                         " --output " + dir.file("o.txt"))
                 .err,
             Contains("d_ff must be <= 4194304, got 1431655679"));
}

TEST_CASE("a bigram table's logits are read whole and in float32's range, every row leaving a token", "[errors]") {
  TempDir dir;
  const auto load = [&](const std::string& text) { return load_bigram_model(dir.write("b.txt", text)); };
  CHECK_NOTHROW(
      load("0 1 2\n-inf -1e39 0\n1 1 1\n"));  // -inf (or below float32's range): a token never drawn after that one
  const std::string file = dir.file("b.txt");
  CHECK_THROWS_WITH(load("0 1\n1e39 0\n"),
                    Contains(file + ":2: column 1: '1e39' is +inf or too large for a 32-bit float"));
  CHECK_THROWS_WITH(load("0 1\ninf 0\n"), Contains(file + ":2: column 1: 'inf' is +inf"));
  CHECK_THROWS_WITH(load("0 1\n-inf -inf\n"), Contains(file + ":2: every logit of the row is -inf"));
  CHECK_THROWS_WITH(load(std::string("0 1.0\0garbage\n1 2\n", 20)), Contains(file + ":1: column 2: '1.0"));
  CHECK_THROWS_WITH(load("0 nan\n1 2\n"), Contains(file + ":1: column 2: NaN logit"));
  CHECK_THROWS_WITH(load("0 1\n1 2 3\n"), Contains("row has 3 logits but the first row has 2"));
  CHECK_THROWS_WITH(load("0,,1\n1 2\n"), Contains(file + ":1: an empty item beside the comma at character 2"));
  CHECK_THROWS_WITH(load("0 1,\n1 2\n"), Contains(file + ":1: an empty item beside the comma at character 4"));
  CHECK_NOTHROW(load("0, 1\n1 ,2\n"));
}

TEST_CASE("a NUL byte in a text file is refused by line, where a number read up to it dropped the rest", "[errors]") {
  TempDir dir;
  const std::string ini = dir.write("e.ini", std::string("[experiment]\nmax_new_tokens = 8\0garbage\n", 40));
  CHECK_THROWS_WITH(read_ini_file(ini), Contains("config file: '" + ini + "' line 2 holds a NUL byte"));
  const std::string logits = dir.write("l.txt", std::string("1 2\0003 4\n", 8));
  const CliResult r = run_specula("sample --logits " + logits + " --num-samples 2 --seed 1");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("logits file: '" + logits + "' line 1 holds a NUL byte: binary data, not text"));
  CHECK(read_text_file(dir.write("ok.txt", "a\nb\n"), "x") == "a\nb\n");
}

TEST_CASE("a forward report's row count is checked whole before it is used", "[tree-opt][errors]") {
  TempDir dir;
  const std::string report =
      dir.write("f.json", R"({"models": [{"cases": [{"rows": 1099511627776, "ratio_vs_1_token": 1.0}]}]})");
  const CliResult r = run_specula("tree-opt --acceptance 0.5 --forward-bench " + report);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("--forward-bench " + report +
                             ": a case's rows must be a whole number in [1, 2^20], got 1099511627776"));
}

TEST_CASE("a file read whole must fit in memory: a larger one is refused by its size, unread", "[errors]") {
  TempDir dir;
  const std::string huge = dir.file("sparse");
  std::ofstream(huge).put('x');
  std::filesystem::resize_file(huge, uint64_t{1} << 42);  // 4 TiB, sparse: nothing is written
  CHECK_THROWS_WITH(
      read_input_file(huge, "config file"),
      Contains("config file: '" + huge + "' is 4398046511104 bytes, more than half the memory available"));
}

TEST_CASE("a resume drops a cut last record from the file's end, whatever its length", "[runner]") {
  TempDir dir;
  const std::filesystem::path folder = dir.file("");
  const auto cut = [&](const std::string& text) {
    dir.write("records.jsonl", text);
    drop_partial_record(folder);
    return read_text(dir.file("records.jsonl"));
  };
  CHECK(cut("") == "");
  CHECK(cut("{\"no newline at all\"") == "");
  CHECK(cut("\n{\"cut") == "\n");
  CHECK(cut("a\nb\n") == "a\nb\n");     // whole: left as it is
  const std::string line(200000, 'x');  // lines longer than the blocks read from the end
  CHECK(cut(line + "\n" + line) == line + "\n");
  CHECK(cut(line + line) == "");
  CHECK(cut("a\n" + line + line + line) == "a\n");
}

TEST_CASE("an INI line an error quotes is cut and its control bytes shown", "[config][errors]") {
  CHECK_THROWS_WITH(parse_ini_text("a\rb\rc\r[x", "cr.ini"),
                    Contains("cr.ini:1: expected 'key = value', got 'a\\x0Db\\x0Dc\\x0D[x'"));
  CHECK_THROWS_WITH(parse_ini_text(std::string(500, 'x') + "\n", "long.ini"),
                    Contains("got '" + std::string(120, 'x') + "... (500 bytes)'"));
}
