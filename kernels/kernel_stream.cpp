#include "kernels/kernel_stream.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/shared/error.h"
#include "kernels/shared/host_memory.h"

namespace specula {

KernelStream::~KernelStream() = default;

void KernelStream::release_buffers() {
  for (Buffer& b : device_)
    if (b.ptr) free_device(b.ptr);
  for (Buffer& b : host_)
    if (b.ptr) free_host(b.ptr);
  device_.clear();
  host_.clear();
}

void* KernelStream::grow(std::vector<Buffer>& pool, int slot, size_t bytes, bool device) {
  if (slot < 0 || slot > 255) fail("kernel stream: buffer slot must be in [0, 255], got ", slot);
  if (pool.size() <= static_cast<size_t>(slot)) pool.resize(static_cast<size_t>(slot) + 1);
  Buffer& b = pool[static_cast<size_t>(slot)];
  b.requested = std::max(b.requested, bytes);
  if (bytes <= b.bytes && b.ptr) return b.ptr;
  if (b.ptr) {
    ++growth_drains_;
    synchronize();  // enqueued copies and launches may still use the old array
    device ? free_device(b.ptr) : free_host(b.ptr);
  }
  b.ptr = nullptr;
  b.bytes = 0;
  // Geometric growth: a batch that grows step by step reallocates O(log) times.
  const size_t want = std::max({bytes < 256 ? size_t{256} : bytes + bytes / 2, allocation_floor_});
  b.ptr = device ? allocate_device(want) : allocate_host(want);
  b.bytes = want;
  return b.ptr;
}

void* KernelStream::device_buffer(int slot, size_t bytes) { return grow(device_, slot, bytes, true); }

void* KernelStream::host_buffer(int slot, size_t bytes) {
  if (slot >= 0 && static_cast<size_t>(slot) < staging_in_flight_.size() && staging_in_flight_[slot]) {
    ++staging_waits_;
    synchronize();  // the copy from this slot may not have run yet
  }
  return grow(host_, slot, bytes, false);
}

int KernelStream::host_slot_of(const void* p) const {
  const char* c = static_cast<const char*>(p);
  for (size_t s = 0; s < host_.size(); ++s) {
    const char* b = static_cast<const char*>(host_[s].ptr);
    if (b && c >= b && c < b + host_[s].bytes) return static_cast<int>(s);
  }
  return -1;
}

void KernelStream::to_device(void* device_dst, const void* host_src, size_t bytes) {
  uploaded_bytes_ += bytes;
  copy_to_device(device_dst, host_src, bytes);
  if (!bytes) return;
  if (const int slot = host_slot_of(host_src); slot >= 0) {
    if (staging_in_flight_.size() <= static_cast<size_t>(slot))
      staging_in_flight_.resize(static_cast<size_t>(slot) + 1);
    staging_in_flight_[static_cast<size_t>(slot)] = 1;
  }
}

size_t KernelStream::device_bytes() const {
  size_t total = 0;
  for (const Buffer& b : device_) total += b.bytes;
  return total;
}
size_t KernelStream::requested_device_bytes() const {
  size_t total = 0;
  for (const Buffer& b : device_) total += b.requested;
  return total;
}
size_t KernelStream::host_bytes() const {
  size_t total = 0;
  for (const Buffer& b : host_) total += b.bytes;
  return total;
}

namespace {

// --device cuda-host: "device" memory is host memory, kept apart from the staging buffers so that a
// missing copy shows up as stale data, as it would on a GPU. Copies happen at once (the stream is the
// calling thread), launches run the emulated kernels.
class EmulatedStream final : public KernelStream {
 public:
  explicit EmulatedStream(const EmulationOptions& o) : options_(o) {
    check_emulation_options(o);
    options_.group_workspace = &group_workspace_;  // kept across launches, as the CUDA stream keeps its own
  }
  ~EmulatedStream() override { release_buffers(); }
  Device device() const override { return Device::cuda_host; }
  void fused_sampler(const SamplerKernelParams& p) override { emulate_fused_sampler(p, options_); }
  void chain_verify(const ChainVerifyParams& p) override { emulate_chain_verify(p, options_); }
  void block_verify(const BlockVerifyParams& p) override { emulate_block_verify(p, options_); }
  void tree_verify(const TreeVerifyParams& p) override { emulate_tree_verify(p, options_); }
  void ranked_children(const RankedChildrenParams& p) override { emulate_ranked_children(p, options_); }
  void sibling_draws(const SiblingDrawParams& p) override { emulate_sibling_draws(p, options_); }
  void pending_counts(const PendingCountsParams& p) override { add_pending_counts_host(p); }
  void law_values(const LawValuesParams& p) override { read_law_values_host(p); }
  int64_t free_device_memory() const override { return mem_available_bytes(); }

 protected:
  void wait_for_stream() override {}
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_device_to_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                             size_t height) override {
    for (size_t r = 0; r < height; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
  }
  void* allocate_device(size_t bytes) override { return allocate(bytes, "device"); }
  void free_device(void* p) override { std::free(p); }
  void* allocate_host(size_t bytes) override { return allocate(bytes, "host staging"); }
  void free_host(void* p) override { std::free(p); }

 private:
  static void* allocate(size_t bytes, const char* what) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);  // 16-byte alignment enables the 4-wide dispatch
    if (!p) fail("cuda-host: cannot allocate a ", bytes, "-byte ", what, " buffer");
    return p;
  }
  EmulationOptions options_;
  std::vector<uint64_t> group_workspace_;  // the global-memory exchange's (options_.group_workspace)
};

}  // namespace

// Defined in cuda_kernel_stream.cpp with CUDA, in cuda_unavailable.cpp without.
std::unique_ptr<KernelStream> make_cuda_kernel_stream(std::optional<void*> borrowed);

std::unique_ptr<KernelStream> make_kernel_stream(Device device, const EmulationOptions& emulation,
                                                 std::optional<void*> cuda_stream) {
  switch (device) {
    case Device::cuda:
      return make_cuda_kernel_stream(cuda_stream);
    case Device::cuda_host:
      return std::make_unique<EmulatedStream>(emulation);
    case Device::cpu:
      break;
  }
  fail("kernel stream: device ", device_name(device), " runs no kernels");
}

}  // namespace specula
