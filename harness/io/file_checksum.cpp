#include "harness/io/file_checksum.h"

#include <boost/crc.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {

FileChecksum file_checksum(const std::string& path) {
  std::ifstream in = open_input_file(path, "checksum");
  boost::crc_32_type crc;
  std::vector<char> buffer(1 << 20);
  FileChecksum out;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    crc.process_bytes(buffer.data(), static_cast<size_t>(got));
    out.bytes += static_cast<uint64_t>(got);
  }
  if (in.bad()) fail(path, ": read error while checking the file");
  out.crc32 = crc.checksum();
  return out;
}

FileChecksum file_sampled_checksum(const std::string& path, uint64_t whole_up_to, uint64_t block) {
  std::ifstream in = open_input_file(path, "checksum");
  in.seekg(0, std::ios::end);
  const uint64_t bytes = static_cast<uint64_t>(in.tellg());
  if (bytes <= whole_up_to || bytes <= block) return file_checksum(path);
  FileChecksum out;
  out.bytes = bytes;
  boost::crc_32_type crc;
  std::vector<char> buffer(static_cast<size_t>(block));
  for (int i = 0; i < kSampledBlocks; ++i) {
    in.seekg(static_cast<std::streamoff>((bytes - block) / (kSampledBlocks - 1) * static_cast<uint64_t>(i)));
    if (i == kSampledBlocks - 1) in.seekg(static_cast<std::streamoff>(bytes - block));  // exactly the last block
    in.read(buffer.data(), static_cast<std::streamsize>(block));
    if (static_cast<uint64_t>(in.gcount()) != block) fail(path, ": read error while checking the file");
    crc.process_bytes(buffer.data(), static_cast<size_t>(block));
  }
  out.crc32 = crc.checksum();
  return out;
}

std::string crc32_hex(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

uint32_t parse_crc32_hex(const std::string& text, const std::string& where) {
  if (text.size() != 8 || text.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    fail(where, ": crc32 must be 8 hex digits, got '", text, "'");
  return static_cast<uint32_t>(std::stoul(text, nullptr, 16));
}

void check_file_checksum(const std::string& path, const FileChecksum& expected, const std::string& recorded_in) {
  // The size first, from the folder entry: a file of another size is refused without reading it (a 50 GB stand-in
  // would be read whole for a checksum that cannot match).
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size != expected.bytes)
    fail(path, ": ", size, " bytes, but ", recorded_in, " records ", expected.bytes,
         " bytes: the file is damaged or was replaced (restore it, or retrain)");
  const FileChecksum got = file_checksum(path);
  if (got == expected) return;
  fail(path, ": ", got.bytes, " bytes with crc32 ", crc32_hex(got.crc32), ", but ", recorded_in, " records ",
       expected.bytes, " bytes with crc32 ", crc32_hex(expected.crc32),
       ": the file is damaged or was replaced (restore it, or retrain)");
}

}  // namespace specula
