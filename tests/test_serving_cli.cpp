// `specula generate` as users run real checkpoints: one stop rule for every method (--stop-tokens, the
// checkpoint's eos_token_id, --ignore-eos), logprobs (--logprobs N --logprobs-output FILE) equal for every
// method and to a float64 reference, padded vocabularies (ids beyond the tokenizer print as <|id:N|>), and
// text in and out (--prompt-file, --print-text, --stream). The hf: folders are tiny random bf16 Llama models
// written by tests/reference/hf_reference.py, whose float64 forward is the reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

using namespace specula::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

const std::string kReference =
    "/usr/bin/python3 " + std::string(SPECULA_SOURCE_DIR) + "/tests/reference/hf_reference.py";

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line)) out.push_back(json::parse(line));
  return out;
}

// The method flags of every method `generate` has, with `draft` as the draft model.
std::vector<std::pair<std::string, std::string>> all_methods(const std::string& draft) {
  const std::string d = " --draft " + draft;
  return {{"ar", " --method ar"},
          {"greedy", d + " --method greedy --num-draft-tokens 3"},
          {"chain", d + " --method chain --num-draft-tokens 3"},
          {"block", d + " --method block --num-draft-tokens 3"},
          {"tree", d + " --method tree --tree 2,2,1"},
          {"typical", d + " --method typical --num-draft-tokens 3"}};
}

// Checks the stop rule on one output line: at most L ids, a stop token only as the last id, and a line
// shorter than L ends with one.
void check_stopped_line(const std::vector<int>& line, int L, const std::vector<int>& stops) {
  auto is_stop = [&](int t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };
  REQUIRE(line.size() <= static_cast<size_t>(L));
  REQUIRE(!line.empty());
  for (size_t i = 0; i + 1 < line.size(); ++i) CHECK_FALSE(is_stop(line[i]));
  if (line.size() < static_cast<size_t>(L)) CHECK(is_stop(line.back()));
}

// A tiny random bf16 Llama folder with a 256-byte tokenizer and `vocab` logits rows (ids 256.. are padding).
std::string make_llama(const TempDir& dir, const std::string& name, int seed, int layers, int vocab = 300) {
  const std::string out = dir.file(name);
  const std::string command = kReference + " make --arch llama --dtype bf16 --byte-tokenizer --vocab " +
                              std::to_string(vocab) + " --seed " + std::to_string(seed) + " --layers " +
                              std::to_string(layers) + " --out " + out;
  REQUIRE(std::system(command.c_str()) == 0);
  return out;
}

// log softmax over the entries of `logits` that `keep` allows (others -inf), in float64.
std::vector<double> log_softmax(const std::vector<double>& logits, const std::vector<bool>& keep) {
  double m = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep[i]) m = std::max(m, logits[i]);
  double z = 0.0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep[i]) z += std::exp(logits[i] - m);
  std::vector<double> out(logits.size(), -INFINITY);
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep[i]) out[i] = logits[i] - m - std::log(z);
  return out;
}

// Reference rows (float64 logits) after every position of `sequence`.
// The float64 reference's logits rows of every sequence, in one run of the reference (it imports PyTorch).
std::vector<std::vector<std::vector<double>>> reference_rows(const TempDir& dir, const std::string& model,
                                                             const std::vector<std::vector<int>>& sequences) {
  const std::string in = dir.write("sequences.json", json{{"sequences", sequences}}.dump());
  const std::string out = dir.file("logits.json");
  REQUIRE(std::system((kReference + " logits --model " + model + " --sequences " + in + " --out " + out).c_str()) == 0);
  return json::parse(read_text(out))["logits"].get<std::vector<std::vector<std::vector<double>>>>();
}

}  // namespace

