#include "harness/models/registry/torch_module.h"

#include <dlfcn.h>
#include <omp.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <string>

#include "kernels/shared/error.h"
#include "kernels/shared/thread_limit.h"

namespace specula {
namespace {

struct TorchEntries {
  std::mutex mutex;
  const TorchEntry* table = nullptr;
  int threads = 0;  // set_compute_threads' last value, applied when the module loads (0: none)
};

TorchEntries& entries() {
  static TorchEntries e;
  return e;
}

// The module beside the executable (a copied build), else where the build put it.
std::string module_path() {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/') + 1);
    const std::string beside = dir + "libspecula_torch.so";
    if (access(beside.c_str(), R_OK) == 0) return beside;
  }
  return SPECULA_TORCH_MODULE;
}

void* find(const TorchEntry* table, const char* name) {
  for (const TorchEntry* e = table; e->name; ++e)
    if (std::strcmp(e->name, name) == 0) return e->function;
  return nullptr;
}

// Gives LibTorch the thread count set_compute_threads last set (none yet: nothing to do); with the lock held.
void apply_threads_locked(const TorchEntries& e) {
  if (e.threads > 0 && e.table)
    if (void* set = find(e.table, "set_torch_threads")) reinterpret_cast<void (*)(int)>(set)(e.threads);
}

// The entry table, loading the module when none is registered; with the lock held.
const TorchEntry* table_locked(TorchEntries& e) {
  if (e.table) return e.table;
  const std::string path = module_path();
  // RTLD_LOCAL: the module's own copies of Specula's libraries stay its own (it links them with hidden symbols).
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) fail("cannot load the LibTorch module ", path, ": ", dlerror());
  using Entries = const TorchEntry* (*)();
  const auto get = reinterpret_cast<Entries>(dlsym(handle, "specula_torch_entries"));
  if (!get) fail("the LibTorch module ", path, " has no entry table (specula_torch_entries)");
  e.table = get();
  apply_threads_locked(e);
  return e.table;
}

}  // namespace

void register_torch_entries(const TorchEntry* table) {
  TorchEntries& e = entries();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.table = table;
  apply_threads_locked(e);
}

void* torch_entry(const char* name) {
  TorchEntries& e = entries();
  std::lock_guard<std::mutex> lock(e.mutex);
  void* function = find(table_locked(e), name);
  if (!function) fail("the LibTorch module has no entry '", name, "'");
  return function;
}

void set_compute_threads(int threads) {
  check_thread_count(threads);
  omp_set_num_threads(threads);
  TorchEntries& e = entries();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.threads = threads;
  apply_threads_locked(e);
}

}  // namespace specula
