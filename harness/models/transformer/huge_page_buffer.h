// Memory for the weights the decoding step streams, on transparent 2 MB pages where the kernel grants them.
//
// Why: a decoding step reads every matrix once, 55-110 MB for the bundled 27M target, gigabytes for real ones. On
// 4 KB pages that is a TLB miss every 4 KB of the stream (13 000 page walks a step for 55 MB), and the hardware
// prefetchers stop at each page boundary. Where transparent huge pages are in `madvise` mode, only memory marked
// MADV_HUGEPAGE before it is first touched gets 2 MB pages; LibTorch's allocator does not mark it. The gain is
// largest where the step is bound by the weight stream (one row) and smallest where arithmetic dominates (a tree):
// results/README.md. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specula {

constexpr int64_t kHugePageBytes = int64_t{2} << 20;

class HugePageBuffer {
 public:
  // `bytes` of zeroed memory, 2 MB-aligned and advised MADV_HUGEPAGE (rounded up to whole 2 MB pages). Throws
  // Error naming the size if the mapping fails; where the advice is refused (a kernel without transparent huge
  // pages) the memory is still usable, on small pages, and huge_pages_advised() says so.
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  bool huge_pages_advised() const { return advised_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;  // mapped bytes (a multiple of 2 MB)
  bool advised_ = false;
};

// Whether inference models move their packed matrices into a HugePageBuffer (pack_matrices_for_decoding): yes
// when they pack them (decoding_weight_layout() is panels), unless the environment variable SPECULA_HUGE_PAGES
// is `off` (read once; `on` or unset: yes; anything else fails naming it). How the two are compared end to
// end, and a way out where 2 MB pages cost more than they give (a machine short of contiguous memory, where the
// kernel's compaction would stall the load).
bool decoding_weights_on_huge_pages();

// Bytes of the calling process's memory on transparent huge pages (AnonHugePages of /proc/self/smaps_rollup; a
// multiple of 2 MB), and its resident set (VmRSS of /proc/self/status), or -1 where the kernel does not say:
// recorded with benchmark results.
long long process_huge_page_bytes();
long long process_resident_bytes();
// The peak of that resident set since the process began or since the last reset_peak_resident (VmHWM), -1 where
// the kernel does not say; reset_peak_resident sets the peak to the present resident set (writes 5 to
// /proc/self/clear_refs) and says whether it could.
long long process_peak_resident_bytes();
bool reset_peak_resident();

}  // namespace specula
