// The experiment runner: config parsing and its errors, the sweep, the summary math on synthetic records,
// the Leviathan prediction against a drafter with known i.i.d. acceptance, results-folder contents,
// shard + merge = one run, and plots.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "cli_runner.h"
#include "draft/synthetic_drafter.h"
#include "harness/config/command_options.h"
#include "harness/experiment/environment.h"
#include "harness/experiment/experiment_config.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "harness/experiment/sweep.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/draft_schedule.h"
#include "harness/io/differing_lines.h"
#include "harness/io/file_checksum.h"
#include "harness/io/home_path.h"
#include "harness/runner/results_folder.h"
#include "harness/runner/run_inputs.h"
#include "harness/runner/setting_configs.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "speculative_fixtures.h"
#include "summary_records.h"
#include "verify/constraints/regex.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

const std::string kTable = std::string(SPECULA_SOURCE_DIR) + "/experiments/tables/";

std::string experiment_text(const std::string& extra = "") {
  return "[experiment]\ntarget = bigram:" + kTable + "target-v16.txt\nprompts = " + SPECULA_SOURCE_DIR +
         "/experiments/prompts/table-prompts.txt\nmax_new_tokens = 12\nrepetitions = 2\nseed = 3\n\n[draft]\n"
         "drafter = bigram:" +
         kTable +
         "draft-v16.txt | synthetic:alpha=0.6\nmethod = chain, tree\n"
         "num_draft_tokens = 2, 3\ntree = 2,1\n\n[sampling]\ntemperature = 0, 0.8\ntop_k = 8\n" +
         extra;
}

}  // namespace

TEST_CASE("experiment files: lists, separators, overrides and defaults", "[runner][config]") {
  TempDir dir;
  const std::string path = dir.write("exp.ini", experiment_text());
  const ExperimentConfig c = load_experiment(path, {"sampling.temperature=0.5", "draft.num_draft_tokens=1,4"});
  CHECK(c.name == "exp");
  CHECK(c.max_new_tokens == 12);
  CHECK(c.axes.at("sampling.temperature") == std::vector<std::string>{"0.5"});  // the command line wins
  CHECK(c.axes.at("draft.num_draft_tokens") == std::vector<std::string>{"1", "4"});
  CHECK(c.axes.at("draft.drafter").size() == 2);  // drafters are separated by '|'
  CHECK(c.axes.at("draft.tree") == std::vector<std::string>{"2,1"});
  CHECK_THAT(c.resolved_ini(), Contains("temperature = 0.5"));

  // 2 drafters x (chain x 2 K + tree x 1 shape) x 1 temperature = 6 speculative settings + 1 baseline.
  const std::vector<Setting> sweep = expand_sweep(c);
  CHECK(sweep.size() == 7);
  CHECK(sweep.front().baseline);
  for (const Setting& s : sweep) {
    if (s.baseline) continue;
    CHECK(s.baseline_id == sweep.front().id);
    if (s.get("draft.method") == "chain") CHECK(s.values.count("draft.tree") == 0);
  }
  // Shards partition the speculative settings and carry the baselines they need.
  std::set<std::string> seen;
  for (int i = 1; i <= 3; ++i)
    for (const Setting& s : shard_of(sweep, i, 3))
      if (!s.baseline) CHECK(seen.insert(s.id).second);
  CHECK(seen.size() == 6);
}

TEST_CASE("[beam] takes generate's option names too; one option under both names is refused", "[runner][config]") {
  TempDir dir;
  const std::vector<std::string> beam = {"draft.method=tree,beam"};
  const ExperimentConfig c =
      load_experiment(dir.write("b.ini", experiment_text("\n[beam]\nbeam_width = 6\nnum_beam_groups = 2\n")), beam);
  CHECK(c.beam.at("width") == "6");
  CHECK(c.beam.at("groups") == "2");
  CHECK_THAT(c.resolved_ini(), Contains("width = 6") && Contains("groups = 2"));
  CHECK_THROWS_WITH(load_experiment(dir.write("d.ini", experiment_text("\n[beam]\nwidth = 6\nbeam_width = 4\n")), beam),
                    Contains("beam_width") && Contains("repeats [beam] width"));
  // --set overrides either spelling.
  const ExperimentConfig o = load_experiment(dir.file("b.ini"), {"draft.method=beam", "beam.width=3"});
  CHECK(o.beam.at("width") == "3");
  // Without a beam setting, [beam] would be ignored: refused in an experiment a user wrote, naming the key; a run's
  // saved copy written before the rule still loads (to be resumed or plotted).
  CHECK_NOTHROW(check_new_experiment(c));
  CHECK_NOTHROW(load_experiment(dir.file("b.ini"), {}));
  CHECK_THROWS_WITH(check_new_experiment(load_experiment(dir.file("b.ini"), {})),
                    Contains("b.ini:20: key 'beam.groups' is given, but no setting uses method = beam"));
  // Unless --set chose the methods: the file's [beam] stays for the file's own methods.
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("b.ini"), {"draft.method=chain"})));
  // Token strings without any constraint would be read by nothing.
  const std::string strings = dir.write("ts.txt", "a\nb\n");
  CHECK_THROWS_WITH(check_new_experiment(
                        load_experiment(dir.write("s.ini", experiment_text("token_strings = " + strings + "\n")), {})),
                    Contains("s.ini:17: key 'sampling.token_strings' is given, but no setting has a constraint"));
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("s.ini"), {"sampling.regex=none | (ab)+"})));
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("s.ini"), {"sampling.regex=none"})));  // --set chose it
}

namespace {

// Each of `refused` (lines that end `head`'s [draft] section, and the message) refused by check_new_experiment. A case
// whose method is ar goes without head's drafter, which would be refused first where nothing drafts (as a drafting key
// too).
void check_draft_refusals(const TempDir& dir, const std::string& head,
                          const std::vector<std::pair<std::string, std::string>>& refused) {
  for (const auto& [text, message] : refused) {
    INFO(text);
    const std::string file =
        text.rfind("method = ar", 0) == 0 ? head.substr(0, head.find("drafter")) + text : head + text;
    CHECK_THROWS_WITH(check_new_experiment(load_experiment(dir.write("r.ini", file), {})), Contains(message));
  }
}

}  // namespace

TEST_CASE("tree keys without a method that verifies trees are refused, naming the key", "[runner][config]") {
  TempDir dir;
  std::string text = experiment_text();
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.write("t.ini", text), {})));  // chain and tree: tree is read
  text.replace(text.find("method = chain, tree"), std::string("method = chain, tree").size(), "method = chain, block");
  const std::string exp = dir.write("u.ini", text);
  CHECK_THROWS_WITH(check_new_experiment(load_experiment(exp, {})),
                    Contains("u.ini:12: key 'draft.tree' is given, but no setting uses a method that verifies trees"));
  CHECK_THROWS_WITH(check_new_experiment(load_experiment(exp, {"draft.tree_sampling=topk"})),
                    Contains("key 'draft.tree") && Contains("no setting uses a method that verifies trees"));
  // Methods chosen with --set leave the file's tree for the file's own methods (as bench end-to-end's recipes do).
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("t.ini"), {"draft.method=block"})));
}

TEST_CASE(
    "the draft length schedule: an axis of the methods that verify chains, dropped for trees, refused without one",
    "[runner][config]") {
  TempDir dir;
  const std::string head =
      "[experiment]\ntarget = bigram:" + kTable + "target-v16.txt\nprompts = " + SPECULA_SOURCE_DIR +
      "/experiments/prompts/table-prompts.txt\nmax_new_tokens = 4\n[draft]\ndrafter = prompt-lookup\n";
  const ExperimentConfig c =
      load_experiment(dir.write("s.ini", head + "method = chain, tree\ntree = 2,1\nnum_draft_tokens = 3\n"
                                                "num_draft_tokens_schedule = constant, heuristic\n"),
                      {});
  CHECK_NOTHROW(check_new_experiment(c));
  std::map<std::string, std::string> schedules;  // method + schedule of each speculative setting
  for (const Setting& s : expand_sweep(c)) {
    if (s.baseline) continue;
    schedules[s.id] = s.get("draft.method") + " " + s.get_or("draft.num_draft_tokens_schedule", "-");
    if (s.get("draft.method") == "chain")
      CHECK(setting_generation(s, c).num_draft_tokens_schedule ==
            parse_draft_schedule(s.get("draft.num_draft_tokens_schedule")));
  }
  std::multiset<std::string> seen;
  for (const auto& [id, text] : schedules) seen.insert(text);
  CHECK(seen == std::multiset<std::string>{"chain constant", "chain heuristic", "tree -"});  // one tree: none applies
  CHECK_THAT(c.resolved_ini(), Contains("num_draft_tokens_schedule = constant, heuristic"));
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"method = chain\nnum_draft_tokens_schedule = adaptive\n", "r.ini:8: key 'draft.num_draft_tokens_schedule'"},
      {"method = tree\ntree = 2,1\nnum_draft_tokens_schedule = heuristic\n",
       "r.ini:9: key 'draft.num_draft_tokens_schedule' moves a chain's K, but no setting uses a method that verifies "
       "chains"},
      {"method = ar\nnum_draft_tokens_schedule = heuristic\n",
       "r.ini:7: key 'draft.num_draft_tokens_schedule' is given, but no setting drafts"}};
  check_draft_refusals(dir, head, refused);
  CHECK_THROWS_WITH(
      load_experiment(dir.write("r.ini", head + "method = chain\nnum_draft_tokens_schedule = adaptive\n"), {}),
      Contains("unknown num_draft_tokens_schedule 'adaptive'"));
  // A tree sweep that says the schedule is constant asks for nothing it cannot do.
  CHECK_NOTHROW(check_new_experiment(load_experiment(
      dir.write("r.ini", head + "method = tree\ntree = 2,1\nnum_draft_tokens_schedule = constant\n"), {})));
}

TEST_CASE("the confidence threshold: an axis of the methods that verify chains, dropped for trees, refused without one",
          "[runner][config]") {
  TempDir dir;
  const std::string head =
      "[experiment]\ntarget = bigram:" + kTable + "target-v16.txt\nprompts = " + SPECULA_SOURCE_DIR +
      "/experiments/prompts/table-prompts.txt\nmax_new_tokens = 4\n[draft]\ndrafter = bigram:" + kTable +
      "draft-v16.txt\n";
  const ExperimentConfig c = load_experiment(
      dir.write("s.ini",
                head + "method = chain, tree\ntree = 2,1\nnum_draft_tokens = 3\nconfidence_threshold = 0, 0.4\n"),
      {});
  CHECK_NOTHROW(check_new_experiment(c));
  std::multiset<std::string> seen;  // method + threshold of each speculative setting
  for (const Setting& s : expand_sweep(c)) {
    if (s.baseline) continue;
    seen.insert(s.get("draft.method") + " " + s.get_or("draft.confidence_threshold", "-"));
    if (s.get("draft.method") == "chain")
      CHECK(setting_generation(s, c).confidence_threshold == std::stod(s.get("draft.confidence_threshold")));
  }
  CHECK(seen == std::multiset<std::string>{"chain 0", "chain 0.4", "tree -"});
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"method = chain\nconfidence_threshold = 1.5\n",
       "r.ini:8: key 'draft.confidence_threshold' = '1.5': confidence_threshold '1.5' is not a number in [0, 1)"},
      {"method = chain\nconfidence_threshold = high\n", "confidence_threshold 'high' is not a number in [0, 1)"},
      {"method = tree\ntree = 2,1\nconfidence_threshold = 0.4\n",
       "r.ini:9: key 'draft.confidence_threshold' stops a chain early, but no setting uses a method that verifies "
       "chains"},
      {"method = ar\nconfidence_threshold = 0.4\n",
       "r.ini:7: key 'draft.confidence_threshold' is given, but no setting drafts"}};
  check_draft_refusals(dir, head, refused);
  // A drafter that proposes without a law to doubt: `run` refuses it by key before any model loads.
  const std::string lookup =
      head.substr(0, head.find("drafter")) + "drafter = prompt-lookup\nmethod = chain\nconfidence_threshold = 0.4\n";
  const CliResult r =
      run_specula("run " + dir.write("p.ini", lookup) + " --set experiment.output_dir=" + dir.file("out") + " --quiet");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("key 'draft.confidence_threshold'") &&
                        Contains("drafter prompt-lookup does not stop on its confidence"));
  CHECK_FALSE(fs::exists(dir.file("out")));
}

TEST_CASE("every experiment file under experiments/ is one a new run accepts, read from the repository's root",
          "[runner][config]") {
  // Their paths are relative to the root, where the README runs them: the test reads them from there and comes back.
  struct InFolder {
    fs::path before = fs::current_path();
    explicit InFolder(const std::string& folder) { fs::current_path(folder); }
    ~InFolder() { fs::current_path(before); }
  } in(SPECULA_SOURCE_DIR);
  int experiments = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator("experiments")) {
    if (entry.path().extension() != ".ini") continue;
    std::ifstream file(entry.path());
    std::string first;
    while (std::getline(file, first) && (first.empty() || first[0] == '#')) {
    }
    if (first != "[experiment]") continue;  // a trainer's file
    INFO(entry.path().string());
    ++experiments;
    const ExperimentConfig c = load_experiment(entry.path().string(), {});
    CHECK_NOTHROW(check_new_experiment(c));
    CHECK_FALSE(expand_sweep(c).empty());
  }
  CHECK(experiments >= 7);
}

TEST_CASE("what no setting reads is refused: drafting keys where none drafts, K under shaped trees, corpus keys",
          "[runner][config]") {
  TempDir dir;
  const std::string head = "[experiment]\ntarget = bigram:" + kTable +
                           "target-v16.txt\nprompts = " + SPECULA_SOURCE_DIR +
                           "/experiments/prompts/table-prompts.txt\nmax_new_tokens = 4\n";
  // Autoregressive decoding alone needs no drafter: one baseline per sampler setting, and no drafter in the resolved
  // configuration (which a resume reads back).
  const ExperimentConfig ar = load_experiment(dir.write("ar.ini", head + "[draft]\nmethod = ar\n"), {});
  CHECK_NOTHROW(check_new_experiment(ar));
  CHECK(expand_sweep(ar).size() == 1);
  CHECK_THAT(ar.resolved_ini(), !Contains("drafter"));
  CHECK(expand_sweep(load_experiment(dir.write("resolved.ini", ar.resolved_ini()), {})).size() == 1);
  // A resolved configuration runs again as it is: it writes no key its settings do not read (K where trees set it).
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("resolved.ini"), {})));
  const ExperimentConfig trees = load_experiment(
      dir.write("trees.ini", head + "[draft]\ndrafter = prompt-lookup\nmethod = tree\ntree = 2,1\n"), {});
  CHECK_THAT(trees.resolved_ini(), !Contains("num_draft_tokens"));
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.write("trees-resolved.ini", trees.resolved_ini()), {})));
  // Given where no method drafts, what only drafting reads is refused by its key.
  const std::vector<std::pair<std::string, std::string>> unread = {
      {"[draft]\nmethod = ar\ndrafter = prompt-lookup\n",
       "ar2.ini:7: key 'draft.drafter' is given, but no setting drafts"},
      {"[draft]\nmethod = ar\nnum_draft_tokens = 2, 4\n",
       "key 'draft.num_draft_tokens' is given, but no setting drafts"},
      {"[draft]\nmethod = ar\n[draft_sampling]\ntop_p = 0.5\n",
       "key 'draft_sampling.top_p' is given, but no setting drafts"},
      {"[draft]\ndrafter = prompt-lookup\nmethod = tree\ntree = 2,1\nnum_draft_tokens = 2, 4\n",
       "key 'draft.num_draft_tokens' is given, but every method that drafts verifies the tree of draft.tree"},
      {"prompt_length = 8\n[draft]\nmethod = ar\n",
       "key 'experiment.prompt_length' is given, but the prompts come from a file"},
  };
  for (const auto& [text, message] : unread) {
    INFO(text);
    CHECK_THROWS_WITH(check_new_experiment(load_experiment(dir.write("ar2.ini", head + text), {})), Contains(message));
  }
  // A drafting method still needs its drafter; K beside a tree is read where a chain drafts too.
  CHECK_THROWS_WITH(load_experiment(dir.write("chain.ini", head + "[draft]\nmethod = chain\n"), {}),
                    Contains("[draft] drafter is required"));
  CHECK_NOTHROW(check_new_experiment(load_experiment(
      dir.write("both.ini", head + "[draft]\ndrafter = prompt-lookup\nmethod = chain, tree\ntree = 2,1\n"
                                   "num_draft_tokens = 2, 4\n"),
      {})));
  // --set of the methods leaves the file's drafting keys for the file's methods (bench end-to-end's recipes).
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("both.ini"), {"draft.method=ar"})));
}