TEST_CASE("every method ends a sample at its first stop token, which is emitted and counted", "[cli][serving]") {
  TempDir dir;
  const std::string target = "bigram:" + dir.write("t.txt", kCliTargetTable),
                    draft = "bigram:" + dir.write("d.txt", kCliDraftTable);
  constexpr int L = 9;
  for (auto [name, flags] : all_methods(draft)) {
    for (const std::string temperature : {"1", "0"}) {
      if (name == "greedy" && temperature == "1") continue;  // greedy verification is for T = 0
      INFO(name << " T=" << temperature);
      const CliResult r = run_specula("generate --target " + target + flags + " --temperature " + temperature +
                                      " --stop-tokens 2 --prompt-tokens 0,3 --max-new-tokens " + std::to_string(L) +
                                      " --num-samples 300 --seed 5 --output " + dir.file("out.txt") +
                                      " --metrics-json " + dir.file("m.json"));
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      const auto lines = read_id_lines(dir.file("out.txt"));
      REQUIRE(lines.size() == 300);
      int64_t tokens = 0, stopped = 0;
      for (const auto& line : lines) {
        check_stopped_line(line, L, {2});
        tokens += static_cast<int64_t>(line.size());
        stopped += line.back() == 2;
      }
      if (temperature == "1") CHECK(stopped > 100);  // token 2 is likely after 2 and 3: most samples stop
      const json m = json::parse(read_text(dir.file("m.json")));
      CHECK(m["new_tokens"].get<int64_t>() == tokens);
      CHECK(m["stopped_sequences"].get<int64_t>() == stopped);
      if (name == "ar") CHECK(m["target_calls"].get<int64_t>() == tokens);
    }
  }
  SECTION("--min-tokens keeps its meaning: no stop token before it") {
    const CliResult r = run_specula("generate --target " + target + " --draft " + draft +
                                    " --method chain --stop-tokens 2 --min-tokens 4 --prompt-tokens 0,3 "
                                    "--max-new-tokens 9 --num-samples 200 --seed 6 --output " +
                                    dir.file("min.txt"));
    REQUIRE(r.exit_code == 0);
    for (const auto& line : read_id_lines(dir.file("min.txt"))) {
      check_stopped_line(line, 9, {2});
      CHECK(line.size() >= 5);
    }
  }
  SECTION("beam search ends hypotheses at the same stop tokens") {
    const CliResult r = run_specula("generate --target " + target +
                                    " --method beam --stop-tokens 2 --prompt-tokens 3 "
                                    "--max-new-tokens 9 --output " +
                                    dir.file("beam.txt"));
    REQUIRE(r.exit_code == 0);
    const auto lines = read_id_lines(dir.file("beam.txt"));
    REQUIRE(lines.size() == 1);
    check_stopped_line(lines[0], 9, {2});
  }
}

