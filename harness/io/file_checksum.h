// Size and CRC-32 of a file, for the integrity of what is loaded: a checkpoint's config records its weights'
// checksum when they are written, and loading refuses weights that no longer match (a flipped bit in a
// LibTorch archive otherwise loads without a word, since its reader does not check the zip CRCs).
#pragma once

#include <cstdint>
#include <string>

namespace specula {

struct FileChecksum {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;  // CRC-32 (IEEE 802.3, as zip and gzip), written as 8 lowercase hex digits
  bool operator==(const FileChecksum& o) const { return bytes == o.bytes && crc32 == o.crc32; }
};

// Reads the whole file; throws Error naming it when it cannot be read.
FileChecksum file_checksum(const std::string& path);

// A fingerprint whose cost is bounded whatever the file's size: the size and the CRC-32 of the whole file when it is
// at most `whole_up_to` bytes, else of `kSampledBlocks` blocks of `block` bytes at evenly spaced offsets, the first
// and the last among them. A change outside those blocks (a small tensor of a large model) goes unseen.
inline constexpr int kSampledBlocks = 64;
FileChecksum file_sampled_checksum(const std::string& path, uint64_t whole_up_to, uint64_t block);

std::string crc32_hex(uint32_t crc);
// "1a2b3c4d" -> value; throws Error naming `where` for anything but 8 hex digits.
uint32_t parse_crc32_hex(const std::string& text, const std::string& where);

// Throws Error naming `path` and `recorded_in` when the file's size or CRC differs from `expected`.
void check_file_checksum(const std::string& path, const FileChecksum& expected, const std::string& recorded_in);

}  // namespace specula
