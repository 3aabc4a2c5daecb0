// The torch tests link LibTorch and the LibTorch libraries themselves: they serve the model and drafter
// registries' LibTorch entries (harness/models/registry/torch_module.h) from this binary instead of loading the
// module, so a model a test loads by spec is the same code as the one it builds directly.
#include "harness/cli/torch_model_entries.h"

namespace {

const specula::TorchEntry kEntries[] = {SPECULA_TORCH_MODEL_ENTRIES{nullptr, nullptr}};

const bool kRegistered = (specula::register_torch_entries(kEntries), true);

}  // namespace
