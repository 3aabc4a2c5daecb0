// `specula <command> [options]`: the one executable of the harness.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "harness/cli/commands.h"
#include "harness/experiment/environment.h"
#include "harness/io/output_file.h"
#include "harness/models/registry/torch_module.h"
#include "kernels/shared/error.h"

namespace {

struct Command {
  std::function<int(const specula::cli::Args&)> run;
  const char* summary;
};

// A command of the LibTorch module (harness/models/registry/torch_module.h): its entry "command NAME", declared
// in commands.h like the others.
std::function<int(const specula::cli::Args&)> torch_command(const char* entry) {
  return [entry](const specula::cli::Args& args) {
    return specula::torch_function<decltype(&specula::cli::train_command)>(entry)(args);
  };
}

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> table = {
      {"sample", {specula::cli::sample_command, "sample tokens from one logits row through the sampler pipeline"}},
      {"generate", {specula::cli::generate_command, "generate with plain or speculative decoding"}},
      {"run", {specula::cli::run_command, "run an experiment config (sweeps, baseline, summary, plots)"}},
      {"merge", {specula::cli::merge_command, "merge the results folders of sweep shards"}},
      {"plot", {specula::cli::plot_command, "plot a results folder"}},
      {"bench", {specula::cli::bench_command, "run benchmarks: sampler, verify, forward, end-to-end, constraint, all"}},
      {"train", {torch_command("command train"), "train a transformer language model on a text corpus"}},
      {"train-ngram", {specula::cli::train_ngram_command, "fit a Kneser-Ney n-gram draft model to a corpus"}},
      {"train-medusa", {torch_command("command train-medusa"), "train Medusa heads on a frozen target"}},
      {"train-eagle", {torch_command("command train-eagle"), "train an EAGLE head on a frozen target"}},
      {"tree-opt", {specula::cli::tree_opt_command, "choose a draft tree from measured acceptance and costs"}},
      {"export", {torch_command("command export"), "write a transformer checkpoint as a Hugging Face folder"}},
      {"convert-heads",
       {torch_command("command convert-heads"), "store Medusa or EAGLE heads' matrices in another dtype"}},
  };
  return table;
}

void usage(std::ostream& os) {
  os << "usage: specula <command> [options]\n\ncommands:\n";
  size_t width = 0;
  for (const auto& entry : commands()) width = std::max(width, entry.first.size());
  for (const auto& [name, cmd] : commands())
    os << "  " << name << std::string(width + 2 - name.size(), ' ') << cmd.summary << "\n";
  os << "  version" << std::string(width - 5, ' ')
     << "print the version, git revision and build type (also --version)\n";
  os << "\n`specula <command> --help` describes a command's options.\n";
}

}  // namespace

// What the program wrote to standard output, checked as a command's is: 0 when it all got there, else 1 (a full disk,
// a closed pipe) with the error said.
int standard_output_status(const std::string& command) {
  try {
    specula::check_standard_output();
    return 0;
  } catch (const specula::Error& e) {
    std::cerr << "specula" << (command.empty() ? "" : " " + command) << ": error: " << e.what() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : standard_output_status("");
  }
  if (std::string(argv[1]) == "--version" || std::string(argv[1]) == "version") {
    const std::vector<std::string> rest(argv + 2, argv + argc);
    if (rest.size() == 1 && (rest[0] == "--help" || rest[0] == "-h")) {
      std::cout << "specula version (or specula --version)\n  prints the version, git revision and build type\n";
      return standard_output_status("version");
    }
    if (!rest.empty()) {
      std::cerr << "specula version: error: unexpected argument '" << rest[0] << "' (it takes none)\n";
      return 1;
    }
    std::cout << specula::version_text() << "\n";
    return standard_output_status("version");
  }
  const auto it = commands().find(argv[1]);
  if (it == commands().end()) {
    std::cerr << "specula: unknown command '" << argv[1] << "'\n";
    usage(std::cerr);
    return 2;
  }
  try {
    const int status = it->second.run(specula::cli::Args(argv + 2, argv + argc));
    specula::check_standard_output();  // output lost to a full disk or a closed pipe is a failure
    return status;
  } catch (const specula::ParameterError& e) {
    // A lower layer named the parameter; on the command line it is the flag of the same name.
    std::string flag = e.parameter();
    std::replace(flag.begin(), flag.end(), '_', '-');
    std::cerr << "specula " << argv[1] << ": error: --" << flag << e.detail() << "\n";
    return 1;
  } catch (const specula::Error& e) {
    std::cerr << "specula " << argv[1] << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "specula " << argv[1] << ": error: " << e.what() << "\n";
    return 1;
  }
}