TEST_CASE("an hf checkpoint's eos_token_id ends every method; --ignore-eos does not; padded ids print escaped",
          "[cli][serving][hf]") {
  TempDir dir;
  const std::string folder = make_llama(dir, "llama", 3, 2);
  const std::string draft_folder = make_llama(dir, "draft", 4, 1);
  const std::string target = "hf:" + folder, draft = "hf:" + draft_folder;
  const std::string prompt = " --prompt-tokens 72,101,108,108,111";
  constexpr int L = 30;
  const std::string common = prompt + " --max-new-tokens " + std::to_string(L);
  REQUIRE(run_specula("generate --target " + target + common + " --temperature 0 --output " + dir.file("greedy.txt"))
              .exit_code == 0);
  const std::vector<int> unstopped = read_id_lines(dir.file("greedy.txt")).at(0);
  REQUIRE(unstopped.size() == static_cast<size_t>(L));
  // The EOS id: the first token greedy decoding emits for the first time at position >= 6.
  size_t cut = 6;
  while (cut < unstopped.size() &&
         std::find(unstopped.begin(), unstopped.begin() + cut, unstopped[cut]) != unstopped.begin() + cut)
    ++cut;
  REQUIRE(cut + 1 < unstopped.size());
  const int eos = unstopped[cut];
  // generation_config.json's list wins over config.json's id (an id greedy decoding never emits).
  dir.write("llama/generation_config.json", json{{"eos_token_id", {eos}}}.dump());
  json config = json::parse(read_text(folder + "/config.json"));
  config["eos_token_id"] = unstopped[0];
  dir.write("llama/config.json", config.dump());
  const std::vector<int> expected(unstopped.begin(), unstopped.begin() + cut + 1);

  for (auto [name, flags] : all_methods(draft)) {
    INFO(name);
    const CliResult r = run_specula("generate --target " + target + flags + common + " --temperature 0 --output " +
                                    dir.file("out.txt"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    CHECK(read_id_lines(dir.file("out.txt")).at(0) == expected);
    // --ignore-eos only leaves the checkpoint's ids out of the stop set, before any method runs: checked with
    // plain decoding and with a tree.
    if (name == "ar" || name == "tree") {
      REQUIRE(run_specula("generate --target " + target + flags + common + " --temperature 0 --ignore-eos --output " +
                          dir.file("ignored.txt"))
                  .exit_code == 0);
      CHECK(read_id_lines(dir.file("ignored.txt")).at(0) == unstopped);
    }
    // Sampled: the stop rule on every line, and the padded ids (256..299, no text) never abort the run.
    const CliResult sampled = run_specula("generate --target " + target + flags + common +
                                          " --num-samples 40 --seed 2 --print-text --output " + dir.file("s.txt"));
    INFO(sampled.err);
    REQUIRE(sampled.exit_code == 0);
    const auto lines = read_id_lines(dir.file("s.txt"));
    REQUIRE(lines.size() == 40);
    bool padded = false;
    for (const auto& line : lines) {
      check_stopped_line(line, L, {eos});
      for (int t : line) padded = padded || t >= 256;
    }
    CHECK(padded);
    CHECK_THAT(sampled.out, Contains("<|id:2") && Contains("--- sample 39 ---"));
  }
  // --min-tokens bans the stop tokens: with the checkpoint's it binds; with it ignored and none given, it is noted.
  const CliResult binding = run_specula("generate --target " + target + common +
                                        " --temperature 0 --min-tokens 3 --output " + dir.file("min.txt"));
  REQUIRE(binding.exit_code == 0);
  CHECK_THAT(binding.err, !Contains("note:"));
  const CliResult ignored = run_specula("generate --target " + target + common +
                                        " --temperature 0 --min-tokens 3 --ignore-eos --output " + dir.file("min.txt"));
  REQUIRE(ignored.exit_code == 0);
  CHECK_THAT(ignored.err, Contains("note: --min-tokens is left unread: no stop token is set (none is given, and the "
                                   "checkpoint's end of sequence is ignored)"));
  SECTION("an eos_token_id that is not an id is an error naming the file and the value") {
    dir.write("llama/generation_config.json", R"({"eos_token_id": "two"})");
    const CliResult r = run_specula("generate --target " + target + common + " --output " + dir.file("x.txt"));
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("generation_config.json") && Contains("eos_token_id") && Contains("\"two\""));
  }
}

TEST_CASE("run: an error in an hf target's generation_config.json names the target's key, not a setting",
          "[cli][serving][hf]") {
  TempDir dir;
  const std::string folder = make_llama(dir, "llama", 3, 1);
  dir.write("llama/generation_config.json", R"({"eos_token_id": "two"})");
  const std::string exp = dir.write(
      "eos.ini", "[experiment]\ntarget = hf:" + folder + "\nprompts = " + dir.write("prompts.txt", "72,101,108\n") +
                     "\nmax_new_tokens = 4\nrepetitions = 1\n\n[sampling]\nregex = a+ | b+\n\n[draft]\n"
                     "drafter = prompt-lookup\nmethod = chain\n");
  const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") + " --quiet");
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("eos.ini:2: key 'experiment.target' = 'hf:" + folder + "'") &&
                        Contains("generation_config.json") && Contains("\"two\""));
  CHECK_THAT(r.err, !Contains("setting"));
  CHECK_FALSE(std::filesystem::exists(dir.file("results") + "/eos"));
}

