// The LibTorch module's entry table (harness/models/registry/torch_module.h): what the `specula` executable
// reaches in libspecula_torch.so. Each entry is its declaration's function, so both ends share one type.
#include "draft/heads/head_drafters.h"
#include "harness/bench/forward_benchmark.h"
#include "harness/bench/sampler_benchmark.h"
#include "harness/cli/commands.h"
#include "harness/models/hf/hf_model.h"
#include "harness/models/registry/torch_module.h"
#include "harness/models/transformer/compute_threads.h"
#include "harness/models/transformer/transformer_language_model.h"

namespace {

template <class Function>
void* entry(Function f) {
  return reinterpret_cast<void*>(f);
}

const specula::TorchEntry kEntries[] = {
    {"load_transformer", entry(&specula::load_transformer_language_model)},
    {"load_hf", entry(&specula::load_hf_language_model)},
    {"set_torch_threads", entry(&specula::set_torch_threads)},
    {"make_head_drafter", entry(&specula::make_head_drafter)},
    {"run_sampler_benchmarks", entry(&specula::bench::run_sampler_benchmarks)},
    {"forward_benchmark_command", entry(&specula::bench::forward_benchmark_command)},
    {"command train", entry(&specula::cli::train_command)},
    {"command train-medusa", entry(&specula::cli::train_medusa_command)},
    {"command train-eagle", entry(&specula::cli::train_eagle_command)},
    {"command export", entry(&specula::cli::export_command)},
    {nullptr, nullptr},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const specula::TorchEntry* specula_torch_entries() {
  return kEntries;
}