TEST_CASE("a prompts file: Windows line ends are not part of a prompt; num_prompts past its prompts is refused",
          "[runner][config]") {
  TempDir dir;
  const std::string prompts = dir.write("p.txt", "0 1 2\r\n# a comment\r\n3 4\r\n");
  ExperimentConfig c =
      load_experiment(dir.write("p.ini", "[experiment]\ntarget = bigram:" + kTable +
                                             "target-v16.txt\nprompts = " + prompts + "\n[draft]\nmethod = ar\n"),
                      {});
  CHECK(load_prompts(c, c.target) == std::vector<std::vector<int32_t>>{{0, 1, 2}, {3, 4}});
  c = load_experiment(dir.file("p.ini"), {"experiment.num_prompts=1"});
  CHECK(load_prompts(c, c.target).size() == 1);
  c = load_experiment(dir.file("p.ini"), {"experiment.num_prompts=3"});
  CHECK(load_prompts(c, c.target).size() == 2);  // as a folder begun by an earlier version resumes
  CHECK_THROWS_WITH(
      check_prompt_count(c, load_prompts(c, c.target).size()),
      Contains("--set experiment.num_prompts: key 'experiment.num_prompts' = 3, but " + prompts + " holds 2 prompts"));
  CHECK_NOTHROW(check_prompt_count(load_experiment(dir.file("p.ini"), {"experiment.num_prompts=2"}), 2));
}

TEST_CASE("experiment files: an unknown section even when empty, a byte order mark, one key set twice by --set",
          "[runner][config][errors]") {
  TempDir dir;
  const std::string ok = dir.write("ok.ini", experiment_text());
  CHECK_THROWS_WITH(load_experiment(dir.write("empty.ini", experiment_text("\n[samplng]\n")), {}),
                    Contains("empty.ini:18: unknown section [samplng] (known: [experiment], [draft]"));
  CHECK_NOTHROW(load_experiment(dir.write("dashes.ini", experiment_text("\n[draft-sampling]\n")), {}));
  // A byte order mark before the first header is no part of it.
  const ExperimentConfig bom = load_experiment(dir.write("bom.ini", "\xEF\xBB\xBF" + experiment_text()), {});
  CHECK(bom.max_new_tokens == 12);
  // One key twice among the overrides, under either spelling or by the option that stands for it: the last would win.
  CHECK_THROWS_WITH(load_experiment(ok, {"sampling.top_k=4", "sampling.top-k=5"}),
                    Contains("--set sampling.top-k: sampling.top_k is given twice (also by --set sampling.top_k)"));
  CHECK_THROWS_WITH(load_experiment(ok, {"experiment.cost_profile=a", "experiment.cost_profile=b"},
                                    {{"experiment.cost_profile", "--cost-profile"}}),
                    Contains("--cost-profile: experiment.cost_profile is given twice (also by --set "
                             "experiment.cost_profile)"));
  CHECK_NOTHROW(load_experiment(ok, {"sampling.top_k=4", "sampling.top_p=0.5,0.9"}));
}

TEST_CASE("one decoding method for generate and run: names, defaults and the method's rules", "[runner][config]") {
  CHECK_FALSE(parse_decoding_method("ar").speculative());
  CHECK(parse_decoding_method("beam").beam);
  CHECK(parse_decoding_method("typical").verify == VerifyMethod::typical);
  CHECK_THROWS_WITH(parse_decoding_method("sideways"), Contains("unknown method 'sideways'") && Contains("beam"));
  CHECK_THROWS_WITH(with_source("--method", [] { return parse_decoding_method("x"); }),
                    StartsWith("--method: unknown method 'x'"));
  // A tree with no shape verifies one chain of K; other methods keep the shape they were given (none).
  DraftShape shape;
  CHECK(shape.num_draft_tokens == kDefaultNumDraftTokens);
  shape.num_draft_tokens = 3;
  CHECK(generation_config(parse_decoding_method("tree"), shape, 10, 1).tree_shape == std::vector<int32_t>{1, 1, 1});
  CHECK(generation_config(parse_decoding_method("chain"), shape, 10, 1).tree_shape.empty());
  CHECK(draft_depth(generation_config(parse_decoding_method("chain"), shape, 10, 1)) == 3);
  CHECK(draft_depth(generation_config(parse_decoding_method("ar"), shape, 10, 1)) == 0);
  // Greedy speculation runs at temperature 0 unless a temperature was given.
  SamplingParams p;
  p.temperature = 0.7f;
  apply_method_temperature(parse_decoding_method("greedy"), true, p);
  CHECK(p.temperature == 0.7f);
  apply_method_temperature(parse_decoding_method("chain"), false, p);
  CHECK(p.temperature == 0.7f);
  apply_method_temperature(parse_decoding_method("greedy"), false, p);
  CHECK(p.temperature == 0.0f);
}

TEST_CASE("experiment files: a leading ~ in a path is the home folder, as the shell makes it", "[runner][config]") {
  TempDir dir;
  const std::string home = dir.file("home");
  std::filesystem::create_directories(home);
  std::ofstream(home + "/s.json") << "{\"type\": \"string\"}";
  const std::string text =
      "[experiment]\ntarget = bigram:~/t.txt\nprompts = ~/p.txt\noutput_dir = ~\n"
      "[draft]\ndrafter = bigram:~/d.txt | synthetic:alpha=0.5 | ngram:a~/b\n"
      "[sampling]\njson_schema = ~/s.json | none\n";
  const std::string path = dir.write("home.ini", text);
  {
    const ScopedEnv env("HOME", home);
    const ExperimentConfig c = load_experiment(path, {});
    CHECK(c.target == "bigram:" + home + "/t.txt");
    CHECK(c.prompts_file == home + "/p.txt");
    CHECK(c.output_dir == home);
    CHECK(c.axes.at("draft.drafter") ==
          std::vector<std::string>{"bigram:" + home + "/d.txt", "synthetic:alpha=0.5", "ngram:a~/b"});
    CHECK(c.axes.at("sampling.json_schema") == std::vector<std::string>{home + "/s.json", "none"});
    CHECK_THAT(c.resolved_ini(), Contains("output_dir = " + home + "\n"));
    CHECK(load_experiment(path, {"experiment.output_dir=~/runs"}).output_dir == home + "/runs");
    // Another user's home, and a `~` not first, are left as written (a missing file is named when it is opened).
    CHECK(expand_home("~user/c.json") == "~user/c.json");
    CHECK(expand_home("runs/~") == "runs/~");
    CHECK(expand_home_in_spec("prompt-lookup") == "prompt-lookup");
    CHECK(expand_home_in_spec("medusa:~/heads,tree=~/t.txt,target=~") ==
          "medusa:" + home + "/heads,tree=" + home + "/t.txt,target=" + home);
    CHECK(expand_home_in_spec("prompt-lookup:max_n=4,min_n=2") == "prompt-lookup:max_n=4,min_n=2");
    CHECK(expand_home_in_spec("transformer:~/runs/lr=3e-4/ckpt") == "transformer:" + home + "/runs/lr=3e-4/ckpt");
  }
  const ScopedEnv no_home("HOME", "");  // no HOME: an error naming the file, line and key
  CHECK_THROWS_WITH(
      load_experiment(path, {}),
      Contains("home.ini:2: key 'experiment.target': '~/t.txt': HOME is not set, so '~' names no folder"));
}

TEST_CASE("experiment files: option names with dashes, and comments after a section header", "[runner][config]") {
  TempDir dir;
  // Keys are the options' names as `specula sample` spells them, dashes or underscores, as in `generate --config`.
  std::string text = experiment_text("top-p = 0.9, 0.5\nrepetition-penalty = 1.1\n");
  const std::string header = "\n[sampling]\n";
  REQUIRE(text.find(header) != std::string::npos);
  text.replace(text.find(header), header.size(), "\n[sampling]   ; any option of `specula sample`\n");
  text.replace(text.find("[draft]\n"), 8, "[draft]\t# the drafters\n");
  const ExperimentConfig c = load_experiment(dir.write("dashes.ini", text), {"sampling.top-k=3"});
  CHECK(c.axes.at("sampling.top_p") == std::vector<std::string>{"0.9", "0.5"});
  CHECK(c.axes.at("sampling.repetition_penalty") == std::vector<std::string>{"1.1"});
  CHECK(c.axes.at("sampling.top_k") == std::vector<std::string>{"3"});  // --set wins under either spelling
  CHECK(c.axes.at("draft.num_draft_tokens") == std::vector<std::string>{"2", "3"});
  CHECK_THAT(c.resolved_ini(), Contains("top_p = 0.9, 0.5") && Contains("repetition_penalty = 1.1"));
  // One key under both spellings is given twice; an unknown key is named as written.
  const std::string twice = dir.write("twice.ini", experiment_text("top-k = 4\n"));
  CHECK_THROWS_WITH(load_experiment(twice, {}),
                    Contains("twice.ini:17: key 'sampling.top-k' repeats sampling.top_k (" + twice + ":16)"));
  CHECK_THROWS_WITH(load_experiment(dir.write("typo.ini", experiment_text("top-pp = 1\n")), {}),
                    Contains("typo.ini:17: unknown key 'sampling.top-pp'"));
  // A regex's ` #` would start a comment: written `\#` (the regex's escaped punctuation), it stays in the value.
  const ExperimentConfig hash =
      load_experiment(dir.write("hash.ini", experiment_text("regex = [a-z]+ \\#[0-9] ; digits\n")), {});
  CHECK(hash.axes.at("sampling.regex") == std::vector<std::string>{"[a-z]+ \\#[0-9]"});
  CHECK_NOTHROW(compile_regex("[a-z]+ \\#[0-9]"));
  CHECK_THROWS_WITH(load_experiment(dir.write("beam.ini", experiment_text("[beam]\nwidth = 2\nbeam-width = 2\n")), {}),
                    Contains("beam.ini:19: key 'beam.beam-width' repeats [beam] width"));
  // A bad value is named under the key as written, whether in the file or in --set.
  CHECK_THROWS_WITH(load_experiment(dir.write("value.ini", experiment_text("top-p = 1.5\n")), {}),
                    Contains("value.ini:17: key 'sampling.top-p' = '1.5'"));
  CHECK_THROWS_WITH(load_experiment(dir.file("dashes.ini"), {"experiment.max-new-tokens=0"}),
                    Contains("--set experiment.max-new-tokens: key 'experiment.max-new-tokens': 0 must be >= 1"));
  // A section's name reads the same way: [draft-sampling] is [draft_sampling].
  const ExperimentConfig drafted =
      load_experiment(dir.write("draft.ini", experiment_text("[draft-sampling]\ntemperature = 0.5\n")), {});
  CHECK(drafted.axes.at("draft_sampling.temperature") == std::vector<std::string>{"0.5"});
  // A header is still a whole [name]: text after it that is not a comment is refused.
  CHECK_THROWS_WITH(load_experiment(dir.write("bad.ini", "[experiment] x\n"), {}),
                    Contains(":1: malformed section header '[experiment] x'"));
}

TEST_CASE("a token list can be swept against none (the empty list)", "[runner][config]") {
  TempDir dir;
  const ExperimentConfig c = load_experiment(dir.write("e.ini", experiment_text("stop_tokens = none | 3\n")), {});
  CHECK(c.axes.at("sampling.stop_tokens") == std::vector<std::string>{"none", "3"});
  SamplingParams given;
  given.stop_tokens = {1};
  given.banned_tokens = {2};
  given.bad_words = {{3, 4}};
  const SamplingParams none =
      read_sampler_values({{"stop_tokens", "none"}, {"banned_tokens", " none "}, {"bad_words", "none"}}, given);
  CHECK(none.stop_tokens.empty());
  CHECK(none.banned_tokens.empty());
  CHECK(none.bad_words.empty());
  // Only those lists: an empty allowed list would allow nothing, and other token lists take ids alone.
  CHECK_THROWS_WITH(read_sampler_values({{"allowed_tokens", "none"}}, given), Contains("'none'"));
  CHECK_THROWS_WITH(read_sampler_values({{"stop_tokens", "none,3"}}, given), Contains("'none'"));
  CHECK_THROWS_WITH(parse_token_list("none", "--prompt-tokens"), Contains("'none'"));
}

TEST_CASE("experiment files: errors name the file, line and key", "[runner][config][errors]") {
  TempDir dir;
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {experiment_text("colour = blue\n"), ":17: unknown key 'sampling.colour'"},
      {experiment_text("top_p = 1.5\n"), ":17: key 'sampling.top_p' = '1.5'"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\n[draft]\ndrafter = bigram:y\nnum_draft_tokens = two\n",
       ":6: key 'draft.num_draft_tokens': 'two' is not an integer"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\nmax_new_tokens = 0\n",
       ":4: key 'experiment.max_new_tokens': 0 must be >= 1"},
      {"[experiment]\nprompts = p\n[draft]\ndrafter = bigram:y\n", "target is required"},
      {"[experiment]\ntarget = bigram:x\n[draft]\ndrafter = bigram:y\n", "exactly one of [experiment] prompts"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\n[draft]\ndrafter = bigram:y\nmethod = chain, sideways\n",
       ":6: key 'draft.method' = 'sideways'"},
      {"[experiment]\ntarget = bigram:x\ntarget = bigram:y\n", ":3: key 'experiment.target' is already set on line 2"},
      {"[experiment\n", ":1: malformed section header"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\ncorpus_tail = 0\n",
       ":4: key 'experiment.corpus_tail': '0' is not a fraction in (0, 1]"},
      {experiment_text("top_p = 0.9,,1\n"), ":17: key 'sampling.top_p': empty item in '0.9,,1'"},
      {"[experiment]\nname = ../../escape\ntarget = bigram:x\nprompts = p\n",
       ":2: key 'experiment.name': '../../escape' is not a plain folder name"},
      // Past 32 (or 64) bits: refused as written, never wrapped (4294967304 would read as 8) or clamped.
      {"[experiment]\ntarget = bigram:x\nprompts = p\nmax_new_tokens = 4294967304\n",
       ":4: key 'experiment.max_new_tokens': 4294967304 must be <= 1048576"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\nrepetitions = 4294967297\n",
       ":4: key 'experiment.repetitions': 4294967297 must be <= 2147483647"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\nrepetitions = 99999999999999999999\n",
       ":4: key 'experiment.repetitions': 99999999999999999999 must be <= 2147483647"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\nseed = 99999999999999999999\n",
       ":4: key 'experiment.seed': 99999999999999999999 does not fit 64 bits"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\nseed = -1\n",
       ":4: key 'experiment.seed': '-1' is not an unsigned integer"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\n[draft]\ndrafter = bigram:y\nnum_draft_tokens = 4294967298\n",
       ":6: key 'draft.num_draft_tokens': 4294967298 must be <= 256"},
      {"[experiment]\ntarget = bigram:x\nprompts = p\n[beam]\nwidth = 2000000000\n",
       ":5: key 'beam.width': 2000000000 must be <= 1024"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string path = dir.write("bad.ini", c.text);
    REQUIRE_THROWS_AS(load_experiment(path, {}), Error);
    CHECK_THROWS_WITH(load_experiment(path, {}), Contains(c.message));
  }
  CHECK_THROWS_WITH(load_experiment(dir.file("missing.ini"), {}),
                    Contains("config file: cannot open '" + dir.file("missing.ini") + "'"));
  CHECK_THROWS_WITH(load_experiment(dir.write("ok.ini", experiment_text()), {"sampling.top_k=-5"}),
                    Contains("--set sampling.top_k"));
  CHECK_THROWS_WITH(
      load_experiment(dir.file("ok.ini"), {"experiment.prompts=" + dir.file("")}),
      Contains("--set experiment.prompts: key 'experiment.prompts': '" + dir.file("") + "' is a folder, not a file"));
  // A sweep value listed twice: refused in an experiment a user wrote (a saved copy still loads).
  const std::string twice = dir.write("twice.ini", experiment_text("top_p = 0.9, 0.5, 0.9\n"));
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("ok.ini"), {})));
  CHECK_THROWS_WITH(check_new_experiment(load_experiment(twice, {})),
                    Contains("twice.ini:17: key 'sampling.top_p': '0.9' is listed twice"));
  // Likewise one number written two ways (two settings of one value), while values that differ are kept.
  CHECK_THROWS_WITH(
      check_new_experiment(load_experiment(dir.file("ok.ini"), {"sampling.temperature=0.8, .8"})),
      Contains("--set sampling.temperature: key 'sampling.temperature': '.8' is listed twice (as '0.8')"));
  CHECK_THROWS_WITH(check_new_experiment(load_experiment(dir.file("ok.ini"), {"draft.num_draft_tokens=2, 02"})),
                    Contains("'02' is listed twice (as '2')"));
  CHECK_NOTHROW(check_new_experiment(load_experiment(dir.file("ok.ini"), {"sampling.temperature=0.8, 0.81"})));
  CHECK_THROWS_WITH(load_experiment(dir.file("ok.ini"), {"experiment.output_dir="}),
                    Contains("--set experiment.output_dir: key 'experiment.output_dir' has no value"));
  // The largest seed is taken whole.
  CHECK(load_experiment(dir.file("ok.ini"), {"experiment.seed=18446744073709551615"}).seed == UINT64_MAX);
}

