// `specula tree-opt`: choose the static draft tree that maximises expected tokens per unit time from measured
// positional acceptance and measured forward costs (Sequoia's dynamic programme; draft/tree_shape_optimizer.h,
// verify/ALGORITHMS.md §5).
//
// Acceptance p_k (the probability that the child of rank k of an accepted node is the accepted one) is given
// (--acceptance) or measured here: speculative steps with a depth-1 tree of the drafter's K best candidates
// (point-mass verification, the rule every ranked tree uses), counting which rank the verifier accepts.
// Forward costs t(n) come from --forward-cost, a `specula bench forward` report (its first model's rows and
// CPU-time ratios), or a cost profile (harness/experiment/cost_profile.h: its rows, and the drafter's cost where it
// measured that draft model). Outputs: the optimal tree (rank paths, for the head drafters' tree=FILE, written by
// --output-ranks) and the best tree with uniform branching per depth (what --tree accepts, written by --output): --tree
// keeps its uniform format, so a non-uniform optimum is reported beside the best uniform tree rather than passed to
// every drafter.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "draft/registry/drafter_registry.h"
#include "draft/tree_shape_optimizer.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/experiment/cost_profile.h"
#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "harness/models/registry/model_registry.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/verification.h"

namespace specula::cli {
namespace fs = std::filesystem;
namespace {

struct Measured {
  std::vector<double> p;        // p_k
  std::vector<double> std_err;  // binomial standard errors
  int64_t steps = 0;
};

// Speculative steps with the drafter's K best candidates at depth 1, verified with the point-mass rule.
Measured measure_positional_acceptance(const LanguageModel& target, const SamplingParams& target_params,
                                       const DrafterFactory& drafters, int32_t K, const std::vector<Token>& prompt,
                                       int64_t samples, int32_t tokens, uint64_t seed) {
  const int32_t V = target.vocab_size();
  const SamplerPipeline pipeline(target_params, V);
  std::vector<int64_t> hits(K, 0);
  Measured m;
  for (int64_t s = 0; s < samples; ++s) {
    auto session = target.new_session();
    auto drafter = drafters.create();
    drafter->begin(prompt);
    std::vector<Token> context = prompt;
    TokenHistory history;
    history.prompt = prompt;
    int32_t produced = 0;
    for (uint64_t step = 0; produced < tokens; ++step) {
      DraftRequest request;
      request.context = &context;
      request.history = &history;
      request.num_draft_tokens = 1;
      request.tree_shape = {K};
      request.scheme = SiblingScheme::deterministic;
      request.rng = StepRandom{seed, static_cast<uint64_t>(s), step};
      const TokenTree tree = drafter->propose(request);
      if (tree.scheme != SiblingScheme::deterministic)
        fail("tree-opt: the drafter ", drafters.description(), " did not give ranked (point-mass) candidates");
      std::vector<float> logits(static_cast<size_t>(tree.size() + 1) * V), probs(logits.size());
      session->tree_logits(context, tree, logits.data());
      process_tree_rows(pipeline, logits.data(), history, tree, probs.data());
      const VerifyOutcome outcome = verify_tree(probs.data(), tree, V, request.rng);
      drafter->accept(outcome.accepted);
      ++m.steps;
      if (outcome.accepted > 0) {
        const std::vector<int32_t> kids = tree.children(0);
        for (size_t r = 0; r < kids.size() && r < static_cast<size_t>(K); ++r)
          if (kids[r] == outcome.path[0]) ++hits[r];
      }
      for (size_t i = 0; i < outcome.emitted.size(); ++i) {
        const int32_t row = i == 0 ? 0 : outcome.path[i - 1] + 1;
        history = pipeline.advance(std::move(history), outcome.emitted[i], probs.data() + static_cast<size_t>(row) * V);
        context.push_back(outcome.emitted[i]);
        ++produced;
      }
    }
  }
  for (int32_t k = 0; k < K; ++k) {
    const double p = static_cast<double>(hits[k]) / static_cast<double>(m.steps);
    m.p.push_back(p);
    m.std_err.push_back(std::sqrt(p * (1 - p) / static_cast<double>(m.steps)));
  }
  return m;
}

ForwardCost costs_from_bench(const std::string& path) {
  std::ifstream in = open_input_file(path, "--forward-bench");
  nlohmann::json j;
  try {
    j = parse_bounded_json(in);
    std::map<int32_t, std::pair<double, int>> sums;  // rows -> (sum of ratios, count): chunks and trees alike
    for (const auto& c : j.at("models").at(0).at("cases")) {
      // CPU-time ratios when the report has them (wall time is unusable on a loaded machine), else wall.
      const char* key = c.contains("ratio_cpu_vs_1_token") ? "ratio_cpu_vs_1_token" : "ratio_vs_1_token";
      const nlohmann::json& rows = c.at("rows");
      if (!rows.is_number_integer() || rows.get<int64_t>() < 1 || rows.get<int64_t>() > (int64_t{1} << 20))
        fail("--forward-bench ", path, ": a case's rows must be a whole number in [1, 2^20], got ", rows.dump());
      auto& sum = sums[rows.get<int32_t>()];
      sum.first += c.at(key).get<double>();
      ++sum.second;
    }
    std::vector<std::pair<int32_t, double>> points;
    for (const auto& [rows, s] : sums) points.emplace_back(rows, s.first / s.second);
    return ForwardCost(points, path);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not a `specula bench forward` report (models[0].cases[].rows and ratio_cpu_vs_1_token): ", e.what());
  }
}

// A cost profile's target curve (its batch-1 rows: the tree is one sequence's).
ForwardCost costs_from_profile(const CostProfile& profile) {
  std::vector<std::pair<int32_t, double>> points;
  for (const CostProfile::Point& p : profile.rows)
    points.emplace_back(static_cast<int32_t>(std::min<int64_t>(p.rows, INT32_MAX)), p.cost);
  return ForwardCost(points, profile.file);
}

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0') fail("--acceptance: '", item, "' is not a number (in '", text, "')");
    out.push_back(v);
  }
  validate_positional_acceptance(out, "--acceptance");
  return out;
}

