// The LibTorch entries below the command line (harness/models/registry/torch_module.h): the model kinds, the
// head drafters and LibTorch's threads. The module's table (torch_entries.cpp) and the torch tests' own
// (tests/torch_test_entries.cpp) both list them from here. Each entry is its declaration's function, so both
// ends of a call share one type.
#pragma once

#include "draft/heads/head_drafters.h"
#include "harness/models/hf/hf_model.h"
#include "harness/models/registry/torch_module.h"
#include "harness/models/transformer/compute_threads.h"
#include "harness/models/transformer/transformer_language_model.h"

namespace specula {

template <class Function>
void* torch_entry_address(Function f) {
  return reinterpret_cast<void*>(f);
}

}  // namespace specula

#define SPECULA_TORCH_MODEL_ENTRIES                                                                  \
  {"load_transformer", ::specula::torch_entry_address(&::specula::load_transformer_language_model)}, \
      {"load_hf", ::specula::torch_entry_address(&::specula::load_hf_language_model)},               \
      {"set_torch_threads", ::specula::torch_entry_address(&::specula::set_torch_threads)},          \
      {"make_head_drafter", ::specula::torch_entry_address(&::specula::make_head_drafter)},
