// The torch tests link LibTorch and the LibTorch libraries themselves: they serve the model and drafter
// registries' LibTorch entries (harness/models/registry/torch_module.h) from this binary instead of loading the
// module, so a model a test loads by spec is the same code as the one it builds directly.
#include "draft/heads/head_drafters.h"
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
    {nullptr, nullptr},
};

const bool kRegistered = (specula::register_torch_entries(kEntries), true);

}  // namespace