std::string shape_text(const std::vector<int32_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s;
}

void report(std::ostream& os, const std::string& title, const TreeChoice& c) {
  os << title << ": " << c.tree.size() << " nodes, depth " << c.tree.max_depth() << "\n"
     << "  expected tokens per step " << std::setprecision(4) << c.tokens_per_step << ", step cost " << c.step_cost
     << " (t(1) units), tokens per unit time " << c.tokens_per_step / c.step_cost
     << ", predicted speedup vs plain decoding " << c.speedup << "x\n";
  if (!c.shape.empty()) os << "  --tree " << shape_text(c.shape) << "\n";
  os << "  rank paths by depth:\n";
  std::stringstream ranks(format_rank_tree(c.tree));
  std::string line;
  while (std::getline(ranks, line)) os << "    " << line << "\n";
}

po::options_description tree_opt_options() {
  po::options_description desc(
      "specula tree-opt (--acceptance P1,P2,.. | --target MODEL --draft SPEC [--prompt-tokens ..|--prompt-text ..])\n"
      "  (--forward-cost 1:1.0,8:1.1,.. | --forward-bench FILE.json | --cost-profile FILE.json) [--output FILE]\n"
      "  [--output-ranks FILE]\n\n"
      "Chooses the static draft tree that maximises expected tokens per unit time, F(T) / (depth x draft cost\n"
      "+ t(1 + nodes)), under Sequoia's positional acceptance (p_k = P(the rank-k child of an accepted node is\n"
      "accepted), the same at every depth). Prints the optimal tree and the best uniform-per-depth tree (the\n"
      "--tree format) with their predicted tokens per step.\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("acceptance", po::value<std::string>(), "measured p_1,p_2,...: acceptance of the rank-k child (sum <= 1)")
    ("target", po::value<std::string>(), "measure p_k: target model, e.g. transformer:results/models/target")
    ("draft", po::value<std::string>(), "measure p_k: drafter spec (as in generate)")
    ("measure-branching", po::value<int32_t>()->default_value(8), "measure p_k for k = 1..K")
    ("measure-samples", po::value<int64_t>()->default_value(8), "sequences generated to measure p_k")
    ("measure-tokens", po::value<int32_t>()->default_value(128), "tokens per measured sequence")
    ("prompt-tokens", po::value<std::string>(), "prompt token ids for measuring, e.g. 0,3")
    ("prompt-text", po::value<std::string>(), "prompt text for measuring (bytes: byte-level models only)")
    ("seed", po::value<uint64_t>()->default_value(0), "Philox seed of the measurement")
    ("forward-cost", po::value<std::string>(), "t(rows) relative to 1 row: 1:1.0,8:1.1,16:1.3 (linear between)")
    ("forward-bench", po::value<std::string>(), "a `specula bench forward` JSON report (its first model, CPU-time ratios)")
    ("cost-profile", po::value<std::string>(), "a cost profile (`bench forward --cost-profile`, or a report holding one): its target rows, and with --draft the draft model's cost")
    ("draft-cost", po::value<double>(), "drafting cost of one depth level, in t(1) units (default: the --cost-profile's cost of the --draft model, else 0)")
    ("max-nodes", po::value<int32_t>()->default_value(64), "draft nodes at most (also <= the cost table's rows - 1)")
    ("max-depth", po::value<int32_t>()->default_value(8), "tree depth at most (and at most what the drafter drafts)")
    ("output", po::value<std::string>(), "file for the best uniform tree, in the --tree format")
    ("output-ranks", po::value<std::string>(), "file for the optimal tree as rank paths (medusa:/eagle: tree=FILE)")
    ("config", po::value<std::string>(), "INI file with any of these options");
  // clang-format on
  add_sampler_options(desc);
  return desc;
}

// The tree's depth limit against the drafter's (DrafterFactory::max_draft_depth: Medusa drafts one level per
// head), before anything is measured: a --max-depth the user gave beyond it is refused naming both numbers;
// the default is lowered to it with a note. Either way every tree written is one the drafter can draft.
void fit_depth_to_drafter(const po::variables_map& vm, const DrafterFactory& drafter, int32_t& max_depth) {
  const int32_t limit = drafter.max_draft_depth();
  if (limit <= 0 || max_depth <= limit) return;
  if (!vm["max-depth"].defaulted())
    fail_parameter("max_depth", " ", max_depth, " is deeper than ", drafter.description(), " can draft (", limit,
                   " levels); give --max-depth ", limit, " or less");
  std::cout << "max depth " << max_depth << " lowered to " << limit << ": " << drafter.description() << " drafts "
            << limit << " levels at most\n";
  max_depth = limit;
}

// --target and --draft: p_k measured by drafting K candidates at each position of generated sequences.
std::vector<double> measured_acceptance(const po::variables_map& vm, int32_t& max_depth) {
  if (!vm.count("target") || !vm.count("draft"))
    fail("give --acceptance, or --target and --draft to measure the positional acceptance");
  SamplingParams params;
  read_sampler_options(vm, params);
  check_sampler_options(params, INT32_MAX);  // before the target loads
  check_drafter_spec(vm["draft"].as<std::string>());
  check_drafter_vocabulary(vm["draft"].as<std::string>(),
                           language_model_vocab_size(vm["target"].as<std::string>(), "target"),
                           vm["target"].as<std::string>());
  const auto target = load_language_model(vm["target"].as<std::string>(), "target");
  const auto drafter = load_drafter(vm["draft"].as<std::string>(), params, target, params);
  fit_depth_to_drafter(vm, *drafter, max_depth);
  std::vector<Token> prompt;
  if (vm.count("prompt-tokens")) prompt = parse_token_list(vm["prompt-tokens"].as<std::string>(), "prompt-tokens");
  if (vm.count("prompt-text")) {
    if (target->vocab_size() != 256) fail("--prompt-text needs a byte-level target (vocabulary 256)");
    for (unsigned char ch : vm["prompt-text"].as<std::string>()) prompt.push_back(ch);
  }
  if (prompt.empty()) fail("measuring needs a prompt: --prompt-tokens or --prompt-text");
  const int32_t K = vm["measure-branching"].as<int32_t>();
  if (K < 1 || K > 64) fail("--measure-branching must be in 1..64, got ", K);
  const Measured m =
      measure_positional_acceptance(*target, params, *drafter, K, prompt, vm["measure-samples"].as<int64_t>(),
                                    vm["measure-tokens"].as<int32_t>(), vm["seed"].as<uint64_t>());
  std::cout << "measured positional acceptance over " << m.steps << " steps (" << drafter->description() << "):\n";
  for (int32_t k = 0; k < K; ++k)
    std::cout << "  p_" << k + 1 << " = " << std::setprecision(4) << m.p[k] << " +- " << m.std_err[k] << "\n";
  return m.p;
}

// --output: the best uniform tree in the --tree format; --output-ranks: the optimal tree as rank paths.
void write_trees(const po::variables_map& vm, const TreeChoice& best, const TreeChoice& uniform) {
  if (vm.count("output")) {
    const std::string path = vm["output"].as<std::string>();
    write_output_file(path, shape_text(uniform.shape) + "\n", "--output");
    std::cout << "wrote " << path << " (--tree " << shape_text(uniform.shape) << ")\n";
  }
  if (vm.count("output-ranks")) {
    const std::string path = vm["output-ranks"].as<std::string>();
    std::ostringstream text;
    text << "# specula tree-opt: " << best.tree.size() << " nodes, expected tokens per step " << best.tokens_per_step
         << "\n"
         << format_rank_tree(best.tree);
    write_output_file(path, text.str(), "--output-ranks");
    std::cout << "wrote " << path << " (rank paths; e.g. --draft eagle:DIR,tree=" << path << ")\n";
  }
}

}  // namespace