TEST_CASE("a transformer checkpoint's eos_token_id ends generation; --ignore-eos does not", "[cli][serving]") {
  TempDir dir;
  const std::string folder = dir.file("draft");
  std::filesystem::copy(std::string(SPECULA_SOURCE_DIR) + "/results/models/draft", folder);
  const std::string common = " --prompt-tokens 72,101,108,108,111 --max-new-tokens 24 --temperature 0 --output ";
  const std::string ar = "generate --target transformer:" + folder + common;
  const std::string chain = "generate --target transformer:" + folder + " --draft transformer:" + folder +
                            " --method chain --num-draft-tokens 3" + common;
  REQUIRE(run_specula(ar + dir.file("greedy.txt")).exit_code == 0);
  const std::vector<int> unstopped = read_id_lines(dir.file("greedy.txt")).at(0);
  // The EOS id: the first token greedy decoding emits for the first time at position >= 4.
  size_t cut = 4;
  while (cut < unstopped.size() &&
         std::find(unstopped.begin(), unstopped.begin() + cut, unstopped[cut]) != unstopped.begin() + cut)
    ++cut;
  REQUIRE(cut + 1 < unstopped.size());
  json config = json::parse(read_text(folder + "/config.json"));
  config["eos_token_id"] = unstopped[cut];
  dir.write("draft/config.json", config.dump());
  const std::vector<int> expected(unstopped.begin(), unstopped.begin() + cut + 1);
  for (const std::string& command : {ar, chain}) {
    INFO(command);
    const CliResult stopped = run_specula(command + dir.file("out.txt"));
    INFO(stopped.err);
    REQUIRE(stopped.exit_code == 0);
    CHECK(read_id_lines(dir.file("out.txt")).at(0) == expected);
    REQUIRE(run_specula(command + dir.file("ignored.txt") + " --ignore-eos").exit_code == 0);
    CHECK(read_id_lines(dir.file("ignored.txt")).at(0) == unstopped);
  }
  // An export keeps it: the hf: model stops where the checkpoint did.
  REQUIRE(run_specula("export --model transformer:" + folder + " --output " + dir.file("hf")).exit_code == 0);
  REQUIRE(run_specula("generate --target hf:" + dir.file("hf") + common + dir.file("hf.txt")).exit_code == 0);
  CHECK(read_id_lines(dir.file("hf.txt")).at(0) == expected);
  // A value that is not an id is named where the checkpoint loads, --ignore-eos or not.
  config["eos_token_id"] = "two";
  dir.write("draft/config.json", config.dump());
  const CliResult bad = run_specula(ar + dir.file("bad.txt") + " --ignore-eos");
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("config.json: eos_token_id \"two\" is not a token id in [0, 256)"));
}

