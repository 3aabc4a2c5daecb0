// The device side of a batched decoding step, behind one interface with two backends:
//   cuda       one CUDA stream (its own non-blocking one, or the caller's, e.g. LibTorch's), device buffers
//              allocated once and grown geometrically,
//              page-locked host staging buffers, the CUDA kernels;
//   cuda-host  host memory standing in for device memory (copies are memcpy), the kernels' row code under
//              block emulation (kernels/emulated_kernels.h).
// The caller (verify/device/batch_verifier.h) packs a step's inputs into host staging buffers, enqueues the
// uploads, the launches and the downloads, and synchronises once; everything between is stream-ordered.
// Plain C++: no CUDA headers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/cuda_device.h"
#include "kernels/draft_children.h"
#include "kernels/emulated_kernels.h"
#include "kernels/law_values.h"
#include "kernels/pending_counts.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"

namespace specula {

class KernelStream {
 public:
  virtual ~KernelStream();
  KernelStream(const KernelStream&) = delete;
  KernelStream& operator=(const KernelStream&) = delete;

  virtual Device device() const = 0;

  // A device array of at least `bytes` for buffer `slot` (a small integer the caller chooses), kept across
  // calls and grown geometrically; its contents are undefined after it grows. Waits for the stream before
  // growing, since enqueued work may still use the old array.
  void* device_buffer(int slot, size_t bytes);
  // A host staging array of at least `bytes` (page-locked on CUDA, so copies are asynchronous), same rules. The
  // staging guard: a slot an upload was enqueued from since the last synchronize() may still be read by that copy, so
  // handing it out again first synchronizes the stream and counts it in staging_waits(). A well laid-out step never
  // does (its slots are distinct, each reused after a wait for results), so the guard costs nothing per upload: no
  // event is recorded, and the rare violation pays a whole drain, which the count makes visible.
  void* host_buffer(int slot, size_t bytes);
  template <typename T>
  T* device_array(int slot, size_t count) {
    return static_cast<T*>(device_buffer(slot, count * sizeof(T)));
  }
  template <typename T>
  T* host_array(int slot, size_t count) {
    return static_cast<T*>(host_buffer(slot, count * sizeof(T)));
  }
  // Stages `host` in host buffer `slot`, enqueues its copy to device buffer `slot` and returns the device
  // array; null for an empty vector (an optional array no row uses).
  template <typename T>
  const T* upload(int slot, const std::vector<T>& host) {
    if (host.empty()) return nullptr;
    T* staging = host_array<T>(slot, host.size());
    std::copy(host.begin(), host.end(), staging);
    T* device = device_array<T>(slot, host.size());
    to_device(device, staging, host.size() * sizeof(T));
    return device;
  }
  // Bytes held in device and host buffers (what a step's batch costs in memory): each slot's largest request with up
  // to half again for growth (at least 256 bytes, and at least the allocation floor).
  size_t device_bytes() const;
  size_t host_bytes() const;
  // The sum over device slots of the largest size each was asked for: what a caller's bound on a step's buffers
  // (device_step_bytes in verify/device/batch_verifier.h) must cover.
  size_t requested_device_bytes() const;
  // Buffers grown while work was enqueued: each drained the stream first (enqueued copies and launches may still use
  // the old array). A run's first steps grow its buffers; a steady step grows none.
  uint64_t growth_drains() const { return growth_drains_; }
  // The least bytes any buffer is allocated with from now on (a run's reservation, BatchVerifier::reserve): its small
  // per-row arrays then hold its largest step from their first allocation, and never grow.
  void set_allocation_floor(size_t bytes) { allocation_floor_ = bytes; }

