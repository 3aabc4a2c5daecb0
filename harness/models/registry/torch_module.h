// LibTorch's half of Specula — the transformer: and hf: model kinds, the Medusa and EAGLE drafters, training,
// export and the LibTorch benchmarks — is reached through named entries. The `specula` executable does not link
// LibTorch: loading its ~290 shared libraries and registering its operators takes about a second, which every
// command on table or n-gram models (and every test that starts the binary) would pay. Its entries come from
// the module libspecula_torch.so (harness/cli/torch_entries.cpp), loaded the first time one is needed. A binary
// that links LibTorch itself (the torch tests) registers the same entries at start-up instead.
#pragma once

namespace specula {

struct TorchEntry {
  const char* name;  // e.g. "load_transformer"; a null name ends a table
  void* function;
};

// Serves `entries` (ended by a null name) instead of loading the module.
void register_torch_entries(const TorchEntry* entries);

// The entry `name`, loading the module on first use. Throws Error naming the module and the loader's message
// when it cannot be loaded, or the entry when the module lacks it.
void* torch_entry(const char* name);

// The entry `name` as the function type of its declaration, e.g.
// torch_function<decltype(&make_head_drafter)>("make_head_drafter"): both ends name the same declaration.
template <class Function>
Function torch_function(const char* name) {
  return reinterpret_cast<Function>(torch_entry(name));
}

// Threads for model compute: OpenMP's now, LibTorch's intra-op pool now or when the module is loaded.
void set_compute_threads(int threads);

}  // namespace specula