TEST_CASE("config.resolved.ini reads back as the run it records: every digit, no value cut at a comment",
          "[runner][config]") {
  TempDir dir;
  const std::string exp =
      dir.write("c.ini", "[experiment]\ntarget = bigram:" + kTable + "target-v16.txt\nprompts_from_corpus = " + kTable +
                             "target-v16.txt\ncorpus_tail = 0.1234567\n[draft]\nmethod = ar\n");
  const ExperimentConfig c = load_experiment(exp, {});
  const ExperimentConfig back = load_experiment(dir.write("back.ini", c.resolved_ini()), {});
  CHECK(back.corpus_tail == 0.1234567);  // written with six digits it read back as 0.123457
  CHECK(back.resolved_ini().substr(back.resolved_ini().find('\n')) ==
        c.resolved_ini().substr(c.resolved_ini().find('\n')));
  // A --set value the file would cut at a comment is refused, with the escape a file takes.
  CHECK_THROWS_WITH(load_experiment(exp, {"sampling.regex=a #b"}),
                    Contains("--set sampling.regex: 'a #b' holds '#' after a space") && Contains("write \\#"));
  CHECK_THROWS_WITH(load_experiment(exp, {"sampling.regex=a\t;b"}), Contains("holds ';' after a space"));
  CHECK(load_experiment(exp, {"sampling.regex=a \\#b"}).axes.at("sampling.regex") ==
        std::vector<std::string>{"a \\#b"});
}

TEST_CASE("corpus excerpts start at a line and stay inside the corpus_tail region", "[runner][config]") {
  // 900 lines of "aaaa" then 100 of "bbbb": the last 10% is all b.
  std::string corpus;
  for (int i = 0; i < 1000; ++i) corpus += i < 900 ? "aaaa\n" : "bbbb\n";
  ExperimentConfig c;
  c.prompts_from_corpus = "corpus.txt";
  c.num_prompts = 50;
  c.prompt_length = 4;
  c.seed = 3;
  c.corpus_tail = 0.1;
  for (const std::string& t : corpus_excerpts(corpus, c)) CHECK(t == "bbbb");
  // Control: from the whole corpus, most excerpts are a's.
  c.corpus_tail = 1.0;
  int a = 0;
  for (const std::string& t : corpus_excerpts(corpus, c)) {
    CHECK((t == "aaaa" || t == "bbbb"));
    a += t == "aaaa";
  }
  CHECK(a > 30);
  // No more prompts than the region has line starts (100 here): checked before any is drawn.
  c.corpus_tail = 0.1;
  c.num_prompts = 100;
  CHECK(corpus_excerpts(corpus, c).size() == 100);
  c.num_prompts = 1000000000;
  CHECK_THROWS_WITH(corpus_excerpts(corpus, c),
                    Contains("key 'experiment.num_prompts' = 1000000000") && Contains("has only 100 line starts"));
  c.num_prompts = 50;
  c.corpus_tail = 0.001;  // the last 5 characters
  c.prompt_length = 5;
  CHECK_THROWS_WITH(corpus_excerpts(corpus, c),
                    Contains("key 'experiment.prompt_length' = 5: the corpus_tail region of") &&
                        Contains("(5 characters) is not longer"));
}

TEST_CASE("summary math on synthetic records", "[runner][summary]") {
  // Two repetitions; baseline 100 tokens/s both times; speculation 150 and 250 tokens/s.
  std::vector<RunRecord> records;
  auto make = [](bool baseline, int rep, double tokens, double seconds) {
    RunRecord r;
    r.baseline = baseline;
    r.setting_id = baseline ? "base" : "spec";
    r.baseline_id = "base";
    r.setting = {{"draft.method", baseline ? "ar" : "chain"}, {"sampling.temperature", "0.7"}};
    r.repetition = rep;
    r.metrics.new_tokens = static_cast<int64_t>(tokens);
    r.metrics.wall_seconds = seconds;
    if (baseline) {
      r.metrics.target_calls = static_cast<int64_t>(tokens);
      r.metrics.target_seconds = seconds;
    } else {
      // K = 2: 10 steps, positions reached 10 and 8, accepted 8 and 6 -> alpha = 14 / 18.
      r.metrics.resize(2);
      r.metrics.steps = 10;
      r.metrics.proposed = 20;
      r.metrics.accepted = 14;
      r.metrics.emitted = 24;
      r.metrics.position_reached = {10, 8};
      r.metrics.position_accepted = {8, 6};
      r.metrics.draft_seconds = 10 * 2 * 0.1 * seconds / tokens;  // c = 0.1 of a target call per drafted token
    }
    return r;
  };
  records.push_back(make(true, 0, 100, 1.0));
  records.push_back(make(true, 1, 100, 1.0));
  records.push_back(make(false, 0, 150, 1.0));
  records.push_back(make(false, 1, 250, 1.0));
  const std::vector<SummaryRow> rows = summarize(records);
  REQUIRE(rows.size() == 2);
  const SummaryRow& spec = rows[1];
  CHECK(spec.speedup == Approx(2.0));
  // 95% t interval with 1 degree of freedom: mean +- 12.706 * sd / sqrt(2), sd = 0.7071.
  CHECK(spec.speedup_ci_high - spec.speedup == Approx(12.7062 * 0.70711 / std::sqrt(2.0)).epsilon(1e-4));
  CHECK(spec.alpha == Approx(14.0 / 18.0));
  CHECK(spec.acceptance_rate == Approx(14.0 / 20.0));
  CHECK(spec.tau == Approx(2.4));
  CHECK(spec.per_position_acceptance == std::vector<double>{0.8, 0.75});
  {  // A position no step reached has no acceptance: empty in summary.csv, null in JSON, never 0.
    GenerationMetrics m;
    m.resize(3);
    m.position_reached = {10, 8, 0};
    m.position_accepted = {8, 0, 0};
    const std::vector<double> per = m.per_position_acceptance();
    CHECK(per[0] == 0.8);
    CHECK(per[1] == 0.0);
    CHECK(std::isnan(per[2]));
    nlohmann::json j;
    m.write_json(j);
    CHECK(j["per_position_acceptance"].dump() == "[0.8,0.0,null]");
    SummaryRow row;
    row.per_position_acceptance = per;
    TempDir dir;
    write_summary_csv({row}, dir.file("s.csv"));
    CHECK_THAT(read_text(dir.file("s.csv")), Contains(",0.8;0;,"));
  }
  const double a = 14.0 / 18.0;
  CHECK(spec.predicted_tau == Approx((1 - a * a * a) / (1 - a)));
  // Drafting cost per drafted token over the baseline's cost per target call (1.5 vs 2.5 tokens/s
  // differ per repetition, so compute from the records: draft 0.1*(1/150 and 1/250) per token).
  CHECK(spec.c > 0.0);
  CHECK(spec.predicted_speedup == Approx(predicted_speedup(a, 2, spec.c)));
  CHECK(predicted_speedup(0.8, 4, 0.0) == Approx((1 - std::pow(0.8, 5)) / 0.2));
  CHECK(predicted_speedup(0.5, 1, 1.0) == Approx(0.75));
}

TEST_CASE("summary: a K that moves between steps has no Leviathan prediction; its c is per token drafted",
          "[runner][summary]") {
  // chain_cost_records' chain of K = 4 under the heuristic schedule: 60 tokens drafted in its 25 steps.
  std::vector<RunRecord> records = chain_cost_records();
  RunRecord& spec = records[1];
  spec.setting["draft.num_draft_tokens_schedule"] = "heuristic";
  spec.metrics.proposed = 60;
  spec.metrics.accepted = 45;
  spec.metrics.position_reached = {25, 20, 10, 5};
  spec.metrics.position_accepted = {20, 15, 7, 3};
  const std::vector<SummaryRow> rows = summarize(records);
  REQUIRE(rows.size() == 2);
  CHECK(std::isnan(rows[1].predicted_tau));
  CHECK(std::isnan(rows[1].predicted_speedup));
  // Drafting time / (steps x the baseline's 10 ms decoding call x 2.4 tokens drafted a step).
  CHECK(rows[1].c == Approx(0.05 / (25 * 0.01 * 2.4)));
  CHECK(rows[1].alpha == Approx(0.75));
  TempDir dir;
  write_summary_csv(rows, dir.file("s.csv"));
  CHECK_THAT(read_text(dir.file("s.csv")), Contains("draft.num_draft_tokens_schedule") && Contains(",heuristic,"));
  std::ostringstream table;
  print_summary_table(rows, table);
  CHECK_THAT(table.str(), Contains(" <=4 "));  // the terminal table's K column: at most 4
  // At K = 1 the schedule cannot move K: the prediction stands, and the table shows K as it is.
  spec.setting["draft.num_draft_tokens"] = "1";
  spec.metrics.resize(1);
  spec.metrics.position_reached = {25};
  spec.metrics.position_accepted = {20};
  spec.metrics.proposed = 25;
  spec.metrics.accepted = 20;
  const std::vector<SummaryRow> at_one = summarize(records);
  CHECK_FALSE(std::isnan(at_one[1].predicted_speedup));
  std::ostringstream one;
  print_summary_table(at_one, one);
  CHECK_THAT(one.str(), !Contains("<="));
  // A constant K whose chains stop on the draft's doubt moves K too (at K = 4; a threshold of 0 stops nothing).
  spec.setting["draft.num_draft_tokens"] = "4";
  spec.setting["draft.num_draft_tokens_schedule"] = "constant";
  spec.metrics.resize(4);
  spec.metrics.position_reached = {25, 20, 10, 5};
  spec.metrics.position_accepted = {20, 15, 7, 3};
  spec.metrics.proposed = 60;
  spec.metrics.accepted = 45;
  for (const auto& [threshold, moves] : {std::pair<const char*, bool>{"0.4", true}, {"0", false}}) {
    INFO("confidence_threshold " << threshold);
    spec.setting["draft.confidence_threshold"] = threshold;
    const std::vector<SummaryRow> doubting = summarize(records);
    CHECK(std::isnan(doubting[1].predicted_speedup) == moves);
    std::ostringstream t;
    print_summary_table(doubting, t);
    CHECK((t.str().find(" <=4 ") != std::string::npos) == moves);
  }
}

TEST_CASE("summary: decoding apart from the prompt, verification cost and the cost model", "[runner][summary]") {
  // Baseline: 100 tokens in 1.2 s of which 0.2 s prompt (its first call) and 99 decoding calls of 10 ms.
  // Speculation: 100 tokens in 0.6 s, same 0.2 s prompt; 25 steps of 12 ms target (verify_cost 1.2) and
  // 2 ms drafting (0.2 target calls), tau = 4.
  std::vector<RunRecord> records = chain_cost_records();
  RunRecord& base = records[0];
  const RunRecord& spec = records[1];
  const std::vector<SummaryRow> rows = summarize({base, spec});
  REQUIRE(rows.size() == 2);
  const SummaryRow& s = rows[1];
  CHECK(s.speedup == Approx(1.2 / 0.6));
  CHECK(s.baseline_decode_tokens_per_s == Approx(100.0));
  CHECK(s.decode_tokens_per_s == Approx(250.0));
  CHECK(s.decode_speedup == Approx(2.5));
  CHECK(s.verify_cost == Approx(1.2));
  CHECK(s.c == Approx(0.05));  // 2 ms per step / 4 drafted tokens / 10 ms
  CHECK(s.cost_model_speedup == Approx(4.0 / (0.2 + 1.2)));
  // Records written before the prompt was timed: the prefill stays in the per-call time.
  base.metrics.prompt_seconds = 0;
  const SummaryRow old = summarize({base, spec})[1];
  CHECK(old.verify_cost == Approx(0.012 / (0.99 / 100)));
}

TEST_CASE("summary: paired timing takes speedups within pairs, over prompts, and flags repetitions that drifted",
          "[runner][summary]") {
  // 3 prompts x 3 repetitions. The unpaired baseline runs say 100 tokens/s; the pairs' own baselines say
  // otherwise (the machine was busier): the speedups must come from the pairs alone.
  auto base = [](int rep, int prompt) {
    RunRecord r;
    r.baseline = true;
    r.setting_id = r.baseline_id = "base";
    r.setting = {{"draft.method", "ar"}};
    r.repetition = rep;
    r.prompt_index = prompt;
    r.metrics.new_tokens = 100;
    r.metrics.wall_seconds = 1.0;
    r.metrics.target_calls = 100;
    r.metrics.target_seconds = 1.0;
    return r;
  };
  // Pair: speculation 100 tokens in `spec_s` s (0.1 s prompt), its baseline 100 tokens in `base_s` s (0.1 s).
  auto spec = [](int rep, int prompt, double spec_s, double base_s) {
    RunRecord r;
    r.setting_id = "spec";
    r.baseline_id = "base";
    r.setting = {{"draft.method", "chain"}, {"draft.num_draft_tokens", "2"}};
    r.repetition = rep;
    r.prompt_index = prompt;
    r.metrics.resize(2);
    r.metrics.new_tokens = 100;
    r.metrics.wall_seconds = spec_s;
    r.metrics.prompt_seconds = 0.1;
    r.metrics.steps = 10;
    r.metrics.target_seconds = 0.9;
    r.metrics.draft_seconds = 0.05;
    r.pair.present = true;
    r.pair.new_tokens = 100;
    r.pair.wall_seconds = base_s;
    r.pair.prompt_seconds = 0.1;
    r.pair.load_before = 1.0;
    r.pair.load_after = 3.0;
    return r;
  };
  // Decode ratios (base_s - 0.1) / (spec_s - 0.1): prompt p near 2 + 0.2 p, repetitions within +-1%.
  const double jitter[3][3] = {{0.00, 0.01, -0.01}, {0.01, -0.01, 0.00}, {-0.01, 0.00, 0.01}};
  std::vector<RunRecord> steady;
  for (int rep = 0; rep < 3; ++rep)
    for (int p = 0; p < 3; ++p) steady.push_back(base(rep, p));
  for (int rep = 0; rep < 3; ++rep)
    for (int p = 0; p < 3; ++p) steady.push_back(spec(rep, p, 1.1, 0.1 + 2.0 + 0.2 * p + jitter[rep][p]));
  const SummaryRow s = summarize(steady)[1];
  CHECK(s.pairs == 9);
  CHECK(s.decode_speedup == Approx(2.2));  // the jitter cancels per prompt
  // Student-t over the 3 prompt means {2.0, 2.2, 2.4} (2 degrees of freedom): 4.3027 * 0.2 / sqrt(3).
  CHECK(s.decode_speedup_ci_high - s.decode_speedup == Approx(4.3027 * 0.2 / std::sqrt(3.0)).epsilon(1e-3));
  CHECK(s.speedup == Approx((2.1 + 2.3 + 2.5) / 3 / 1.1));
  CHECK(s.pair_load_average == Approx(2.0));
  CHECK(s.pair_drift == "no");
  // The cost model's unit is each pair's own baseline decoding time per token, (base_s - 0.1) / 100: summed
  // over the 9 records' 10 steps, 0.1 * (9 * 2.0 + 3 * 0.2 * (0 + 1 + 2)) = 1.98 s (the separate baseline
  // runs' 0.01 s per call would give 0.9 s and a verify cost of 9).
  CHECK(s.verify_cost == Approx(9 * 0.9 / 1.98));
  CHECK(s.c == Approx(9 * 0.05 / (1.98 * 2)));
  CHECK(s.cost_model_speedup == Approx(s.tau / ((9 * 0.05 + 9 * 0.9) / 1.98)));
  // The third repetition's speculative runs met a machine 1.5x slower than their baselines did.
  std::vector<RunRecord> drifted = steady;
  for (RunRecord& r : drifted)
    if (!r.baseline && r.repetition == 2) r.metrics.wall_seconds = 0.1 + 1.5;
  CHECK(summarize(drifted)[1].pair_drift == "yes");
  // Decoded in lockstep, the prompts of a repetition shared one batch: the interval is over the 3 batches (the
  // jitter cancels within each; the third's baseline batch ran 0.03 s longer), whose mean ratios are {2.2, 2.2,
  // 2.23}: sd 0.01732, half-width 4.3027 * 0.01732 / sqrt(3), not the prompts' spread; and there is no drift test.
  std::vector<RunRecord> batched = steady;
  for (RunRecord& r : batched) {
    r.lockstep = true;
    if (!r.baseline && r.repetition == 2) r.pair.wall_seconds += 0.03;
  }
  const SummaryRow b = summarize(batched)[1];
  CHECK(b.decode_speedup == Approx(2.21));
  CHECK(b.decode_speedup_ci_high - b.decode_speedup == Approx(4.3027 * 0.017320508 / std::sqrt(3.0)).epsilon(1e-3));
  CHECK(b.pair_drift.empty());
  CHECK(RunRecord::from_json_line(batched[9].to_json_line(), "test").lockstep);
  CHECK_FALSE(RunRecord::from_json_line(steady[9].to_json_line(), "test").lockstep);
  // One prompt: no interval over prompts (NaN bounds, blank in the CSV), no drift test.
  std::vector<RunRecord> single = {base(0, 0), spec(0, 0, 1.1, 2.1)};
  const SummaryRow one = summarize(single)[1];
  CHECK(one.decode_speedup == Approx(2.0));
  CHECK(std::isnan(one.decode_speedup_ci_low));
  CHECK(one.pair_drift.empty());
  // Without pairs the same speculative times are compared with the separate baseline runs.
  for (RunRecord& r : steady) r.pair.present = false;
  const SummaryRow unpaired = summarize(steady)[1];
  CHECK(unpaired.pairs == 0);
  CHECK(unpaired.pair_drift.empty());
  CHECK(unpaired.speedup == Approx(1.0 / 1.1));
  CHECK(unpaired.verify_cost == Approx(0.9 / 10 / 0.01));
}

