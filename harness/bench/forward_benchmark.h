// `specula bench forward`: what one target forward costs as a function of how many rows it runs: a 1-token
// decode step, a K-token chunk (K = 1, 2, 4, 8: chain verification) and a whole token tree with its
// ancestor mask (e.g. shapes 2,2,1 and 4,2,1), each after the same cached context, reported as ratios to the
// 1-token forward measured in the same run. Those ratios are the t_target(n) / t_target(1) of the
// speculative speedup formulas (verify/ALGORITHMS.md §7). Torch-free header; the work is in forward_benchmark.cpp.
#pragma once

#include <string>
#include <vector>

namespace specula::bench {

// Parses the options after `specula bench forward`, runs, prints a table and writes the JSON report.
int forward_benchmark_command(const std::vector<std::string>& args);

}  // namespace specula::bench
