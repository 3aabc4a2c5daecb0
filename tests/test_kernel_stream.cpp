// KernelStream on cuda-host (kernels/kernel_stream.h): uploads, downloads and copies within device memory move the
// bytes asked, and the staging guard counts a staging slot written again while an upload from it may still be in
// flight on a GPU (none when slots are apart or a synchronize() came between), while the data stays the upload's.
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "kernels/kernel_stream.h"

using namespace specula;

TEST_CASE("a cuda-host stream moves the bytes asked, 2D copies by their pitches", "[kernels][stream]") {
  const auto s = make_kernel_stream(Device::cuda_host);
  const std::vector<int32_t> values = {1, 2, 3, 4, 5, 6};
  const int32_t* device = s->upload(0, values);
  int32_t* back = s->host_array<int32_t>(1, values.size());
  s->to_host(back, device, values.size() * sizeof(int32_t));
  s->synchronize();
  CHECK(std::vector<int32_t>(back, back + values.size()) == values);
  CHECK(s->uploaded_bytes() == values.size() * sizeof(int32_t));
  CHECK(s->downloaded_bytes() == values.size() * sizeof(int32_t));
  CHECK(s->downloads() == 1);
  // Rows of 3 gathered as two runs of 2 (the first two of each row), packed.
  int32_t* packed = s->device_array<int32_t>(2, 4);
  s->copy_within_device(packed, 2 * sizeof(int32_t), device, 3 * sizeof(int32_t), 2 * sizeof(int32_t), 2);
  s->to_host(back, packed, 4 * sizeof(int32_t));
  s->synchronize();
  CHECK(std::vector<int32_t>(back, back + 4) == std::vector<int32_t>{1, 2, 4, 5});
}

TEST_CASE("the staging guard counts a slot written again before a synchronize", "[kernels][stream]") {
  const auto s = make_kernel_stream(Device::cuda_host);
  const std::vector<int32_t> a = {7, 8}, b = {9, 10};
  // Every buffer sized first: a growth drains the stream, which would hide a reuse.
  for (int slot : {3, 4, 6}) s->host_array<int32_t>(slot, 4);
  for (int slot : {3, 4, 5}) s->device_array<int32_t>(slot, 4);
  s->synchronize();
  const int32_t* first = s->upload(3, a);
  CHECK(s->staging_waits() == 0);
  s->upload(4, b);  // another slot: no wait
  CHECK(s->staging_waits() == 0);
  s->synchronize();
  s->upload(3, b);  // after a synchronize: no wait
  CHECK(s->staging_waits() == 0);
  s->synchronize();
  // The same slot again before any synchronize: the guard waits (would on a GPU), and the first upload kept its data.
  int32_t* kept = s->device_array<int32_t>(5, 2);
  s->to_device(kept, s->host_array<int32_t>(3, 2), 2 * sizeof(int32_t));
  s->upload(3, a);
  CHECK(s->staging_waits() == 1);
  int32_t* back = s->host_array<int32_t>(6, 2);
  s->to_host(back, kept, 2 * sizeof(int32_t));
  s->synchronize();
  CHECK(std::vector<int32_t>(back, back + 2) == b);
  CHECK(first != nullptr);
  // A download's destination is not an upload's source: a slot read into before a synchronize does not count.
  s->to_host(back, kept, 2 * sizeof(int32_t));
  s->host_array<int32_t>(6, 2);
  CHECK(s->staging_waits() == 1);
  // An upload from inside a slot (not its first element) marks the slot too.
  s->synchronize();
  s->to_device(kept, s->host_array<int32_t>(4, 4) + 2, 2 * sizeof(int32_t));
  s->host_array<int32_t>(4, 4);
  CHECK(s->staging_waits() == 2);
}

TEST_CASE("a stream counts the bytes asked of each slot and drains only to grow a buffer it holds",
          "[kernels][stream]") {
  const auto s = make_kernel_stream(Device::cuda_host);
  s->device_array<float>(0, 1000);  // a first allocation: nothing enqueued can use it, no drain
  s->device_array<float>(1, 10);
  CHECK(s->growth_drains() == 0);
  s->device_array<float>(0, 800);  // within the buffer
  CHECK(s->growth_drains() == 0);
  CHECK(s->requested_device_bytes() == 4000 + 40);
  s->device_array<float>(0, 3000);  // past the buffer (4000 bytes with half again): the old array may be in use
  CHECK(s->growth_drains() == 1);
  CHECK(s->requested_device_bytes() == 12000 + 40);
  // Held: each slot's largest request with up to half again, at least 256 bytes.
  CHECK(s->device_bytes() <= 12000 * 3 / 2 + 256);
  CHECK(s->device_bytes() >= 12000 + 256);
  s->host_array<int32_t>(2, 100);
  s->host_array<int32_t>(2, 1000);  // host staging buffers grow by the same rule
  CHECK(s->growth_drains() == 2);
  CHECK(s->requested_device_bytes() == 12000 + 40);  // host buffers are not device bytes
  // A floor (a run's reservation): every allocation from then on takes at least it, so a small buffer holds the
  // largest step's rows at once and does not grow.
  s->set_allocation_floor(4096);
  s->device_array<int32_t>(9, 10);
  s->device_array<int32_t>(9, 1000);  // within the floor: no growth
  CHECK(s->growth_drains() == 2);
  CHECK(s->requested_device_bytes() == 12000 + 40 + 4000);
  CHECK(s->device_bytes() >= 12000 + 256 + 4096);
}