TEST_CASE("a record's times survive records.jsonl; older records (no prompt time, *_time names) still load",
          "[runner]") {
  RunRecord r;
  r.setting_id = r.baseline_id = "s";
  r.metrics.wall_seconds = 1.5;
  r.metrics.prompt_seconds = 0.25;
  r.metrics.target_seconds = 0.75;
  r.metrics.draft_seconds = 0.125;
  r.metrics.verify_seconds = 0.0625;
  r.metrics.verify_rows_histogram = {0, 0, 3, 5};
  r.metrics.lockstep_rows_histogram = {0, 0, 1, 7};
  r.metrics.device_waits = 11;
  r.metrics.staging_waits = 3;
  r.metrics.growth_waits = 2;
  r.metrics.device_buffer_bytes = 123456;
  r.metrics.step_graph_runs = 40;
  r.metrics.step_graph_replays = 31;
  r.metrics.step_graphs_built = 6;
  r.metrics.step_graphs_evicted = 1;
  const std::string line = r.to_json_line();
  const RunRecord back = RunRecord::from_json_line(line, "records.jsonl:1");
  CHECK(back.metrics.verify_rows_histogram == r.metrics.verify_rows_histogram);
  CHECK(back.metrics.lockstep_rows_histogram == r.metrics.lockstep_rows_histogram);
  CHECK(back.metrics.device_waits == 11);
  CHECK(back.metrics.staging_waits == 3);
  CHECK(back.metrics.growth_waits == 2);
  CHECK(back.metrics.device_buffer_bytes == 123456);
  CHECK(back.metrics.step_graph_runs == 40);
  CHECK(back.metrics.step_graph_replays == 31);
  CHECK(back.metrics.step_graphs_built == 6);
  CHECK(back.metrics.step_graphs_evicted == 1);
  CHECK(back.metrics.wall_seconds == 1.5);
  CHECK(back.metrics.prompt_seconds == 0.25);
  CHECK(back.metrics.target_seconds == 0.75);
  CHECK(back.metrics.draft_seconds == 0.125);
  CHECK(back.metrics.verify_seconds == 0.0625);
  CHECK_FALSE(back.pair.present);
  r.pair.present = true;
  r.pair.baseline_first = true;
  r.pair.wall_seconds = 2.5;
  r.pair.load_before = NAN;
  r.pair.load_after = 0.5;
  const RunRecord paired = RunRecord::from_json_line(r.to_json_line(), "records.jsonl:2");
  CHECK(paired.pair.present);
  CHECK(paired.pair.baseline_first);
  CHECK(paired.pair.wall_seconds == 2.5);
  CHECK(std::isnan(paired.pair.load_before));
  CHECK(paired.pair.load_after == 0.5);
  nlohmann::json j = nlohmann::json::parse(line);
  j.erase("prompt_seconds");
  j.erase("lockstep_rows_histogram");
  j.erase("device_waits");
  j.erase("staging_waits");
  j.erase("growth_waits");
  j.erase("device_buffer_bytes");
  for (const char* key : {"step_graph_runs", "step_graph_replays", "step_graphs_built", "step_graphs_evicted"})
    j.erase(key);
  const RunRecord before = RunRecord::from_json_line(j.dump(), "old.jsonl:1");
  CHECK(before.metrics.prompt_seconds == 0.0);
  CHECK(before.metrics.lockstep_rows_histogram.empty());
  CHECK(before.metrics.device_waits == 0);
  CHECK(before.metrics.staging_waits == 0);
  CHECK(before.metrics.growth_waits == 0);
  CHECK(before.metrics.device_buffer_bytes == 0);
  CHECK(before.metrics.step_graph_runs == 0);
  CHECK(before.metrics.step_graphs_evicted == 0);
  // Records written before the one metrics shape named their times *_time.
  nlohmann::json old = nlohmann::json::parse(line);
  for (const char* name : {"wall", "prompt", "target", "draft", "verify"}) {
    old[std::string(name) + "_time"] = old[std::string(name) + "_seconds"];
    old.erase(std::string(name) + "_seconds");
  }
  const RunRecord older = RunRecord::from_json_line(old.dump(), "old.jsonl:2");
  CHECK(older.metrics.wall_seconds == 1.5);
  CHECK(older.metrics.verify_seconds == 0.0625);
  // The record's metrics are `generate --metrics-json`'s shape: the same keys, with the same values.
  nlohmann::json generated = nlohmann::json::parse(r.metrics.to_json("chain", false));
  for (const auto& [key, value] : generated.items())
    if (key != "method" && key != "lossy") CHECK(nlohmann::json::parse(line).at(key) == value);
}

TEST_CASE("tokens per step of a drafter with i.i.d. acceptance match Leviathan's formula", "[runner][theory]") {
  // Token 15 has logit -30 in every row, so y = argmin p = 15 has p(y) ~ 1e-13 and each position is
  // accepted with probability alpha + (1 - alpha) p(y) = alpha, independently (tests/TESTING.md, synthetic mode).
  constexpr int32_t V = 16;
  std::vector<float> logits(V * V);
  for (int32_t i = 0; i < V * V; ++i) logits[i] = (i % V == V - 1) ? -30.0f : static_cast<float>(philox_gaussian(5, i));
  auto target = std::make_shared<TableModel>(1, V, logits, "table");
  for (int32_t K : {2, 4}) {
    GenerationConfig config;
    config.method = VerifyMethod::chain;
    config.num_draft_tokens = K;
    config.max_new_tokens = 400;
    config.seed = 17;
    auto steps_for = [&](double alpha) {
      const Generator generator(target, SamplingParams{},
                                std::make_shared<SyntheticDrafterFactory>(target, SamplingParams{}, alpha), config);
      GenerationMetrics m;
      std::vector<double> tokens_per_step;
      for (const SequenceOutput& s : generator.generate_many({0}, 0, 100, m))
        for (int32_t accepted : s.accept_lengths) tokens_per_step.push_back(accepted + 1.0);
      double mean = 0, var = 0;
      for (double t : tokens_per_step) mean += t;
      mean /= tokens_per_step.size();
      for (double t : tokens_per_step) var += (t - mean) * (t - mean);
      const double se = std::sqrt(var / (tokens_per_step.size() - 1) / tokens_per_step.size());
      return std::make_pair(mean, se);
    };
    const double predicted = expected_tokens_per_step(0.7, K);
    const auto [mean, se] = steps_for(0.7);
    INFO("K = " << K << ": measured " << mean << " +- " << se << ", predicted " << predicted);
    CHECK(std::fabs(mean - predicted) < 3 * se);
    // The same check tells a different alpha apart.
    const auto [other, other_se] = steps_for(0.6);
    CHECK(std::fabs(other - predicted) > 3 * other_se);
  }
}

TEST_CASE("specula run writes a complete results folder; shards merge into the same run", "[runner][cli]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text("[experiment]\n"));
  // (An empty second [experiment] header is harmless; output_dir is set from the command line.)
  const std::string out = " --set experiment.output_dir=" + dir.file("results") + " --quiet";
  const CliResult full = run_specula("run " + exp + out);
  INFO(full.err);
  REQUIRE(full.exit_code == 0);
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir.file("results") + "/exp")) runs.push_back(e.path());
  REQUIRE(runs.size() == 1);
  const fs::path run = runs[0];
  for (const char* f : {"config.resolved.ini", "env.json", "records.jsonl", "summary.csv"}) CHECK(fs::exists(run / f));
  const nlohmann::json env = nlohmann::json::parse(read_text((run / "env.json").string()));
  for (const char* key : {"cpu_model", "cores", "threads", "blas", "libraries", "build_type", "git_revision",
                          "weight_layout", "huge_pages"})
    CHECK(env.contains(key));
  CHECK(env["huge_pages"] ==
        (std::getenv("SPECULA_HUGE_PAGES") && std::string(std::getenv("SPECULA_HUGE_PAGES")) == "off" ? "off" : "on"));
  const std::vector<RunRecord> records = read_records((run / "records.jsonl").string());
  CHECK(records.size() == 14 * 4 * 2);  // (2 baselines + 12 speculative settings) x prompts x repetitions
  const std::string summary = read_text((run / "summary.csv").string());
  for (const char* column : {"acceptance_rate", "expected_acceptance", "tau", "tokens_per_s", "speedup",
                             "speedup_ci_low", "predicted_speedup", "measured_over_predicted", "greedy_lossless"})
    CHECK_THAT(summary, Contains(column));
  // At temperature 0 every speculative output equals the baseline's, and the summary says so.
  CHECK_THAT(summary, Contains(",yes,"));
  CHECK_THAT(summary, !Contains(",no,0,"));  // greedy_lossless = no, then q_zero_errors
  // Paired timing: every speculative record carries the baseline run beside it, in alternating order.
  int64_t paired = 0, baseline_first = 0;
  for (const RunRecord& r : records) {
    CHECK(r.pair.present == !r.baseline);
    if (!r.pair.present) continue;
    ++paired;
    baseline_first += r.pair.baseline_first;
    CHECK(r.pair.new_tokens == 12);
    CHECK(r.pair.wall_seconds > 0);
    CHECK(r.pair.baseline_first == ((r.repetition + r.prompt_index) % 2 == 1));
  }
  CHECK(paired == 12 * 4 * 2);
  CHECK(baseline_first * 2 == paired);
  CHECK_THAT(summary, Contains("pairs,pair_load_average,pair_drift"));
  // Plots: non-empty PNGs.
  for (const char* plot : {"acceptance_vs_k", "speedup_vs_k", "per_position_acceptance", "accepted_length_hist",
                           "speedup_vs_temperature", "speedup_vs_tau"}) {
    const fs::path png = run / "plots" / (std::string(plot) + ".png");
    CHECK(fs::exists(png));
    CHECK((fs::exists(png) && fs::file_size(png) > 1000));
  }

  // Two shards, merged, give the same records (outputs are keyed by sequence, not by batch).
  fs::remove_all(dir.file("results"));
  REQUIRE(run_specula("run " + exp + out + " --shard 1/2").exit_code == 0);
  REQUIRE(run_specula("run " + exp + out + " --shard 2/2").exit_code == 0);
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(dir.file("results") + "/exp")) shards.push_back(e.path().string());
  REQUIRE(shards.size() == 2);
  // A shard is plotted after the merge, not alone: also when it is resumed (`run --resume` of a shard's folder,
  // as a requeued Slurm task does).
  std::ofstream(shards[1] + "/status") << "interrupted (SIGTERM)\n";
  REQUIRE(run_specula("run --resume " + shards[1]).exit_code == 0);
  for (const std::string& shard : shards) CHECK_FALSE(fs::exists(shard + "/plots"));
  REQUIRE(run_specula("merge " + shards[0] + " " + shards[1] + " --output " + dir.file("merged")).exit_code == 0);
  auto key_of = [](const RunRecord& r) {
    std::string k = r.setting_id + "#" + std::to_string(r.prompt_index) + "#" + std::to_string(r.repetition) + "#";
    for (Token t : r.tokens) k += std::to_string(t) + ",";
    for (int32_t a : r.accept_lengths) k += std::to_string(a) + ";";
    return k;
  };
  std::multiset<std::string> one, merged;
  for (const RunRecord& r : records) one.insert(key_of(r));
  for (const RunRecord& r : read_records(dir.file("merged") + "/records.jsonl")) merged.insert(key_of(r));
  CHECK(one == merged);
  CHECK(fs::exists(dir.file("merged") + "/summary.csv"));
  CHECK(read_text(dir.file("merged") + "/inputs.json") == read_text(shards[0] + "/inputs.json"));
  // Shards that decoded different prompts are not slices of one run.
  std::ofstream(shards[1] + "/inputs.json") << "{\"prompts\":[[1]],\"models\":{}}\n";
  const CliResult mixed = run_specula("merge " + shards[0] + " " + shards[1] + " --output " + dir.file("mixed"));
  CHECK(mixed.exit_code == 1);
  CHECK_THAT(mixed.err, Contains(shards[1] + "/inputs.json differs from " + shards[0] + "'s"));
}

