// Subcommands of the `specula` executable. Each takes the arguments after its name and returns the
// process exit code; errors are thrown as specula::Error and reported by main.
#pragma once

#include <string>
#include <vector>

namespace specula::cli {

using Args = std::vector<std::string>;

int sample_command(const Args& args);
int bench_command(const Args& args);
int bench_end_to_end(const Args& args);          // `specula bench end-to-end`
int bench_forward_command(const Args& args);     // `specula bench forward`
int bench_constraint_command(const Args& args);  // `specula bench constraint`
// `specula bench sampler|verify --device cuda` (bench_cuda_command.cpp); whether the bench arguments ask for
// it (`--device cuda` or `--device=cuda`; an unknown device is an Error); the arguments without `--device cpu`.
int bench_cuda_command(const Args& args);
bool bench_wants_cuda(const Args& args);
Args without_device_option(const Args& args);
int generate_command(const Args& args);
int run_command(const Args& args);
int merge_command(const Args& args);
int plot_command(const Args& args);
int train_command(const Args& args);
int train_ngram_command(const Args& args);
int train_medusa_command(const Args& args);
int train_eagle_command(const Args& args);
int tree_opt_command(const Args& args);
int export_command(const Args& args);
int convert_heads_command(const Args& args);

}  // namespace specula::cli