  // Stream-ordered copies between a host staging buffer and a device buffer.
  void to_device(void* device_dst, const void* host_src, size_t bytes);
  void to_host(void* host_dst, const void* device_src, size_t bytes) {
    downloaded_bytes_ += bytes;
    ++downloads_;
    copy_to_host(host_dst, device_src, bytes);
  }
  // A stream-ordered copy within device memory of `height` runs of `width` bytes, run r from src + r * src_pitch to
  // dst + r * dst_pitch (cudaMemcpy2DAsync): a batch's ids regrouped, e.g. draws laid out depth by depth gathered
  // sequence by sequence (BatchVerifier::keep_planned_ids). Moves nothing across the bus.
  void copy_within_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t height) {
    if (width > dst_pitch || width > src_pitch) fail("kernel stream: a copy's runs are wider than their pitch");
    if (width && height) copy_device_to_device(dst, dst_pitch, src, src_pitch, width, height);
  }
  // Bytes copied each way since the stream was made: what a step moves between host and device (a step whose
  // logits a model wrote into device memory uploads no logits).
  uint64_t uploaded_bytes() const { return uploaded_bytes_; }
  uint64_t downloaded_bytes() const { return downloaded_bytes_; }
  // Copies to the host since the stream was made: on a GPU each is a wait a step pays once its results are needed.
  uint64_t downloads() const { return downloads_; }
  // Staging slots handed out again while an upload from them may still have been in flight (the guard's drains): the
  // same count on CUDA and on cuda-host (whose copies are immediate, but a GPU's might not be), so CI sees a step that
  // reuses a staging buffer too early. 0 for a step laid out well.
  uint64_t staging_waits() const { return staging_waits_; }

  virtual void fused_sampler(const SamplerKernelParams& p) = 0;
  virtual void chain_verify(const ChainVerifyParams& p) = 0;
  virtual void block_verify(const BlockVerifyParams& p) = 0;
  virtual void tree_verify(const TreeVerifyParams& p) = 0;
  virtual void ranked_children(const RankedChildrenParams& p) = 0;
  virtual void sibling_draws(const SiblingDrawParams& p) = 0;
  virtual void pending_counts(const PendingCountsParams& p) = 0;
  virtual void law_values(const LawValuesParams& p) = 0;

  // Waits for everything enqueued; throws Error on an asynchronous failure. Every staging slot is free again after.
  void synchronize() {
    wait_for_stream();
    std::fill(staging_in_flight_.begin(), staging_in_flight_.end(), 0);
  }

  // Free device memory as the backend sees it (cudaMemGetInfo; the host's MemAvailable for cuda-host), or
  // -1 where it is unknown.
  virtual int64_t free_device_memory() const = 0;

 protected:
  KernelStream() = default;
  virtual void wait_for_stream() = 0;
  virtual void copy_to_device(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void copy_device_to_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                                     size_t height) = 0;
  virtual void* allocate_device(size_t bytes) = 0;
  virtual void free_device(void* p) = 0;
  virtual void* allocate_host(size_t bytes) = 0;
  virtual void free_host(void* p) = 0;
  // Frees every buffer; a backend's destructor calls it while its allocator still works.
  void release_buffers();

 private:
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
    size_t requested = 0;  // the largest size asked for
  };
  void* grow(std::vector<Buffer>& pool, int slot, size_t bytes, bool device);
  // The host slot whose buffer holds `p`, or -1 (an upload from memory the stream does not own).
  int host_slot_of(const void* p) const;
  std::vector<Buffer> device_;
  std::vector<Buffer> host_;
  std::vector<uint8_t> staging_in_flight_;  // per host slot: an upload from it enqueued since the last synchronize()
  uint64_t uploaded_bytes_ = 0, downloaded_bytes_ = 0, downloads_ = 0, staging_waits_ = 0, growth_drains_ = 0;
  size_t allocation_floor_ = 0;
};

// The stream of `device` (cuda or cuda_host; throws for cpu). cuda throws "no CUDA device: ..." where there
// is none. `emulation` configures cuda_host. `cuda_stream`, for cuda: a stream the caller already orders device
// work on (a cudaStream_t; null is the legacy default stream), e.g. LibTorch's current stream, on which a model
// wrote the logits the kernels read: the kernels and copies then follow that work in stream order, and the stream
// is borrowed (neither created nor destroyed). Without it the backend makes its own non-blocking stream.
std::unique_ptr<KernelStream> make_kernel_stream(Device device, const EmulationOptions& emulation = {},
                                                 std::optional<void*> cuda_stream = std::nullopt);

}  // namespace specula