namespace {

std::vector<std::string> run_folders(const std::string& root) {
  std::vector<std::string> out;
  if (fs::exists(root))
    for (const auto& e : fs::directory_iterator(root)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("a run that fails midway summarises the records written before the failure", "[runner][cli]") {
  TempDir dir;
  std::string text = experiment_text();
  text.erase(text.find("tree = 2,1\n"), std::string("tree = 2,1\n").size());
  const std::string exp = dir.write("exp.ini", text);
  // An n-gram model whose header is sound (its vocabulary is checked before the run) and whose body is not: it fails
  // when its drafter loads, after the bigram drafter's settings have run.
  const std::string bad = dir.write("bad.txt", "specula-ngram 1\norder 2\nvocab 16\nnot a record\n");
  const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") + " --no-plots" +
                                  " --set draft.method=chain --set 'draft.drafter=bigram:" + kTable +
                                  "draft-v16.txt | ngram:" + bad + "'");
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("bad.txt:4") && Contains("summary.csv summarises the") &&
                        Contains("--allow-incomplete` draws them"));
  const std::vector<std::string> runs = run_folders(dir.file("results") + "/exp");
  REQUIRE(runs.size() == 1);
  CHECK_THAT(read_text(runs[0] + "/status"), StartsWith("failed: ") && Contains("bad.txt:4"));
  // The baselines and the bigram drafter's four settings (2 K x 2 temperatures), whole.
  const std::vector<RunRecord> records = read_records(runs[0] + "/records.jsonl");
  CHECK(records.size() == 6 * 4 * 2);
  const std::string summary = read_text(runs[0] + "/summary.csv");
  CHECK(std::count(summary.begin(), summary.end(), '\n') == 1 + 6);
  CHECK_THAT(summary, !Contains("ngram:"));
}

TEST_CASE("a min_tokens that no stop token lets bind is said once per value", "[runner][cli]") {
  TempDir dir;
  const auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string exp = dir.write("exp.ini", experiment_text("min_tokens = 2, 3\n"));
  const std::string common = "run " + exp + " --no-plots --set experiment.repetitions=1 --set draft.method=chain" +
                             " --set draft.num_draft_tokens=2 --set sampling.temperature=0.8";
  const CliResult r = run_specula(common + " --set experiment.output_dir=" + dir.file("unread"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  // Each value once, though every setting (2 drafters and the baseline, per value) has it.
  const std::string said =
      "min_tokens = 2 is left unread: no stop token is set (none is given, and the target names "
      "no end-of-sequence token)";
  CHECK(count(r.err, said) == 1);
  CHECK(count(r.err, "min_tokens = 3 is left unread") == 1);
  const CliResult stops =
      run_specula(common + " --set experiment.output_dir=" + dir.file("read") + " --set sampling.stop_tokens=3");
  REQUIRE(stops.exit_code == 0);
  CHECK_THAT(stops.err, !Contains("left unread"));
}

TEST_CASE("results folders: one per run, even started together; status says how the run ended", "[runner][cli]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const std::string out = " --set experiment.output_dir=" + dir.file("results") + " --quiet --no-plots";
  // Two runs at once: the same second, so the same <time>-<sha> name; each must get a folder of its own.
  const std::string both = std::string(SPECULA_BINARY) + " run " + exp + out + " >/dev/null 2>&1 & " + SPECULA_BINARY +
                           " run " + exp + out + " >/dev/null 2>&1; wait";
  REQUIRE(std::system(("bash -c '" + both + "'").c_str()) == 0);
  const std::vector<std::string> runs = run_folders(dir.file("results") + "/exp");
  REQUIRE(runs.size() == 2);
  for (const std::string& run : runs) {
    CHECK(read_text(run + "/status") == "complete\n");
    CHECK(read_records(run + "/records.jsonl").size() == 14 * 4 * 2);  // every line whole, none interleaved
  }

  SECTION("a folder that a live run is still writing is not resumed; once that run is gone, it is") {
    fs::remove_all(dir.file("results"));
    const std::string slow =
        std::string(SPECULA_BINARY) + " run " + exp + out + " --set experiment.repetitions=400 >/dev/null 2>&1";
    const std::string records_glob = dir.file("results") + "/exp/*/records.jsonl";
    const std::string pid_file = dir.file("pid");
    // Start the run, wait for its first record, and leave it running.
    REQUIRE(std::system(("bash -c '" + slow + " & echo $! > " + pid_file + "; for i in $(seq 600); do [ -s \"$(ls " +
                         records_glob + " 2>/dev/null | head -1)\" ] && break; sleep 0.05; done'")
                            .c_str()) == 0);
    const std::vector<std::string> live = run_folders(dir.file("results") + "/exp");
    REQUIRE(live.size() == 1);
    const std::string pid = read_text(pid_file).substr(0, read_text(pid_file).find('\n'));
    CHECK_THAT(read_text(live[0] + "/status"), StartsWith("running (pid " + pid + " on "));
    const CliResult refused = run_specula("run --resume " + live[0] + " --quiet --no-plots");
    CHECK(std::system(("kill -INT " + pid + "; while kill -0 " + pid + " 2>/dev/null; do sleep 0.05; done").c_str()) ==
          0);
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.err, Contains("still being written by process " + pid));
    CHECK(read_text(live[0] + "/status") == "interrupted (SIGINT)\n");
    // A status left at running by a process that is gone (killed outright) does not block the resume.
    std::ofstream(live[0] + "/status") << "running (pid " << pid << " on " << hostname() << ")\n";
    const CliResult resumed = run_specula("run --resume " + live[0] + " --quiet --no-plots --set experiment.seed=3");
    // (--set stops the resume right after the liveness check; the whole resume is tested in the next section.)
    CHECK_THAT(resumed.err, Contains("--set: a resumed run continues as it was configured; give no overrides"));
    CHECK_THAT(resumed.err, !Contains("still being written"));
    // Another host's process cannot be checked from here: resumed (a dead node leaves such a status), with a warning
    // that --quiet does not hide.
    std::ofstream(live[0] + "/status") << "running (pid 4242 on node-elsewhere-" << hostname() << ")\n";
    const CliResult elsewhere = run_specula("run --resume " + live[0] + " --quiet --no-plots --set experiment.seed=3");
    CHECK_THAT(elsewhere.err, Contains("specula: warning: " + live[0] +
                                       "'s status says it is running as process 4242 on node-elsewhere-") &&
                                  Contains("if that process is alive, both will write this folder"));
  }

  SECTION("SIGHUP stops the run as SIGTERM does; a reader gone from its stderr does not (twice: test_stop_signals)") {
    const std::vector<std::pair<std::string, int>> cases = {{"kill -HUP $pid", 129}};
    for (const auto& [kill_command, code] : cases) {
      INFO(kill_command);
      fs::remove_all(dir.file("results"));
      const std::string slow =
          std::string(SPECULA_BINARY) + " run " + exp + out + " --set experiment.repetitions=400 >/dev/null 2>&1";
      const std::string records_glob = dir.file("results") + "/exp/*/records.jsonl";
      const int status =
          std::system(("bash -c '" + slow + " & pid=$!; for i in $(seq 600); do " + "[ -s \"$(ls " + records_glob +
                       " 2>/dev/null | head -1)\" ] && break; sleep 0.05; done; " + kill_command + "; wait $pid'")
                          .c_str());
      CHECK(WEXITSTATUS(status) == code);
      const std::vector<std::string> stopped = run_folders(dir.file("results") + "/exp");
      REQUIRE(stopped.size() == 1);
      CHECK(read_text(stopped[0] + "/status") == (code == 130 ? "interrupted (SIGINT)\n" : "interrupted (SIGHUP)\n"));
      CHECK(fs::exists(stopped[0] + "/summary.csv"));
    }
    // Its progress read by a pipe whose reader leaves after one byte: the writes fail, the run goes on to its end.
    fs::remove_all(dir.file("results"));
    const std::string piped = std::string(SPECULA_BINARY) + " run " + exp +
                              " --set experiment.output_dir=" + dir.file("results") +
                              " --no-plots --set experiment.repetitions=20 2>&1 >/dev/null | " +
                              "head -c 1 >/dev/null; exit ${PIPESTATUS[0]}";
    CHECK(WEXITSTATUS(std::system(("bash -c '" + piped + "'").c_str())) == 0);
    const std::vector<std::string> whole = run_folders(dir.file("results") + "/exp");
    REQUIRE(whole.size() == 1);
    CHECK(read_text(whole[0] + "/status") == "complete\n");
  }

  SECTION("SIGINT: the record in progress is finished, a summary written, the folder marked, exit 130; --resume") {
    fs::remove_all(dir.file("results"));
    const std::string slow = std::string(SPECULA_BINARY) + " run " + exp + out +
                             " --set experiment.repetitions=400 >/dev/null 2>" + dir.file("err.txt");
    // The signal is sent once the run has written a record (so its handlers are in place).
    const std::string records_glob = dir.file("results") + "/exp/*/records.jsonl";
    const int status =
        std::system(("bash -c '" + slow + " & pid=$!; for i in $(seq 600); do " + "[ -s \"$(ls " + records_glob +
                     " 2>/dev/null | head -1)\" ] && break; sleep 0.05; done; " + "kill -INT $pid; wait $pid'")
                        .c_str());
    CHECK(WEXITSTATUS(status) == 130);
    const std::vector<std::string> interrupted = run_folders(dir.file("results") + "/exp");
    REQUIRE(interrupted.size() == 1);
    const std::string run = interrupted[0];
    CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");
    const std::vector<RunRecord> records = read_records(run + "/records.jsonl");
    CHECK(!records.empty());
    CHECK(records.size() < 14 * 4 * 400);
    CHECK(fs::exists(run + "/summary.csv"));
    CHECK_THAT(read_text(dir.file("err.txt")), Contains("interrupted (SIGINT)"));
    CHECK_THAT(read_text(dir.file("err.txt")), Contains(" of 1600 records)"));  // the setting in progress, in part
    // A process killed in the middle of a write leaves part of a line: resuming cuts it.
    std::ofstream(run + "/records.jsonl", std::ios::app) << "{\"setting_id\": \"cut";
    const CliResult resumed = run_specula("run --resume " + run + " --quiet --no-plots");
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    CHECK(read_text(run + "/status") == "complete\n");
    // The records of an uninterrupted run with the same configuration: the same tokens and acceptances.
    REQUIRE(run_specula("run " + exp + " --quiet --no-plots --set experiment.repetitions=400" +
                        " --set experiment.output_dir=" + dir.file("whole"))
                .exit_code == 0);
    auto keys = [](const std::string& folder) {
      std::multiset<std::string> k;
      for (const RunRecord& r : read_records(folder + "/records.jsonl")) {
        std::string key =
            r.setting_id + "#" + std::to_string(r.prompt_index) + "#" + std::to_string(r.repetition) + "#";
        for (Token t : r.tokens) key += std::to_string(t) + ",";
        for (int32_t a : r.accept_lengths) key += std::to_string(a) + ";";
        k.insert(key);
      }
      return k;
    };
    CHECK(keys(run) == keys(run_folders(dir.file("whole") + "/exp").at(0)));
    CHECK_THAT(run_specula("run --resume " + run).err, Contains("nothing to resume"));
  }
  SECTION("a run that fails after its folder exists is marked failed") {
    fs::remove_all(dir.file("results"));
    // The drafter is loaded after the baseline has run: the folder holds records by then. (A missing file, or a
    // header of another vocabulary, is refused before the folder is made; a damaged body is found only when it is
    // read.)
    const std::string damaged = dir.write("damaged.ngram", "specula-ngram 1\norder 2\nvocab 16\nngrams 1 x\n");
    const CliResult r = run_specula("run " + exp + out + " --set 'draft.drafter=ngram:" + damaged + "'");
    CHECK(r.exit_code == 1);
    const std::vector<std::string> failed = run_folders(dir.file("results") + "/exp");
    REQUIRE(failed.size() == 1);
    CHECK_THAT(read_text(failed[0] + "/status"), Contains("failed: ") && Contains("damaged.ngram"));
  }
}

namespace {

// A V x V bigram table (the bigram: format) of a fixed pseudo-random pattern; tables of other phases are far apart.
std::string write_bigram_table(const TempDir& dir, const std::string& name, int32_t vocab, double phase) {
  std::ostringstream table;
  table.precision(4);
  for (int32_t i = 0; i < vocab; ++i)
    for (int32_t j = 0; j < vocab; ++j)
      table << 3.0 * std::sin(12.9898 * i + 78.233 * j + phase) << (j + 1 == vocab ? "\n" : " ");
  return dir.write(name, table.str());
}

// A chain experiment (K = 3) of a target and a draft table, `name`.ini in `dir`, its results under dir/results;
// `experiment_keys` are the rest of [experiment] (prompts, lengths, repetitions, ...), each line ending in \n.
std::string table_chain_experiment(const TempDir& dir, const std::string& name, const std::string& target,
                                   const std::string& draft, const std::string& experiment_keys) {
  return dir.write(name + ".ini", "[experiment]\ntarget = bigram:" + target + "\n" + experiment_keys +
                                      "output_dir = " + dir.file("results") + "\n\n[draft]\ndrafter = bigram:" + draft +
                                      "\nmethod = chain\nnum_draft_tokens = 3\n");
}

const std::string kTablePrompts =
    std::string("prompts = ") + SPECULA_SOURCE_DIR + "/experiments/prompts/table-prompts.txt\n";

}  // namespace

TEST_CASE("a run killed by a second signal mid-record says so, and --resume finishes it", "[long][runner][cli]") {
  TempDir dir;
  // One prompt: the baseline's record comes first and takes 3-5 s; the speculative record after it takes 12 s or more
  // on the development VMs (a vocabulary of 512, whose rows cost what the tables of 16 do not, and a draft table far
  // from the target's, whose tokens are seldom accepted), so that both signals, 2.1 s apart, land while it decodes even
  // on a machine several times faster.
  const std::string exp = table_chain_experiment(
      dir, "killed", write_bigram_table(dir, "target.txt", 512, 0.0), write_bigram_table(dir, "draft.txt", 512, 1.0),
      "prompts = " + dir.write("prompt.txt", "0,3\n") + "\nmax_new_tokens = 400000\nrepetitions = 1\nseed = 3\n");
  const std::string records_glob = dir.file("results") + "/killed/*/records.jsonl";
  // The first signal once the baseline's record is written; the second 2.1 s later, past the clock's whole second
  // within which a repeat is the same request.
  const int status =
      std::system(("bash -c '" + std::string(SPECULA_BINARY) + " run " + exp + " --quiet --no-plots >/dev/null 2>" +
                   dir.file("err") + " & pid=$!; for i in $(seq 1200); do [ -s \"$(ls " + records_glob +
                   " 2>/dev/null | head -1)\" ] && break; sleep 0.05; done; kill -INT $pid; sleep 2.1; "
                   "kill -INT $pid; wait $pid'")
                      .c_str());
  CHECK(WEXITSTATUS(status) == 130);  // killed by SIGINT, as the shell reports it
  const std::vector<std::string> runs = run_folders(dir.file("results") + "/killed");
  REQUIRE(runs.size() == 1);
  const std::string run = runs[0];
  CHECK(read_text(run + "/status") ==
        "killed (a second SIGINT): the record in progress and the summary were not written; `specula run --resume " +
            run + "` finishes the run\n");
  const std::vector<RunRecord> before = read_records(run + "/records.jsonl");
  REQUIRE(before.size() == 1);  // the baseline's, whole; the speculative one was cut off before it was written
  CHECK(before[0].baseline);
  CHECK_FALSE(fs::exists(run + "/summary.csv"));
  const CliResult resumed = run_specula("run --resume " + run + " --quiet --no-plots");
  INFO(resumed.err);
  CHECK(resumed.exit_code == 0);
  CHECK(read_text(run + "/status") == "complete\n");
  const std::vector<RunRecord> after = read_records(run + "/records.jsonl");
  REQUIRE(after.size() == 2);
  CHECK(after[0].tokens == before[0].tokens);
  CHECK_FALSE(after[1].baseline);
  CHECK(static_cast<int64_t>(after[1].tokens.size()) == 400000);
  CHECK(fs::exists(run + "/summary.csv"));
}

TEST_CASE("a script running `specula run` stops with it at Ctrl-C: the run ends by the signal after its cleanup",
          "[runner][cli]") {
  TempDir dir;
  const std::string exp = table_chain_experiment(dir, "ctrl-c", kTable + "target-v16.txt", kTable + "draft-v16.txt",
                                                 kTablePrompts + "max_new_tokens = 64\nrepetitions = 4000\nseed = 3\n");
  // A script in its own process group, as a terminal's foreground job: Ctrl-C reaches the script and the run. bash ends
  // the script only where its child died of SIGINT; a child that exits 130 is taken to have handled it.
  const std::string script = std::string(SPECULA_BINARY) + " run " + exp + " --quiet --no-plots >/dev/null 2>" +
                             dir.file("err") + "; echo went on >" + dir.file("after");
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    execl("/bin/bash", "bash", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::string run;
  while (run.empty() && std::chrono::steady_clock::now() < deadline) {
    for (const std::string& folder : run_folders(dir.file("results") + "/ctrl-c"))
      if (fs::exists(folder + "/records.jsonl") && fs::file_size(folder + "/records.jsonl") > 0) run = folder;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE_FALSE(run.empty());
  kill(-pid, SIGINT);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) kill(-pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(WIFSIGNALED(status));
  CHECK((WIFSIGNALED(status) ? WTERMSIG(status) : 0) == SIGINT);
  CHECK_FALSE(fs::exists(dir.file("after")));
  CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");
  CHECK_THAT(read_text(dir.file("err")),
             Contains("run interrupted (SIGINT): " + run + " holds the records written so far"));
}

TEST_CASE("an interrupted lockstep run writes each decoded batch whole", "[runner][cli]") {
  TempDir dir;
  // Four prompts a batch, long enough that the interrupt lands while a batch decodes.
  const std::string exp =
      table_chain_experiment(dir, "ls", kTable + "target-v16.txt", kTable + "draft-v16.txt",
                             kTablePrompts + "max_new_tokens = 300000\nrepetitions = 3\nseed = 3\nlockstep = true\n");
  REQUIRE(std::system(("sh -c '" + std::string(SPECULA_BINARY) + " run " + exp + " --quiet --no-plots >" +
                       dir.file("out") + " 2>&1 & echo $! >" + dir.file("pid") + "'")
                          .c_str()) == 0);
  const long pid = std::stol(read_text(dir.file("pid")));
  // Once the first batch is written, the next one is decoding: interrupt it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::string run;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::vector<std::string> folders = run_folders(dir.file("results") + "/ls");
    if (!folders.empty() && fs::exists(folders[0] + "/records.jsonl") &&
        fs::file_size(folders[0] + "/records.jsonl") > 0) {
      run = folders[0];
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE_FALSE(run.empty());
  kill(static_cast<pid_t>(pid), SIGINT);
  while (std::chrono::steady_clock::now() < deadline && kill(static_cast<pid_t>(pid), 0) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_THAT(read_text(run + "/status"), Contains("interrupted (SIGINT)"));
  std::map<std::pair<std::string, int>, int> batch_records;
  for (const RunRecord& r : read_records(run + "/records.jsonl")) ++batch_records[{r.setting_id, r.repetition}];
  REQUIRE(batch_records.size() < 6);  // interrupted before the end
  for (const auto& [batch, records] : batch_records) {
    INFO(batch.first << " repetition " << batch.second);
    CHECK(records == 4);
  }
}

TEST_CASE("merge refuses shards that are not the slices of one complete run", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const std::string out = " --set experiment.output_dir=" + dir.file("results") + " --quiet";
  REQUIRE(run_specula("run " + exp + out + " --shard 1/2").exit_code == 0);
  // The same file spelled another way (as another working directory would): one run's slices all the same.
  REQUIRE(run_specula("run " + dir.file("./exp.ini") + out + " --shard 2/2").exit_code == 0);
  std::vector<std::string> shards = run_folders(dir.file("results") + "/exp");
  REQUIRE(shards.size() == 2);
  const std::string merged = " --output " + dir.file("merged");
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {shards[0] + " " + shards[0] + merged, "given twice"},
      {shards[0] + merged, "merge: shard 2 of 2 is missing"},
      {shards[0] + " " + shards[0] + " " + shards[1] + merged, "given twice"},
      {shards[0] + " " + shards[1] + " --output " + shards[1], "is one of the shards"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const CliResult r = run_specula("merge " + c.args);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(c.message));
  }
  CHECK(read_records(shards[1] + "/records.jsonl").size() > 0);  // the shard refused as output is intact
  // Another run's results folder as the output: refused, its records untouched.
  fs::copy(shards[0], dir.file("victim"));
  const std::string victim = read_text(dir.file("victim") + "/records.jsonl");
  const CliResult over = run_specula("merge " + shards[0] + " " + shards[1] + " --output " + dir.file("victim"));
  CHECK(over.exit_code == 1);
  CHECK_THAT(over.err, Contains("already holds a results folder (records.jsonl); give a new folder"));
  CHECK(read_text(dir.file("victim") + "/records.jsonl") == victim);
  // More shards than settings: a shard with none still runs (merge counts its folder), and says so.
  const CliResult empty =
      run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("many") + " --shard 50/50 --no-plots");
  CHECK(empty.exit_code == 0);
  CHECK_THAT(empty.err, Contains("shard 50/50 holds no setting: the sweep has ") && Contains("fewer than its shards"));
  // A shard of a different run (another seed).
  REQUIRE(run_specula("run " + exp + out + " --shard 2/2 --set experiment.seed=7").exit_code == 0);
  const std::vector<std::string> all = run_folders(dir.file("results") + "/exp");
  REQUIRE(all.size() == 3);
  std::string other;
  for (const std::string& s : all)
    if (s != shards[0] && s != shards[1]) other = s;
  CHECK_THAT(run_specula("merge " + shards[0] + " " + other + merged).err,
             Contains("differs") && Contains("(first at: 'seed = 7' where the other has 'seed = 3')"));
  // An interrupted shard: refused, or merged with --allow-incomplete and marked.
  std::ofstream(shards[1] + "/status") << "interrupted (SIGTERM)\n";
  std::ofstream(shards[1] + "/records.jsonl", std::ios::app) << "{\"setting_id\": \"cut short";  // killed mid-write
  CHECK_THAT(run_specula("merge " + shards[0] + " " + shards[1] + merged).err, Contains("not a complete run"));
  REQUIRE(run_specula("merge " + shards[0] + " " + shards[1] + merged + " --allow-incomplete").exit_code == 0);
  CHECK_THAT(read_text(dir.file("merged") + "/status"), Contains("incomplete"));
}

TEST_CASE("run checks its output folder before the target loads", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const std::string blocker = dir.write("blocker", "a file, not a folder");
  const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + blocker +
                                  "/results --set experiment.target=transformer:" + dir.file("no-model") + " --quiet");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("--set experiment.output_dir: key 'experiment.output_dir': cannot create '" + blocker +
                             "/results/exp'") &&
                        Contains("is not a folder"));
}

TEST_CASE("run reads every drafter's spec before its first record", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  for (const std::string& bad : std::vector<std::string>{
           "synthetic:alpha=2", "prompt-lookup:max_n=0", "prompt-lookup:colour=3", "ngram:", "frobnicate:x",
           "ngram:" + dir.file(""), "eagle:" + dir.file("nowhere"), "transformer:" + dir.file("nowhere"),
           "bigram:" + dir.file("nowhere.txt"), "bigram:" + dir.file(""), "hf:" + exp}) {
    INFO(bad);
    const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") +
                                    " --set 'draft.drafter=prompt-lookup | " + bad + "' --quiet");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("--set draft.drafter: key 'draft.drafter' = '" + bad + "'"));
    CHECK_FALSE(fs::exists(dir.file("results")));  // no folder, so no record written before the refusal
  }
  // The control: good specs run.
  CHECK(run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") +
                    " --set 'draft.drafter=prompt-lookup:max_n=3 | synthetic:alpha=0.5' --quiet --no-plots")
            .exit_code == 0);
  // A value listed twice is refused in the experiment, before any folder...
  const CliResult twice = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("twice") +
                                      " --set sampling.temperature=0.5,0.5 --quiet");
  CHECK(twice.exit_code == 1);
  CHECK_THAT(twice.err, Contains("--set sampling.temperature: key 'sampling.temperature': '0.5' is listed twice"));
  CHECK_FALSE(fs::exists(dir.file("twice")));
  // ...but a saved run's own copy written before these rules (a [beam] section no setting uses) still plots.
  const std::string run = run_folders(dir.file("results") + "/exp").at(0);
  std::ofstream(run + "/config.resolved.ini", std::ios::app) << "\n[beam]\nwidth = 2\n";
  const CliResult plotted = run_specula("plot " + run + " --quiet");
  INFO(plotted.err);
  CHECK(plotted.exit_code == 0);
}

