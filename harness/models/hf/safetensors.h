// The safetensors format (https://github.com/huggingface/safetensors), read by memory-mapping and written for
// `specula export`. Torch-free: tensors are typed byte ranges; the model code converts them.
//
// A file is: 8 bytes, the header length N (unsigned little-endian); N bytes of JSON
//   {"NAME": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
// (padded with spaces); then the data buffer. Offsets are relative to the buffer, whose bytes belong to
// exactly one tensor each (no overlaps, no holes, nothing after the last tensor), as the reference reader
// requires. Numbers are little-endian, tensors row-major.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace specula {

enum class SafetensorsDtype { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2 };

const char* dtype_name(SafetensorsDtype dtype);  // "BF16"
size_t dtype_size(SafetensorsDtype dtype);       // bytes per element
std::optional<SafetensorsDtype> parse_safetensors_dtype(const std::string& name);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;  // into the mapping; valid while the file is open; not necessarily aligned
  uint64_t bytes;       // numel() * dtype_size(dtype)
  uint64_t offset;      // of `data` from the start of the data buffer
  int64_t numel() const;
};

// A mapped, validated file. Every problem is an Error naming the file and what is wrong: shorter than its
// 8-byte length, a header longer than the file or not JSON, an unknown dtype, a bad shape, offsets outside
// the data buffer, byte counts that disagree with dtype x shape, overlapping tensors, unindexed bytes.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // by offset
  const SafetensorsTensor* find(const std::string& name) const;               // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` holds numel x dtype_size(dtype) bytes, little-endian, row-major.
struct SafetensorsWriteTensor {
  std::string name;
  SafetensorsDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// Writes `tensors` (ordered by element size, largest first, then name, so every tensor stays aligned to its
// element size) to a temporary file next to `path` and renames it into place. Throws Error naming the file.
void write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace specula
