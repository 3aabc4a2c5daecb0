// `specula bench <what>`: benchmarks (not tests). Results go to results/bench/ as JSON.
#include <iostream>

#include "harness/cli/commands.h"
#include "verify/error.h"

namespace specula::cli {

int bench_command(const Args& args) {
  if (args.empty() || args[0] == "--help") {
    std::cout << "usage: specula bench sampler [options]\n";
    return args.empty() ? 2 : 0;
  }
  fail("unknown benchmark '", args[0], "' (known: sampler)");
}

}  // namespace specula::cli