TEST_CASE("a run's size is bounded before any work: its grid of settings, and its records against memory and disk",
          "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const std::string out = " --set experiment.output_dir=" + dir.file("results") + " --quiet";
  // 2^31 repetitions: terabytes of records, refused by the key that asks for them.
  const CliResult many = run_specula("run " + exp + out + " --set experiment.repetitions=2147483647");
  CHECK(many.exit_code == 1);
  CHECK_THAT(many.err, Contains("--set experiment.repetitions: key 'experiment.repetitions' = 2147483647") &&
                           Contains("x 4 prompts x 2147483647 repetitions") && Contains("would not fit in"));
  // A grid of 100 top_k x 100 top_p x 5 min_p beside the file's own axes: refused before it is built, naming them.
  std::string top_k, top_p;
  for (int i = 1; i <= 100; ++i) top_k += (i > 1 ? "," : "") + std::to_string(i);
  for (int i = 1; i <= 100; ++i) top_p += (i > 1 ? "," : "") + std::to_string(i / 100.0);
  const CliResult grid = run_specula("run " + exp + out + " --set sampling.top_k=" + top_k +
                                     " --set sampling.top_p=" + top_p + " --set sampling.min_p=0,0.1,0.2,0.3,0.4");
  CHECK(grid.exit_code == 1);
  CHECK_THAT(grid.err, Contains("combinations of values") && Contains("sampling.top_k (100) x sampling.top_p (100)") &&
                           Contains("more than 65536"));
  CHECK_FALSE(fs::exists(dir.file("results")));
}

TEST_CASE("a missing prompts file is refused with its key before the target loads", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  // The target does not exist either: the prompts are found missing first, so no model was read.
  const CliResult r = run_specula("run " + exp + " --set experiment.prompts=" + dir.file("nowhere.txt") +
                                  " --set experiment.target=transformer:" + dir.file("no-model") + " --quiet");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("--set experiment.prompts: key 'experiment.prompts': cannot open '" +
                             dir.file("nowhere.txt") + "'"));
}

TEST_CASE("a file's sampled checksum: the whole file up to a size, else evenly spaced blocks with the first and last",
          "[runner]") {
  TempDir dir;
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  const std::string path = dir.write("f.bin", bytes);
  CHECK(file_sampled_checksum(path, 100000, 100) == file_checksum(path));  // up to the size: whole
  const FileChecksum sampled = file_sampled_checksum(path, 1000, 100);
  CHECK(sampled.bytes == 100000);
  // The CRC of the 64 blocks of 100 bytes at offsets i * (100000 - 100) / 63, computed over a file holding just those.
  std::string blocks;
  for (int i = 0; i < kSampledBlocks; ++i) blocks += bytes.substr((100000 - 100) / 63 * i, 100);
  blocks.replace(blocks.size() - 100, 100, bytes.substr(100000 - 100));  // the last block ends at the file's end
  CHECK(sampled.crc32 == file_checksum(dir.write("j.bin", blocks)).crc32);
  const auto changed_at = [&](size_t i) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ 1);
    return file_sampled_checksum(dir.write("c.bin", b), 1000, 100).crc32;
  };
  CHECK(changed_at(1000) == sampled.crc32);  // between the first block and the second: not read
  for (size_t i : {size_t{0}, size_t{99}, size_t{(100000 - 100) / 63 * 30 + 50}, size_t{99999}}) {
    INFO(i);
    CHECK(changed_at(i) != sampled.crc32);
  }
}

TEST_CASE("a draft length past the cap is refused before the target loads", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const CliResult r = run_specula(
      "run " + exp + " --set draft.num_draft_tokens=2,300 --set experiment.target=transformer:" + dir.file("no-model") +
      " --quiet");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("key 'draft.num_draft_tokens': 300 must be <= 256"));
}

TEST_CASE("resume: a prompts file without num_prompts keeps every prompt; changed inputs are refused",
          "[runner][cli]") {
  TempDir dir;
  // Six prompts, more than num_prompts' default, which applies only to a corpus.
  const std::string prompts = dir.write("prompts.txt", "0,3\n5\n7,7,2\n12,1\n3\n9,9\n");
  const std::string draft = dir.file("draft-v16.txt");
  fs::copy_file(kTable + "draft-v16.txt", draft);
  const std::string exp = dir.write(
      "exp.ini", "[experiment]\ntarget = bigram:" + kTable + "target-v16.txt\nprompts = " + prompts +
                     "\nmax_new_tokens = 12\nrepetitions = 2\nseed = 3\noutput_dir = " + dir.file("results") +
                     "\n[draft]\ndrafter = bigram:" + draft + "\nmethod = chain\n[sampling]\ntemperature = 0.8\n");
  REQUIRE(run_specula("run " + exp + " --quiet --no-plots").exit_code == 0);
  const std::string run = run_folders(dir.file("results") + "/exp").at(0);
  const std::string whole = read_text(run + "/records.jsonl");
  REQUIRE(read_records(run + "/records.jsonl").size() == 2 * 6 * 2);  // baseline and chain, 6 prompts, 2 repetitions
  // The run as a kill would leave it: its first records, and the status a signal writes.
  const auto cut = [&] {
    std::ofstream(run + "/records.jsonl") << whole.substr(0, whole.find('\n', whole.size() / 3) + 1);
    std::ofstream(run + "/status") << "interrupted (SIGINT)\n";
  };
  cut();
  const CliResult resumed = run_specula("run --resume " + run + " --quiet --no-plots");
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  CHECK(read_text(run + "/status") == "complete\n");
  const auto lines = [](const std::string& text) {
    std::multiset<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      out.insert(j.at("setting_id").dump() + j.at("prompt_index").dump() + j.at("repetition").dump() +
                 j.at("tokens").dump());
    }
    return out;
  };
  CHECK(lines(read_text(run + "/records.jsonl")) == lines(whole));

  SECTION("a folder begun by an earlier version: no inputs.json, and num_prompts = 4 written for the prompts file") {
    cut();
    fs::remove(run + "/inputs.json");
    const std::string resolved = read_text(run + "/config.resolved.ini");
    const size_t after_prompts = resolved.find('\n', resolved.find("\nprompts = ")) + 1;
    std::ofstream(run + "/config.resolved.ini", std::ios::trunc)
        << resolved.substr(0, after_prompts) << "num_prompts = 4\n"
        << resolved.substr(after_prompts);
    const CliResult refused = run_specula("run --resume " + run + " --quiet --no-plots");
    CHECK(refused.exit_code == 1);
    CHECK_THAT(refused.err, Contains("its records hold prompt_index ") && Contains(" gives 4 prompts") &&
                                Contains("remove that line to resume"));
    CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");
    // Without the line, it resumes, and writes inputs.json for the resumes after it.
    std::ofstream(run + "/config.resolved.ini", std::ios::trunc) << resolved;
    const CliResult again = run_specula("run --resume " + run + " --quiet --no-plots");
    INFO(again.err);
    CHECK(again.exit_code == 0);
    CHECK(lines(read_text(run + "/records.jsonl")) == lines(whole));
    CHECK(fs::exists(run + "/inputs.json"));
  }
  SECTION("records that no run of this configuration writes are refused before the folder changes, naming them") {
    const std::string first = whole.substr(0, whole.find('\n') + 1);
    nlohmann::json record = nlohmann::json::parse(first);
    const auto refused_with = [&](const std::string& extra_line, const std::string& message) {
      cut();
      std::ofstream(run + "/records.jsonl", std::ios::app) << extra_line << "\n";
      const std::string before = read_text(run + "/records.jsonl");
      const CliResult r = run_specula("run --resume " + run + " --quiet --no-plots");
      INFO(r.err);
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.err, Contains("run --resume: " + run + "/records.jsonl: record ") && Contains(message));
      CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");
      CHECK(read_text(run + "/records.jsonl") == before);
    };
    refused_with(first.substr(0, first.size() - 1), " repeats record 1 (setting '");
    nlohmann::json other = record;
    other["setting_id"] = "draft.method=bogus";
    refused_with(other.dump(), ": setting 'draft.method=bogus' is not one of this run's 2 settings");
    other = record;
    other["repetition"] = 2;
    refused_with(other.dump(), ": repetition 2 is outside the run's 2 (experiment.repetitions)");
    other = record;
    other["baseline"] = !record["baseline"].get<bool>();
    refused_with(other.dump(), "a baseline, but the record says it is");
    other = record;
    other["repetition"] = 1;
    other["prompt_index"] = 5;
    other["tokens"] = {3, 16};
    refused_with(other.dump(), ": token 16 is outside the target's vocabulary [0, 16)");
  }
  SECTION("a folder begun without inputs.json keeps its configuration file's text, as an earlier version wrote it") {
    cut();
    fs::remove(run + "/inputs.json");
    // Lines in an order this version does not write: read alike, and compared as the file has them.
    std::string resolved = read_text(run + "/config.resolved.ini");
    const std::string seed = "seed = 3\n", repetitions = "repetitions = 2\n";
    REQUIRE(resolved.find(repetitions + seed) != std::string::npos);
    resolved.replace(resolved.find(repetitions + seed), repetitions.size() + seed.size(), seed + repetitions);
    std::ofstream(run + "/config.resolved.ini", std::ios::trunc) << resolved;
    REQUIRE(run_specula("run --resume " + run + " --quiet --no-plots").exit_code == 0);
    cut();  // interrupted again: the second resume compares with the inputs.json the first one wrote
    const CliResult second = run_specula("run --resume " + run + " --quiet --no-plots");
    INFO(second.err);
    CHECK(second.exit_code == 0);
  }
  SECTION("config.resolved.ini edited since the run began") {
    cut();
    const std::string resolved = read_text(run + "/config.resolved.ini");
    std::string edited = resolved;
    edited.replace(edited.find("max_new_tokens = 12"), 19, "max_new_tokens = 16");
    std::ofstream(run + "/config.resolved.ini", std::ios::trunc) << edited;
    const CliResult r = run_specula("run --resume " + run + " --quiet --no-plots");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("config.resolved.ini was edited since the run began ('max_new_tokens = 16' where it "
                               "began with 'max_new_tokens = 12')"));
    CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");
    // Its comments may change (the first names the file it was resolved from).
    std::ofstream(run + "/config.resolved.ini", std::ios::trunc) << "# moved here by hand\n" << resolved;
    CHECK(run_specula("run --resume " + run + " --quiet --no-plots").exit_code == 0);
  }
  SECTION("a prompt changed since the run began") {
    cut();
    std::ofstream(prompts) << "0,3\n5\n7,7,2\n12,2\n3\n9,9\n";
    const CliResult r = run_specula("run --resume " + run + " --quiet --no-plots");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err,
               Contains("prompt 4 (prompt_index 3) is not the one the run began with") && Contains("start a new run"));
    CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");  // left as it was
  }
  SECTION("a model file changed since the run began") {
    cut();
    std::string table = read_text(draft);
    table[table.size() / 2] = table[table.size() / 2] == '1' ? '2' : '1';
    std::ofstream(draft) << table;
    const CliResult r = run_specula("run --resume " + run + " --quiet --no-plots");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("model 'bigram:" + draft + "': file '" + draft + "' is not the one the run began with"));
    CHECK(read_text(run + "/status") == "interrupted (SIGINT)\n");
  }
}

TEST_CASE("run checks the [beam] values together before the target loads", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  struct Case {
    std::string set, key, message;
  };
  const std::vector<Case> cases = {
      {" --set beam.width=2 --set beam.num_return=3", "--set beam.num_return: key 'beam.num_return' (setting ",
       "num_return must be in 0..the beam width (2), got 3"},
      // Beam search in lockstep: timed alone against a batched baseline, its ratio would be no speedup.
      {" --set experiment.lockstep=true", "key 'draft.method' (setting ",
       "beam decodes one prompt at a time, but lockstep = true"},
  };
  for (const Case& c : cases) {
    INFO(c.set);
    // A target that could not load: the refusal comes first.
    const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") +
                                    " --set experiment.target=transformer:" + dir.file("no-model") +
                                    " --set draft.method=chain,beam" + c.set + " --quiet");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(c.key) && Contains(c.message));
    CHECK_FALSE(fs::exists(dir.file("results")));
  }
}

