#include "harness/models/transformer/huge_page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "harness/models/transformer/skinny_linear.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

constexpr size_t kHugePage = static_cast<size_t>(kHugePageBytes);

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The value in kB after `key` in a /proc file of "Key: value kB" lines, in bytes; -1 where there is none.
long long proc_kb_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string word;
  long long kb = 0;
  while (in >> word) {
    if (word == key && in >> kb) return kb * 1024;
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

}  // namespace

HugePageBuffer::HugePageBuffer(size_t bytes) {
  size_ = round_up(bytes == 0 ? 1 : bytes, kHugePage);
  // Map one huge page more than asked, then give back the slack before the first 2 MB boundary and after the
  // end: mmap itself promises only 4 KB alignment.
  const size_t mapped = size_ + kHugePage;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) fail("cannot map ", bytes, " bytes for the decoding step's weights: ", std::strerror(errno));
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw), aligned = round_up(start, kHugePage);
  if (aligned > start) munmap(raw, aligned - start);
  const size_t tail = start + mapped - (aligned + size_);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size_), tail);
  data_ = reinterpret_cast<void*>(aligned);
  advised_ = madvise(data_, size_, MADV_HUGEPAGE) == 0;
}

HugePageBuffer::~HugePageBuffer() {
  if (data_) munmap(data_, size_);
}

bool decoding_weights_on_huge_pages() {
  static const bool on = [] {
    const char* forced = std::getenv("SPECULA_HUGE_PAGES");
    if (!forced || !*forced || std::strcmp(forced, "on") == 0) return true;
    if (std::strcmp(forced, "off") == 0) return false;
    fail("SPECULA_HUGE_PAGES=", forced, ": expected on or off");
  }();
  return on && decoding_weight_layout() == WeightLayout::panels;
}

long long process_huge_page_bytes() { return proc_kb_field("/proc/self/smaps_rollup", "AnonHugePages:"); }

long long process_resident_bytes() { return proc_kb_field("/proc/self/status", "VmRSS:"); }

long long process_peak_resident_bytes() { return proc_kb_field("/proc/self/status", "VmHWM:"); }

bool reset_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5\n";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace specula