TEST_CASE("logprobs are the same for the same tokens whatever the method, and equal a float64 reference",
          "[cli][serving][hf]") {
  TempDir dir;
  const std::string folder = make_llama(dir, "llama", 7, 2);
  const std::string draft = "hf:" + make_llama(dir, "draft", 8, 1);
  const std::vector<int> prompt = {72, 101, 108, 108, 111};
  const std::string common = " --prompt-tokens 72,101,108,108,111 --max-new-tokens 12 --ignore-eos --logprobs 5";

  SECTION("temperature 0: the row the argmax is taken over, at temperature 1") {
    std::string reference_file;
    for (auto [name, flags] : all_methods(draft)) {
      if (name == "typical") continue;  // lossy: its tokens may differ
      INFO(name);
      const std::string out = dir.file(name + ".jsonl");
      const CliResult r =
          run_specula("generate --target hf:" + folder + flags + common + " --temperature 0 --logprobs-output " + out +
                      " --output " + dir.file(name + ".txt"));
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      if (reference_file.empty())
        reference_file = read_text(out);
      else
        CHECK(read_text(out) == reference_file);  // byte for byte
    }
    const json line = json::parse(reference_file);
    CHECK(line["sample"] == 0);
    std::vector<int> sequence = prompt;
    for (const json& t : line["tokens"]) sequence.push_back(t["id"]);
    const auto rows = reference_rows(dir, folder, {sequence}).at(0);
    const std::vector<bool> all(rows[0].size(), true);
    REQUIRE(line["tokens"].size() == 12);
    for (size_t i = 0; i < line["tokens"].size(); ++i) {
      const json& t = line["tokens"][i];
      const std::vector<double> want = log_softmax(rows[prompt.size() - 1 + i], all);
      const int id = t["id"];
      CHECK(std::abs(t["raw_logprob"].get<double>() - want[id]) < 1e-3);
      CHECK(std::abs(t["logprob"].get<double>() - want[id]) < 1e-3);
      REQUIRE(t["top"].size() == 5);
      CHECK(t["top"][0][0] == id);  // greedy: the argmax heads the list
      for (const json& entry : t["top"]) CHECK(std::abs(entry[1].get<double>() - want[entry[0].get<int>()]) < 1e-3);
      for (size_t k = 1; k < 5; ++k) CHECK(t["top"][k - 1][1].get<double>() >= t["top"][k][1].get<double>());
    }
  }
  SECTION("temperature 0.8 and top-k 20: processed under the filtered row, raw under the softmax of the logits") {
    std::vector<json> lines;  // every method's samples, then one reference run for all of them
    for (const std::string method : {"ar", "chain", "tree"}) {
      INFO(method);
      const std::string flags = method == "ar"      ? " --method ar"
                                : method == "chain" ? " --draft " + draft + " --method chain"
                                                    : " --draft " + draft + " --method tree --tree 2,2";
      const std::string out = dir.file(method + "-t.jsonl");
      REQUIRE(run_specula("generate --target hf:" + folder + flags + common +
                          " --temperature 0.8 --top-k 20 --num-samples 2 --seed 4 --logprobs-output " + out +
                          " --output " + dir.file("t.txt"))
                  .exit_code == 0);
      const std::vector<json> method_lines = read_jsonl(out);
      REQUIRE(method_lines.size() == 2);
      for (size_t s = 0; s < method_lines.size(); ++s) CHECK(method_lines[s]["sample"] == s);
      lines.insert(lines.end(), method_lines.begin(), method_lines.end());
    }
    std::vector<std::vector<int>> sequences;
    for (const json& line : lines) {
      sequences.push_back(prompt);
      for (const json& t : line["tokens"]) sequences.back().push_back(t["id"]);
    }
    const auto reference = reference_rows(dir, folder, sequences);
    for (size_t s = 0; s < lines.size(); ++s) {
      INFO("line " << s << " (methods ar, chain, tree; two samples each)");
      for (size_t i = 0; i < lines[s]["tokens"].size(); ++i) {
        const json& t = lines[s]["tokens"][i];
        const std::vector<double>& row = reference[s][prompt.size() - 1 + i];
        std::vector<double> sorted(row);
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        std::vector<bool> top20(row.size()), all(row.size(), true);
        std::vector<double> tempered(row.size());
        for (size_t v = 0; v < row.size(); ++v) {
          top20[v] = row[v] >= sorted[19];
          tempered[v] = row[v] / 0.8;
        }
        const std::vector<double> processed = log_softmax(tempered, top20), raw = log_softmax(row, all);
        const int id = t["id"];
        CHECK(std::abs(t["logprob"].get<double>() - processed[id]) < 1e-3);
        CHECK(std::abs(t["raw_logprob"].get<double>() - raw[id]) < 1e-3);
        for (const json& entry : t["top"])
          CHECK(std::abs(entry[1].get<double>() - processed[entry[0].get<int>()]) < 1e-3);
      }
    }
  }
}