TEST_CASE("inputs.json fingerprints what a model folder's model reads, not its notes", "[runner]") {
  TempDir dir;
  const std::string model = dir.file("draft");
  fs::copy(std::string(SPECULA_SOURCE_DIR) + "/results/models/draft", model);
  dir.write("draft/README.md", "how it was trained\n");
  const ExperimentConfig config = load_experiment(dir.write("exp.ini", experiment_text()),
                                                  {"draft.drafter=transformer:" + model, "draft.method=chain"});
  const nlohmann::json before = run_inputs(config, {{0, 3}});
  const auto files = [](const nlohmann::json& inputs) {
    std::set<std::string> out;
    for (const auto& [spec, per_spec] : inputs.at("models").items())
      for (const auto& [file, fingerprint] : per_spec.items()) out.insert(file);
    return out;
  };
  CHECK(files(before).count(model + "/config.json") == 1);
  CHECK(files(before).count(model + "/weights.pt") == 1);
  CHECK(files(before).count(model + "/README.md") == 0);
  dir.write("draft/README.md", "how it was trained, and what it scored\n");
  CHECK(run_inputs(config, {{0, 3}}) == before);
  // A folder whose inputs.json an earlier build wrote with the notes in it resumes (they are compared as gone).
  fs::create_directories(dir.file("run"));
  dir.write("run/config.resolved.ini", config.resolved_ini());  // as the run wrote it
  nlohmann::json earlier = before;
  earlier["models"]["transformer:" + model][model + "/README.md"] = {{"bytes", 19}, {"crc32", "01234567"}};
  std::ofstream(dir.file("run/inputs.json")) << earlier.dump();
  CHECK_NOTHROW(check_inputs_unchanged(dir.file("run"), before));
  // A spec that names a .md file itself: both sides are read by the same rule.
  nlohmann::json named = before;
  named["models"]["bigram:" + dir.file("table.md")] = {{dir.file("table.md"), {{"bytes", 3}, {"crc32", "89abcdef"}}}};
  std::ofstream(dir.file("run/inputs.json")) << named.dump();
  CHECK_NOTHROW(check_inputs_unchanged(dir.file("run"), named));
  // The control: a file the model reads.
  std::ofstream(model + "/config.json", std::ios::app) << "\n";
  CHECK(run_inputs(config, {{0, 3}}) != before);
  CHECK_THROWS_WITH(check_inputs_unchanged(dir.file("run"), run_inputs(config, {{0, 3}})),
                    Contains("file '" + model + "/config.json' is not the one the run began with"));
}

TEST_CASE("token ids outside the target's vocabulary are refused before a folder is made", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const std::string out = " --set experiment.output_dir=" + dir.file("results") + " --quiet";
  const std::string prompts = dir.write("prompts.txt", "0 3\n0 99\n");
  const std::string schema = dir.write("s.json", R"({"type":"boolean"})");
  const std::string strings = dir.write("ts.txt", "a\nb\n");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --set sampling.stop_tokens=999", "key 'sampling.stop_tokens' (setting "},
      {" --set sampling.stop_tokens=999", "stop_tokens: token id 999 is outside the vocabulary [0, 16)"},
      {" --set draft_sampling.logit_bias=77:1", "key 'draft_sampling.logit_bias'"},
      // A draft value meets an inherited target value: the draft's key is named.
      {" --set sampling.banned_tokens=1 --set draft_sampling.allowed_tokens=1",
       "[draft_sampling] (with the [sampling] values it inherits): allowed_tokens and banned_tokens leave no token"},
      {" --set sampling.allowed_tokens=1 --set draft_sampling.banned_tokens=1",
       "[draft_sampling] (with the [sampling] values it inherits): allowed_tokens and banned_tokens leave no token"},
      {" --set experiment.prompts=" + prompts, prompts + ": prompt 2 holds token 99"},
      // A constraint's automaton is built over the target's tokens before the folder too.
      {" --set 'sampling.regex=none | zzz'", "regex 'zzz': no token can begin a match"},
      // ... and named by the key that gave it (here its --set; in a file, file:line: key).
      {" --set 'sampling.regex=none | zzz'", "--set sampling.regex: key 'sampling.regex' (setting "},
      // ... under the setting's other masks: only a banned letter begins a match.
      {" --set sampling.regex=ab --set sampling.banned_tokens=0", "regex 'ab': no token can begin a match"},
      {" --set sampling.regex=ab --set 'sampling.bad_words=0,1'", "regex 'ab': no token can begin a match"},
      // ... one automaton per setting's masks: the second setting's bad word is not served the first one's.
      {" --set sampling.regex=ab --set 'sampling.bad_words=none | 0,1'", "regex 'ab': no token can begin a match"},
      {" --set sampling.regex=ab --set sampling.stop_tokens=3 --set sampling.min_tokens=3",
       "regex 'ab': no match of at least 3 tokens can be spelled"},
      {" --set sampling.regex=ab --set sampling.json_schema=" + schema, "--set sampling.regex: key 'sampling.regex' ("},
      {" --set sampling.regex=ab --set sampling.json_schema=" + schema,
       "regex and json_schema: give one constraint, not both"},
      {" --set sampling.regex=ab --set sampling.token_strings=" + strings,
       strings + ": 2 token strings for a vocabulary of 16"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const CliResult r = run_specula("run " + exp + out + c.args);
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(c.message));
    CHECK_FALSE(fs::exists(dir.file("results")));
  }
}

TEST_CASE("a sweep whose prompts and trees overflow the target is refused before a folder is made",
          "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write(
      "long.ini", "[experiment]\ntarget = transformer:" + std::string(SPECULA_SOURCE_DIR) +
                      "/results/models/draft\nprompts_from_corpus = " + std::string(SPECULA_SOURCE_DIR) +
                      "/../shared/data/tinyshakespeare.txt\nnum_prompts = 1\nprompt_length = 242\nmax_new_tokens = 12\n"
                      "repetitions = 1\n\n[draft]\ndrafter = prompt-lookup\nmethod = tree\ntree = 2,2,2,2,2\n");
  const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") + " --quiet");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("holds 256 positions") && Contains("draft depth 5"));
  CHECK_FALSE(fs::exists(dir.file("results") + "/long"));
}

TEST_CASE("run compares every drafter's vocabulary with the target's before any model loads", "[runner][cli][errors]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());  // a 16-token target
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  // An n-gram model's vocabulary is read from its header alone: the rest of this file is never read.
  const std::string ngram3 = dir.write("three.txt", "specula-ngram 1\norder 2\nvocab 3\n");
  const std::string two = dir.write("two.txt", "0.5 1.0\n1.0 0.5\n");
  // Heads whose target was retrained since: refused from the two configs, before either model loads. The target's
  // folder holds its config alone, so that loading it would fail on its missing weights instead.
  fs::create_directories(dir.file("target"));
  fs::create_directories(dir.file("heads"));
  nlohmann::json target = nlohmann::json::parse(read_text(models + "target/config.json"));
  nlohmann::json heads = nlohmann::json::parse(read_text(models + "medusa/config.json"));
  heads["target"] = "../target";
  heads["target_weights"] = {{"bytes", target["weights"]["bytes"]}, {"crc32", target["weights"]["crc32"]}};
  target["weights"]["crc32"] = "00000000";
  dir.write("target/config.json", target.dump());
  dir.write("heads/config.json", heads.dump());
  struct Case {
    std::string target, drafter, message;
  };
  const std::vector<Case> cases = {
      {"", "bigram:" + two,
       "target bigram:" + kTable + "target-v16.txt has 16 tokens but draft bigram:" + two + " has 2"},
      {"", "transformer:" + models + "draft", "has 16 tokens but draft transformer:" + models + "draft has 256"},
      {"", "ngram:" + ngram3, "has 16 tokens but draft ngram:" + ngram3 + " has 3"},
      {"", "medusa:" + models + "medusa", "medusa heads read a transformer target's features; the target bigram:"},
      {"transformer:" + dir.file("target"), "medusa:" + dir.file("heads"),
       "the heads were trained on other weights of their target"},
      {"transformer:" + dir.file("target"), "eagle:" + dir.file("heads"), "the folder holds medusa heads, not eagle"},
  };
  for (const Case& c : cases) {
    INFO(c.drafter);
    const std::string results = dir.file("results");
    const CliResult r = run_specula("run " + exp + " --set experiment.output_dir=" + results +
                                    (c.target.empty() ? "" : " --set experiment.target=" + c.target) +
                                    " --set 'draft.drafter=prompt-lookup | " + c.drafter + "' --quiet");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err,
               Contains("--set draft.drafter: key 'draft.drafter' = '" + c.drafter + "'") && Contains(c.message));
    CHECK_FALSE(fs::exists(results));
  }
  // The target's own description is read first, under its key.
  const CliResult missing = run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") +
                                        " --set experiment.target=transformer:" + dir.file("heads") + " --quiet");
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Contains("--set experiment.target: key 'experiment.target'") &&
                              Contains(dir.file("heads") + "/config.json"));
}

TEST_CASE("an error the generation layer raises about a parameter names the experiment's file, line and key",
          "[runner][cli][errors]") {
  TempDir dir;
  // Greedy verification with a sampling temperature: the Generator refuses it, naming the parameter `method`.
  std::string text = experiment_text();
  text.replace(text.find("method = chain, tree"), std::string("method = chain, tree").size(), "method = greedy");
  text.replace(text.find("temperature = 0, 0.8"), std::string("temperature = 0, 0.8").size(), "temperature = 0.8");
  text.erase(text.find("tree = 2,1\n"), std::string("tree = 2,1\n").size());  // no setting verifies a tree
  const std::string path = dir.write("greedy.ini", text);
  const CliResult r = run_specula("run " + path + " --set experiment.output_dir=" + dir.file("results") + " --quiet");
  CHECK(r.exit_code == 1);
  INFO(r.err);
  CHECK_THAT(r.err, Contains("greedy.ini:10: key 'draft.method'") &&
                        Contains("method greedy verifies greedy decoding: use temperature 0 (got 0.8)"));
  CHECK_THAT(r.err, !Contains("--method"));
  CHECK_FALSE(fs::exists(dir.file("results")));
  // The same where it is one setting of a sweep whose others run: refused before the first record, not at its turn.
  text = experiment_text();
  text.erase(text.find("tree = 2,1\n"), std::string("tree = 2,1\n").size());
  const CliResult swept =
      run_specula("run " + dir.write("swept.ini", text) + " --set experiment.output_dir=" + dir.file("results") +
                  " --set draft.method=chain,greedy --quiet");
  CHECK(swept.exit_code == 1);
  CHECK_THAT(swept.err, Contains("method greedy verifies greedy decoding: use temperature 0 (got 0.8)"));
  CHECK_FALSE(fs::exists(dir.file("results")));
  // Medusa's heads draft as many tokens ahead as there are heads: a deeper draft is refused from their config, before
  // any model loads (the target's folder holds its config alone, so loading it would fail on its missing weights).
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  fs::create_directories(dir.file("target"));
  fs::create_directories(dir.file("heads"));
  dir.write("target/config.json", read_text(models + "target/config.json"));
  nlohmann::json heads = nlohmann::json::parse(read_text(models + "medusa/config.json"));
  heads["target"] = "../target";
  dir.write("heads/config.json", heads.dump());
  const int heads_count = heads["medusa_heads"].get<int>();
  const auto medusa_run = [&](const std::string& drafters, const std::string& method, const std::string& k) {
    return run_specula("run " + dir.file("swept.ini") + " --set experiment.output_dir=" + dir.file("results") +
                       " --set experiment.target=transformer:" + dir.file("target") + " --set 'draft.drafter=" +
                       drafters + "' --set draft.method=" + method + " --set draft.num_draft_tokens=" + k + " --quiet");
  };
  const std::string deeper = std::to_string(heads_count + 1);
  const CliResult medusa = medusa_run("prompt-lookup | medusa:" + dir.file("heads"), "chain", "2," + deeper);
  CHECK(medusa.exit_code == 1);
  INFO(medusa.err);
  CHECK_THAT(medusa.err, Contains("key 'draft.num_draft_tokens'") &&
                             Contains("drafts at most " + std::to_string(heads_count) + " tokens ahead"));
  // Method tree without a tree drafts a chain of K: the key named is still num_draft_tokens.
  const CliResult tree = medusa_run("medusa:" + dir.file("heads"), "tree", deeper);
  CHECK(tree.exit_code == 1);
  CHECK_THAT(tree.err, Contains("key 'draft.num_draft_tokens'") && !Contains("key 'draft.tree'"));
  CHECK_FALSE(fs::exists(dir.file("results")));
  // generate says both before the target loads too.
  const CliResult deep =
      run_specula("generate --method chain --target transformer:" + dir.file("target") +
                  " --draft medusa:" + dir.file("heads") + " --num-draft-tokens " + std::to_string(heads_count + 1) +
                  " --prompt-tokens 1 --max-new-tokens 8" + " --output " + dir.file("out.txt"));
  CHECK(deep.exit_code == 1);
  CHECK_THAT(deep.err, Contains("--num-draft-tokens asks for a draft " + std::to_string(heads_count + 1) + " deep"));
  const CliResult hot = run_specula(
      "generate --method greedy --temperature 0.8 --target transformer:" + dir.file("target") +
      " --draft medusa:" + dir.file("heads") + " --prompt-tokens 1 --max-new-tokens 8 --output " + dir.file("out.txt"));
  CHECK(hot.exit_code == 1);
  CHECK_THAT(hot.err, Contains("--method greedy verifies greedy decoding: use temperature 0 (got 0.8)"));
  // A drafter spec the drafter refuses: its key, not the --draft flag.
  text = experiment_text();
  text.replace(text.find("| synthetic:alpha=0.6"), std::string("| synthetic:alpha=0.6").size(), "| synthetic:alpha=2");
  const CliResult d = run_specula("run " + dir.write("alpha.ini", text) +
                                  " --set experiment.output_dir=" + dir.file("results") + " --quiet");
  CHECK(d.exit_code == 1);
  INFO(d.err);
  CHECK_THAT(d.err, Contains("alpha.ini:9: key 'draft.drafter'") && Contains("alpha must be in [0, 1]"));
  CHECK_THAT(d.err, !Contains("--draft"));
  // A draft deeper than max_new_tokens: refused before any work, naming the key that set it.
  const CliResult k = run_specula("run " + dir.write("deep.ini", experiment_text()) + " --set experiment.output_dir=" +
                                  dir.file("deep-results") + " --set experiment.max_new_tokens=2 --quiet");
  CHECK(k.exit_code == 1);
  INFO(k.err);
  CHECK_THAT(k.err, Contains("key 'draft.num_draft_tokens'") && Contains("asks for a draft 3 deep, more than the 2"));
  CHECK_FALSE(fs::exists(dir.file("deep-results")));
}

TEST_CASE("run on cuda-host: the CPU run's records, each saying where it was verified; refusals by key",
          "[runner][cli][device]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  const std::string out = " --quiet --set experiment.repetitions=1 --set experiment.output_dir=";
  const auto records_of = [&](const std::string& results) {
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(results + "/exp")) runs.push_back(e.path());
    REQUIRE(runs.size() == 1);
    std::map<std::string, RunRecord> by_key;
    for (const RunRecord& r : read_records((runs[0] / "records.jsonl").string()))
      by_key[r.setting_id + "#" + std::to_string(r.prompt_index) + "#" + std::to_string(r.repetition)] = r;
    return by_key;
  };
  REQUIRE(run_specula("run " + exp + out + dir.file("cpu")).exit_code == 0);
  const CliResult host = run_specula("run " + exp + out + dir.file("host") + " --set experiment.device=cuda-host");
  INFO(host.err);
  REQUIRE(host.exit_code == 0);
  const auto cpu = records_of(dir.file("cpu")), device = records_of(dir.file("host"));
  REQUIRE(device.size() == cpu.size());
  for (const auto& [key, r] : device) {
    INFO(key);
    CHECK(r.device == "cuda-host");
    CHECK(cpu.at(key).device == "cpu");
    CHECK(r.tokens == cpu.at(key).tokens);
    CHECK(r.accept_lengths == cpu.at(key).accept_lengths);
    CHECK(r.pair.present == !r.baseline);  // paired timing: the baseline batch beside the speculative one
  }
  // A device the machine lacks, and an option the kernels lack: refused before a results folder is made.
  if (cuda_device_count_or_zero() == 0) {
    const CliResult r = run_specula("run " + exp + out + dir.file("gpu") + " --set experiment.device=cuda");
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains("no CUDA device: "));
    CHECK_FALSE(fs::exists(dir.file("gpu") + "/exp"));
  }
  const CliResult typical = run_specula("run " + exp + out + dir.file("typ") +
                                        " --set experiment.device=cuda-host --set sampling.typical_p=0.9");
  CHECK(typical.exit_code == 1);
  CHECK_THAT(typical.err, Contains("key 'sampling.typical_p'") && Contains("not supported on device cuda-host"));
  CHECK_FALSE(fs::exists(dir.file("typ") + "/exp"));
  const CliResult bad = run_specula("run " + exp + out + dir.file("bad") + " --set experiment.device=gpu");
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("key 'experiment.device'") && Contains("'gpu' is not cpu, cuda or cuda-host"));
}