int tree_opt_command(const Args& args) {
  const po::options_description desc = tree_opt_options();
  const po::variables_map vm = parse_options(args, desc, "tree-opt");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (vm.count("forward-cost") + vm.count("forward-bench") + vm.count("cost-profile") != 1)
    fail("give exactly one of --forward-cost, --forward-bench and --cost-profile");
  // Where the trees go, before measuring the acceptance.
  std::vector<std::pair<std::string, std::string>> outputs, inputs;
  for (const char* option : {"output", "output-ranks"})
    if (vm.count(option)) outputs.emplace_back(std::string("--") + option, vm[option].as<std::string>());
  for (const char* option : {"forward-bench", "cost-profile", "config"})
    if (vm.count(option)) inputs.emplace_back(std::string("--") + option, vm[option].as<std::string>());
  check_distinct_files(outputs, inputs);
  for (const auto& [option, path] : outputs) check_output_file_writable(path, option);
  std::optional<CostProfile> profile;
  if (vm.count("cost-profile"))
    profile = with_source("--cost-profile", [&] { return read_cost_profile(vm["cost-profile"].as<std::string>()); });
  // As `run` refuses it: a profile's step costs are its own target's.
  if (profile && vm.count("target") && !same_model_spec(profile->target, vm["target"].as<std::string>()))
    fail("--cost-profile: ", profile->file, " was measured on the target ", profile->target, ", not on --target ",
         vm["target"].as<std::string>(), " (a profile's step costs are its target's)");
  const ForwardCost cost = vm.count("forward-cost")
                               ? ForwardCost::parse(vm["forward-cost"].as<std::string>(), "forward_cost")
                           : vm.count("forward-bench") ? costs_from_bench(vm["forward-bench"].as<std::string>())
                                                       : costs_from_profile(*profile);
  TreeSearchOptions options;
  options.max_nodes = vm["max-nodes"].as<int32_t>();
  if (options.max_nodes < 1) fail("--max-nodes must be >= 1, got ", options.max_nodes);
  options.max_depth = vm["max-depth"].as<int32_t>();
  if (vm.count("acceptance")) {
    if (vm.count("target") || vm.count("draft")) fail("--acceptance is given: drop --target/--draft (or measure)");
    options.acceptance = parse_rates(vm["acceptance"].as<std::string>());
  } else {
    options.acceptance = measured_acceptance(vm, options.max_depth);
  }
  options.draft_cost_per_depth = vm.count("draft-cost") ? vm["draft-cost"].as<double>() : 0.0;
  if (!(options.draft_cost_per_depth >= 0.0 && std::isfinite(options.draft_cost_per_depth)))
    fail("--draft-cost must be a finite number >= 0, got ", options.draft_cost_per_depth);
  // Where the drafting cost comes from: --draft-cost, else the profile's 1-token forward of the --draft model (one
  // draft forward a depth level), else nothing: drafting counted as free, which favours deep trees.
  std::string draft_cost_source = "--draft-cost";
  if (!vm.count("draft-cost")) {
    const std::optional<double> measured =
        profile && vm.count("draft") ? profile->draft_cost(vm["draft"].as<std::string>()) : std::nullopt;
    if (measured) {
      options.draft_cost_per_depth = *measured;
      draft_cost_source = "the cost profile's " + vm["draft"].as<std::string>();
    } else {
      draft_cost_source = "not given: drafting counted as free (give --draft-cost)";
    }
  }

  if (profile)
    std::cout << "cost profile " << profile->file << ": " << profile->target << " on " << profile->machine << " ("
              << profile->device << ")\n";
  std::cout << "positional acceptance p_k:";
  for (double p : options.acceptance) std::cout << " " << std::setprecision(4) << p;
  std::cout << "\nforward cost t(rows)/t(1):";
  for (const auto& [rows, c] : cost.points()) std::cout << " " << rows << ":" << std::setprecision(4) << c;
  std::cout << "\ndraft cost per depth " << options.draft_cost_per_depth << " (" << draft_cost_source << "); at most "
            << std::min(options.max_nodes, cost.max_rows() - 1) << " nodes, depth " << options.max_depth << "\n\n";
  const TreeChoice best = optimal_tree(options, cost);
  const TreeChoice uniform = best_uniform_tree(options, cost);
  report(std::cout, "optimal tree (Sequoia DP)", best);
  std::cout << "\n";
  report(std::cout, "best uniform tree (the --tree format)", uniform);
  if (best.shape.empty())
    std::cout << "\nthe optimum is not uniform per depth: --tree takes the uniform one (" << std::setprecision(4)
              << uniform.tokens_per_step / uniform.step_cost / (best.tokens_per_step / best.step_cost) * 100
              << "% of the optimum's tokens per unit time); the head drafters take the optimum with tree=FILE\n";
  if (uniform.tree.size() == 0) {
    // An earlier run's tree left at --output would be read by a script as this run's answer: it is removed.
    std::cout << "\nno tree beats plain decoding at these costs: nothing written";
    for (const char* option : {"output", "output-ranks"}) {
      std::error_code ec;
      if (vm.count(option) && fs::is_regular_file(vm[option].as<std::string>(), ec)) {
        if (!fs::remove(vm[option].as<std::string>(), ec) || ec)
          fail("--", option, ": cannot remove the earlier '", vm[option].as<std::string>(), "': ", ec.message());
        std::cout << "; removed the earlier --" << option << " file " << vm[option].as<std::string>();
      }
    }
    std::cout << "\n";
    return 0;
  }
  write_trees(vm, best, uniform);
  return 0;
}

}  // namespace specula::cli
