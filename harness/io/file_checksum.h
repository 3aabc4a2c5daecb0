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

// The size and the CRC-32 of the file's first and last `edge` bytes only (all of it when it is no longer than 2 edges):
// a cheap fingerprint that any rewrite of a model's weights changes, at the price of two reads whatever the size.
FileChecksum file_edges_checksum(const std::string& path, uint64_t edge);

std::string crc32_hex(uint32_t crc);
// "1a2b3c4d" -> value; throws Error naming `where` for anything but 8 hex digits.
uint32_t parse_crc32_hex(const std::string& text, const std::string& where);

// Throws Error naming `path` and `recorded_in` when the file's size or CRC differs from `expected`.
void check_file_checksum(const std::string& path, const FileChecksum& expected, const std::string& recorded_in);

}  // namespace specula