TEST_CASE("a benchmark's default report keeps another machine's report of the same host name", "[runner]") {
  TempDir dir;
  // The default path is relative to the current folder: the test moves into a scratch one and back.
  struct InFolder {
    fs::path before = fs::current_path();
    explicit InFolder(const std::string& folder) { fs::current_path(folder); }
    ~InFolder() { fs::current_path(before); }
  } in(dir.file(""));
  const std::string path = "results/bench/constraint-" + hostname() + ".json";
  CHECK(default_bench_report("constraint") == path);  // none yet
  fs::create_directories("results/bench");
  nlohmann::json report = {{"benchmark", "constraint"}, {"machine", machine_json(1, "")}};
  std::ofstream(path) << report.dump();
  CHECK(default_bench_report("constraint") == path);  // this machine's own: replaced
  for (const char* key : {"cpu_model", "cpu_avx512f", "logical_cores", "llc_bytes"}) {
    INFO(key);
    nlohmann::json other = report;
    other["machine"][key] = other["machine"][key].is_boolean()          ? nlohmann::json(!other["machine"][key])
                            : other["machine"][key].is_number_integer() ? nlohmann::json(12345)
                                                                        : nlohmann::json("Another CPU");
    std::ofstream(path) << other.dump();
    CHECK_THROWS_WITH(default_bench_report("constraint"),
                      Contains(path + ": holds the report of another machine with this host name (") &&
                          Contains("; this one: " + cpu_model()) && Contains("give --output"));
  }
  // A report written before the cache was recorded is compared on what it has.
  report["machine"].erase("llc_bytes");
  std::ofstream(path) << report.dump();
  CHECK(default_bench_report("constraint") == path);
  // A hand-edited report is described as it stands.
  report["machine"]["cpu_model"] = 7;
  std::ofstream(path) << report.dump();
  CHECK_THROWS_WITH(default_bench_report("constraint"), Contains("another machine with this host name (7, "));
  std::ofstream(path) << "not a report";
  CHECK_THROWS_WITH(default_bench_report("constraint"), Contains("holds something other than a benchmark report"));
}

TEST_CASE("every benchmark's machine block names the CPU, its ISA and the load around the run", "[runner]") {
  const std::string before = load_averages();
  const nlohmann::json m = machine_json(2, before);
  for (const char* key : {"hostname", "cpu_model", "cpu_avx2", "cpu_avx512f", "logical_cores", "threads_used",
                          "omp_wait_policy", "load_average_before", "load_average_after", "compiler", "build_type"})
    CHECK(m.contains(key));
  CHECK(m["threads_used"] == 2);
  CHECK(m["load_average_before"] == before);
  // The last-level cache as sysfs gives it, where it does.
  CHECK(m["llc_level"] == last_level_cache().level);
  CHECK(m["llc_bytes"] == last_level_cache().bytes);
  if (fs::exists("/sys/devices/system/cpu/cpu0/cache/index0/size")) {
    CHECK(last_level_cache().level >= 1);
    CHECK(last_level_cache().bytes >= 1024);
  }
  CHECK(m["cpu_avx2"].get<bool>() == static_cast<bool>(__builtin_cpu_supports("avx2")));
  // Three numbers, as /proc/loadavg gives them.
  if (before != "unknown") CHECK(std::count(before.begin(), before.end(), ' ') == 2);
}

TEST_CASE("plot refuses a summary that is cut, empty, header-only, short or from an unfinished run", "[runner][cli]") {
  TempDir dir;
  const std::string exp = dir.write("exp.ini", experiment_text());
  REQUIRE(run_specula("run " + exp + " --set experiment.output_dir=" + dir.file("results") + " --quiet --no-plots")
              .exit_code == 0);
  const std::string run = run_folders(dir.file("results") + "/exp").at(0);
  const std::string summary = run + "/summary.csv", whole = read_text(summary);
  const auto lines_of = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
  REQUIRE(lines_of(whole) == 15);  // the header and 14 settings
  // Each damaged summary: exit 1, a message naming the file and what is missing, and no plot file written.
  const auto refused = [&](const std::string& text, const std::vector<std::string>& says) {
    std::ofstream(summary, std::ios::trunc) << text;
    fs::remove_all(run + "/plots");
    const CliResult r = run_specula("plot " + run + " --quiet");
    INFO(r.err);
    CHECK(r.exit_code == 1);
    for (const std::string& s : says) CHECK_THAT(r.err, Contains(s));
    CHECK_THAT(r.err, !Contains("complete\n") && !Contains("are complete"));
    CHECK_FALSE(fs::exists(run + "/plots"));
  };
  const size_t half = whole.find('\n', whole.size() / 2) + 1;
  refused(whole.substr(0, half), {summary, "rows", "misses settings"});          // cut at a line end
  refused(whole.substr(0, half + 20), {summary, "last line is cut"});            // cut inside a line
  refused("", {summary, "is empty"});                                            // emptied
  refused(whole.substr(0, whole.find('\n') + 1), {summary, "only its header"});  // header only
  // A line with a field too many or too few is damage, wherever it is.
  std::string extra = whole;
  extra.insert(whole.find('\n') + 1, "x,");
  refused(extra, {summary, "line 2", "fields"});
  // A number that is not one (the right fields, a word where a run writes a number): named, not drawn as a gap.
  std::string word = whole;
  const size_t cell = word.find(",0.", word.find('\n')) + 1;
  word.replace(cell, 2, "z.");
  refused(word, {summary, "line ", "is not a number"});
  // The whole summary plots, and `run` plots it at the end as well.
  std::ofstream(summary, std::ios::trunc) << whole;
  const CliResult ok = run_specula("plot " + run + " --quiet");
  INFO(ok.err);
  CHECK(ok.exit_code == 0);
  CHECK(fs::exists(run + "/plots/speedup_vs_k.png"));
  // A folder whose name holds a quote, spaces and a '$' is one argument to the plot script (no shell between).
  const std::string odd = dir.file("it's a $run");
  fs::copy(run, odd, fs::copy_options::recursive);
  fs::remove_all(odd + "/plots");
  const std::string odd_argument = "\"" + dir.file("it's a \\$run") + "\"";  // as the test's shell reads it
  const CliResult quoted = run_specula("plot " + odd_argument + " --quiet");
  INFO(quoted.err);
  CHECK(quoted.exit_code == 0);
  CHECK(fs::exists(odd + "/plots/speedup_vs_k.png"));
  // An interpreter that fails, or that is not there, is named with what happened; nothing is drawn.
  fs::remove_all(odd + "/plots");
  {
    const ScopedEnv python("SPECULA_PYTHON", "/bin/false");
    const CliResult failed = run_specula("plot " + odd_argument + " --quiet");
    CHECK(failed.exit_code == 1);
    CHECK_THAT(failed.err, Contains("plotting failed ('/bin/false'") && Contains("exit status 1"));
  }
  {
    const ScopedEnv python("SPECULA_PYTHON", "no-such-python-here");
    const CliResult missing = run_specula("plot " + odd_argument + " --quiet");
    CHECK(missing.exit_code == 1);
    CHECK_THAT(missing.err,
               Contains("'no-such-python-here'") && Contains("cannot start it: No such file or directory"));
  }
  CHECK_FALSE(fs::exists(odd + "/plots/speedup_vs_k.png"));

  // An interrupted run whose summary covers only the settings it reached: refused unless --allow-incomplete.
  const std::vector<RunRecord> records = read_records(run + "/records.jsonl");
  std::string first_settings;
  std::set<std::string> kept;
  for (const RunRecord& r : records)
    if (kept.size() < 5 || kept.count(r.setting_id)) {
      kept.insert(r.setting_id);
      first_settings += r.to_json_line() + "\n";
    }
  std::ofstream(run + "/records.jsonl", std::ios::trunc) << first_settings;
  write_summary_csv(summarize(read_records(run + "/records.jsonl")), summary);
  std::ofstream(run + "/status", std::ios::trunc) << "interrupted (SIGTERM)\n";
  fs::remove_all(run + "/plots");
  const CliResult partial = run_specula("plot " + run + " --quiet");
  CHECK(partial.exit_code == 1);
  CHECK_THAT(partial.err, Contains("not a complete run (status: interrupted (SIGTERM))") && Contains("5 of the 14") &&
                              Contains("--resume") && Contains("--allow-incomplete"));
  CHECK_FALSE(fs::exists(run + "/plots"));
  const CliResult allowed = run_specula("plot " + run + " --quiet --allow-incomplete");
  INFO(allowed.err);
  CHECK(allowed.exit_code == 0);
  CHECK_THAT(allowed.err, Contains("is not complete") && Contains("5 of 14"));
  CHECK_THAT(allowed.err, !Contains("rest on part of their records"));  // the 5 settings are whole
  // The setting in progress when the run stopped has only some of its 4 prompts x 2 repetitions: its row looks like
  // any other, so plot names it.
  const std::vector<RunRecord> five = read_records(run + "/records.jsonl");
  std::string cut_setting;
  for (size_t i = 0; i + 3 < five.size(); ++i) cut_setting += five[i].to_json_line() + "\n";
  std::ofstream(run + "/records.jsonl", std::ios::trunc) << cut_setting;
  write_summary_csv(summarize(read_records(run + "/records.jsonl")), summary);
  const std::string last = five.back().setting_id;
  const CliResult in_part = run_specula("plot " + run + " --quiet");
  CHECK(in_part.exit_code == 1);
  CHECK_THAT(in_part.err, Contains(last + " (5 of 8 records) only in part"));
  const CliResult in_part_allowed = run_specula("plot " + run + " --quiet --allow-incomplete");
  CHECK(in_part_allowed.exit_code == 0);
  CHECK_THAT(in_part_allowed.err, Contains("these rest on part of their records: " + last + " (5 of 8 records)"));
  // A summary from before the status file existed (the bundled reference runs) still plots when whole.
  fs::remove(run + "/status");
  CHECK(run_specula("plot " + run + " --quiet").exit_code == 1);  // 5 of 14 settings: still not whole
  // A run killed outright wrote no summary: plot says so and how to finish it, with or without --allow-incomplete.
  std::ofstream(run + "/status", std::ios::trunc) << "running (pid 1 on elsewhere)\n";
  fs::remove(summary);
  for (const char* allow : {"", " --allow-incomplete"}) {
    const CliResult killed = run_specula("plot " + run + " --quiet" + allow);
    CHECK(killed.exit_code == 1);
    CHECK_THAT(killed.err,
               Contains("no summary.csv: the run was stopped before it wrote one (status: running (pid 1") &&
                   Contains("specula run --resume " + run));
  }
  // A run still going on this machine (its process alive, named specula) is said to be going, not stopped.
  TempDir bin;
  REQUIRE(std::system(("cp /bin/sleep " + bin.file("specula") + " && (" + bin.file("specula") + " 60 & echo $! > " +
                       bin.file("pid") + ")")
                          .c_str()) == 0);
  const long pid = std::stol(read_text(bin.file("pid")));
  std::ofstream(run + "/status", std::ios::trunc) << "running (pid " << pid << " on " << hostname() << ")\n";
  const CliResult going = run_specula("plot " + run + " --quiet");
  kill(static_cast<pid_t>(pid), SIGKILL);
  CHECK(going.exit_code == 1);
  CHECK_THAT(going.err, Contains("no summary.csv yet: the run is still going (process " + std::to_string(pid)));
}

TEST_CASE("plot --allow-incomplete takes a folder that keeps no records.jsonl (a benchmark's) as its summary is",
          "[runner]") {
  TempDir dir;
  const std::string folder = dir.file("bench");
  fs::create_directories(folder);
  const std::string bench = std::string(SPECULA_SOURCE_DIR) + "/results/bench/end-to-end-27m/";
  fs::copy_file(bench + "summary.csv", folder + "/summary.csv");
  fs::copy_file(bench + "config.resolved.ini", folder + "/config.resolved.ini");
  CHECK_THROWS_WITH(check_summary_covers_folder(folder, false),
                    Contains("no records.jsonl, so summary.csv cannot be checked against the run") &&
                        Contains("--allow-incomplete plots its summary as it is"));
  const SummaryCoverage c = check_summary_covers_folder(folder, true);
  CHECK_FALSE(c.checked);
  CHECK_FALSE(c.complete);
  const std::string summary = read_text(folder + "/summary.csv");
  CHECK(c.rows == std::count(summary.begin(), summary.end(), '\n') - 1);
}

TEST_CASE("the terminal table tells settings apart by every swept axis that differs", "[runner][summary]") {
  const auto row = [](const std::string& method, const std::string& regex, const std::string& scheme) {
    SummaryRow r;
    r.setting = {{"draft.drafter", "bigram:d.txt"},
                 {"draft.method", method},
                 {"draft.num_draft_tokens", "4"},
                 {"sampling.temperature", "0.7"},
                 {"sampling.regex", regex}};
    if (!scheme.empty()) r.setting["draft.tree_sampling"] = scheme;
    return r;
  };
  std::ostringstream table;
  print_summary_table({row("chain", "none", ""), row("chain", "(ab|c)+", ""), row("tree", "none", "iid"),
                       row("tree", "(ab|c)+", "iid"), row("beam", "none", "")},
                      table);
  const std::string text = table.str();
  INFO(text);
  CHECK_THAT(text, Contains("other axes\n"));
  CHECK_THAT(text, Contains(" regex=none\n") && Contains(" regex=(ab|c)+\n"));
  // The sibling scheme is the same wherever it is given (a chain has none): not an axis that tells rows apart.
  CHECK_THAT(text, !Contains("tree_sampling"));
  // Beam search drafts nothing: no drafter, no K.
  CHECK_THAT(text, Contains("\n-                                    beam    -  "));
  // Without such an axis, no column.
  std::ostringstream plain;
  print_summary_table({row("chain", "none", ""), row("tree", "none", "iid")}, plain);
  CHECK_THAT(plain.str(), !Contains("other axes") && !Contains("regex="));
}

TEST_CASE("the terminal table cuts a long drafter spec in its middle, and widens where two would read alike",
          "[runner][summary]") {
  const auto table = [](const std::vector<std::string>& drafters) {
    std::vector<SummaryRow> rows;
    for (const std::string& d : drafters) {
      SummaryRow r;
      r.setting = {{"draft.drafter", d}, {"draft.method", "chain"}, {"draft.num_draft_tokens", "4"}};
      rows.push_back(r);
    }
    std::ostringstream os;
    print_summary_table(rows, os);
    return os.str();
  };
  // Two bundled n-gram models share their first 36 characters: their file names, at the end, tell them apart.
  const std::string plain = "ngram:results/models/ngram-order6.txt",
                    distilled = "ngram:results/models/ngram-order6-distilled-27m.txt";
  const std::string cut = table({plain, distilled, "prompt-lookup"});
  INFO(cut);
  CHECK_THAT(cut, StartsWith("drafter                              method "));
  CHECK_THAT(cut, Contains("\nngram:results/mo...distilled-27m.txt chain "));
  CHECK_THAT(cut, Contains("\nngram:results/mo.../ngram-order6.txt chain "));
  CHECK_THAT(cut, Contains("\nprompt-lookup                        chain "));
  // Specs alike in their first 16 and last 17 characters: the column takes the longest whole.
  const std::string a = "ngram:/data/run-a/0123456789/model-order6.txt",
                    b = "ngram:/data/run-b/0123456789/model-order6.txt";
  const std::string wide = table({a, b});
  INFO(wide);
  CHECK_THAT(wide, StartsWith("drafter" + std::string(a.size() + 1 - 7, ' ') + "method "));
  CHECK_THAT(wide, Contains("\n" + a + " chain ") && Contains("\n" + b + " chain "));
}

TEST_CASE("merged metrics add the waits and step graphs, and keep the largest device buffer bytes", "[runner]") {
  GenerationMetrics a, b;
  a.growth_waits = 2;
  a.staging_waits = 1;
  a.device_buffer_bytes = 5000;
  a.step_graph_runs = 10;
  a.step_graph_replays = 8;
  b.growth_waits = 3;
  b.device_buffer_bytes = 7000;
  b.step_graph_runs = 4;
  b.step_graphs_built = 2;
  b.step_graphs_evicted = 1;
  a.merge(b);
  CHECK(a.growth_waits == 5);
  CHECK(a.step_graph_runs == 14);
  CHECK(a.step_graph_replays == 8);
  CHECK(a.step_graphs_built == 2);
  CHECK(a.step_graphs_evicted == 1);
  CHECK(a.staging_waits == 1);
  CHECK(a.device_buffer_bytes == 7000);  // a peak, not a sum
  b.merge(GenerationMetrics{});
  CHECK(b.device_buffer_bytes == 7000);
}

TEST_CASE("first_differing_lines names the first line that differs, (end) for a text that ran out, escapes controls",
          "[runner]") {
  using Lines = std::pair<std::string, std::string>;
  CHECK_FALSE(first_differing_lines("a\nb\n", "a\nb\n").has_value());
  CHECK_FALSE(first_differing_lines("a\nb\n", "a\nb").has_value());  // the same lines, one without its last end
  CHECK(first_differing_lines("a\nb\nc\n", "a\nx\nc\n") == Lines{"b", "x"});
  CHECK(first_differing_lines("a\n", "a\nb\n") == Lines{"(end)", "b"});
  CHECK(first_differing_lines("a\nb\n", "a\n") == Lines{"b", "(end)"});
  CHECK(first_differing_lines("", "a") == Lines{"(end)", "a"});
  // A CRLF file's lines, and other control bytes, are quoted as escapes.
  CHECK(first_differing_lines("[experiment]\r\nx = 1\r\n", "[experiment]\nx = 1\n") ==
        Lines{"[experiment]\\r", "[experiment]"});
  CHECK(first_differing_lines("a\tb\x1b[2J\n", "a\n") == Lines{"a\\tb\\x1b[2J", "a"});
}
