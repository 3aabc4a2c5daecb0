#include "harness/io/file_checksum.h"

#include <algorithm>
#include <boost/crc.hpp>
#include <cstdio>
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

FileChecksum file_edges_checksum(const std::string& path, uint64_t edge) {
  std::ifstream in = open_input_file(path, "checksum");
  in.seekg(0, std::ios::end);
  FileChecksum out;
  out.bytes = static_cast<uint64_t>(in.tellg());
  boost::crc_32_type crc;
  std::vector<char> buffer(static_cast<size_t>(std::min(edge, out.bytes)));
  const auto add = [&](uint64_t from, uint64_t count) {
    in.seekg(static_cast<std::streamoff>(from));
    in.read(buffer.data(), static_cast<std::streamsize>(count));
    if (static_cast<uint64_t>(in.gcount()) != count) fail(path, ": read error while checking the file");
    crc.process_bytes(buffer.data(), static_cast<size_t>(count));
  };
  add(0, std::min(edge, out.bytes));
  if (out.bytes > edge) add(std::max(edge, out.bytes - edge), out.bytes - std::max(edge, out.bytes - edge));
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
  const FileChecksum got = file_checksum(path);
  if (got == expected) return;
  fail(path, ": ", got.bytes, " bytes with crc32 ", crc32_hex(got.crc32), ", but ", recorded_in, " records ",
       expected.bytes, " bytes with crc32 ", crc32_hex(expected.crc32),
       ": the file is damaged or was replaced (restore it, or retrain)");
}

}  // namespace specula