TEST_CASE("text in and out: --prompt-file, --print-text, --stream", "[cli][serving]") {
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  TempDir dir;
  const std::string prompt_file = dir.write("prompt.txt", "ROMEO:\nWhat light");
  const std::string common = "generate --target transformer:" + models + "draft --prompt-file " + prompt_file +
                             " --max-new-tokens 40 --temperature 0";
  const CliResult printed = run_specula(common + " --print-text --output " + dir.file("ids.txt"));
  INFO(printed.err);
  REQUIRE(printed.exit_code == 0);
  const std::vector<int> ids = read_id_lines(dir.file("ids.txt")).at(0);
  std::string text;
  for (int t : ids) text += static_cast<char>(t);  // byte tokens
  CHECK(printed.out == text + "\n");
  const CliResult streamed = run_specula(common + " --stream --draft transformer:" + models + "draft --method chain");
  INFO(streamed.err);
  REQUIRE(streamed.exit_code == 0);
  CHECK(streamed.out == text + "\n");  // the same text, written as it was accepted
  CHECK_THAT(run_specula(common + " --stream --num-samples 2").err, Contains("--stream prints one sample"));
  CHECK_THAT(run_specula(common + " --prompt x").err, Contains("one of --prompt"));
  CHECK_THAT(run_specula(common + " --logprobs 3 --output " + dir.file("o.txt")).err,
             Contains("--logprobs N and --logprobs-output FILE go together"));
}

TEST_CASE("a generation longer than the target's positions is refused before any work", "[cli][serving]") {
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  TempDir dir;
  // The bundled draft holds 256 positions: 100 prompt tokens + 150 new - 1 + depth 8 = 257.
  std::string prompt = "0";
  for (int i = 1; i < 100; ++i) prompt += ",65";
  const std::string common = "generate --target transformer:" + models + "draft --prompt-tokens " + prompt +
                             " --max-new-tokens 150 --output " + dir.file("o.txt");
  const CliResult r =
      run_specula(common + " --draft transformer:" + models + "draft --method chain --num-draft-tokens 8");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("holds 256 positions") && Contains("need 257"));
  CHECK(
      run_specula(common + " --draft transformer:" + models + "draft --method chain --num-draft-tokens 7").exit_code ==
      0);
}

TEST_CASE("greedy logprobs: the row the argmax is taken over, with no filter; T = 0.001 is a temperature",
          "[cli][serving]") {
  TempDir dir;
  const std::string target = "bigram:" + dir.write("t.txt", kCliTargetTable);
  // Greedy decoding runs no filter, so --top-k 1 leaves the reported row whole: 4 entries, softmax of the logits.
  const CliResult r = run_specula("generate --target " + target +
                                  " --prompt-tokens 0 --max-new-tokens 1 --temperature 0 "
                                  "--top-k 1 --logprobs 4 --logprobs-output " +
                                  dir.file("lp.jsonl"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const json line = json::parse(read_text(dir.file("lp.jsonl")));
  const json& t = line["tokens"][0];
  CHECK(t["id"] == 1);  // row 0 is 0.5 1.0 -0.3 0.2
  const double log_z = std::log(std::exp(0.5) + std::exp(1.0) + std::exp(-0.3) + std::exp(0.2));
  CHECK(std::abs(t["logprob"].get<double>() - (1.0 - log_z)) < 1e-6);
  CHECK(t["top"].size() == 4);
  CHECK(run_specula("generate --target " + target +
                    " --prompt-tokens 0 --max-new-tokens 3 --temperature 0.001 --output " + dir.file("o.txt"))
            .exit_code == 0);
}
