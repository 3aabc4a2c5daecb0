// The LibTorch module's entry table (harness/models/registry/torch_module.h): what the `specula` executable
// reaches in libspecula_torch.so: the entries below the command line (torch_model_entries.h), the LibTorch
// benchmarks and commands.
#include "harness/bench/forward_benchmark.h"
#include "harness/bench/sampler_benchmark.h"
#include "harness/bench/torch_sampler_baseline.h"
#include "harness/bench/torch_verify_baseline.h"
#include "harness/cli/commands.h"
#include "harness/cli/torch_model_entries.h"

namespace {

using specula::torch_entry_address;

const specula::TorchEntry kEntries[] = {
    SPECULA_TORCH_MODEL_ENTRIES  //
    {"run_sampler_benchmarks", torch_entry_address(&specula::bench::run_sampler_benchmarks)},
    {"run_forward_benchmark", torch_entry_address(&specula::bench::run_forward_benchmark)},
    {"time_torch_sampler", torch_entry_address(&specula::bench::time_torch_sampler)},
    {"time_torch_chain_verify", torch_entry_address(&specula::bench::time_torch_chain_verify)},
    {"command train", torch_entry_address(&specula::cli::train_command)},
    {"command train-medusa", torch_entry_address(&specula::cli::train_medusa_command)},
    {"command train-eagle", torch_entry_address(&specula::cli::train_eagle_command)},
    {"command export", torch_entry_address(&specula::cli::export_command)},
    {"command convert-heads", torch_entry_address(&specula::cli::convert_heads_command)},
    {nullptr, nullptr},
};

// The module's own (hidden) copy of the loader serves this table too, so code inside the module that reaches an
// entry (export loading a model by spec) does not load the module again.
const bool kRegistered = (specula::register_torch_entries(kEntries), true);

}  // namespace

extern "C" __attribute__((visibility("default"))) const specula::TorchEntry* specula_torch_entries() {
  return kEntries;
}
