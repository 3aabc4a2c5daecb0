#include "harness/io/input_file.h"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/shared/host_memory.h"

namespace specula {

std::ifstream open_input_file(const std::string& path, const std::string& what) {
  std::error_code ec;  // a name the system cannot look up is reported by the open below
  if (std::filesystem::is_directory(path, ec)) fail(what, ": '", path, "' is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(what, ": cannot open '", path, "'");
  return in;
}

std::string path_kind_problem(const std::string& path, bool folder) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return folder ? ": no such folder" : ": no such file";
  if (folder != std::filesystem::is_directory(status)) return folder ? " is not a folder" : " is a folder, not a file";
  return "";
}

std::string read_input_file(const std::string& path, const std::string& what) {
  std::ifstream in = open_input_file(path, what);
  // What is read whole must fit in memory, said before it is read: a file's size is known first (half the memory
  // available at most); a stream's (a pipe, a device such as /dev/zero) is not, and it is read up to a fixed bound.
  constexpr uint64_t kMaxStreamBytes = uint64_t{1} << 30;
  const int64_t available = mem_available_bytes();
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  const uint64_t half = available > 0 ? static_cast<uint64_t>(available) / 2 : UINT64_MAX;
  uint64_t bound = std::min(kMaxStreamBytes, half);
  std::string text;
  if (regular) {
    const uint64_t size = std::filesystem::file_size(path, ec);
    bound = half;
    if (!ec && size > bound)
      fail(what, ": '", path, "' is ", size, " bytes, more than half the memory available (", available,
           " bytes): too large to read whole");
    if (!ec) text.reserve(size);  // one allocation, not a doubling's two
  }
  std::vector<char> block(1 << 20);
  while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
    text.append(block.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > bound)
      fail(what, ": '", path, "' gives more than ", bound, " bytes", regular ? " (it grew while read)" : "",
           ": too large to read whole", regular ? "" : " (a stream without end?)");
  }
  if (in.bad()) fail(what, ": cannot read '", path, "'");
  return text;
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::string text = read_input_file(path, what);
  const size_t nul = text.find('\0');
  if (nul != std::string::npos)
    fail(what, ": '", path, "' line ",
         1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n'),
         " holds a NUL byte: binary data, not text");
  return text;
}

std::string read_parameter_file(const std::string& path, const std::string& parameter) {
  try {
    return read_input_file(path, parameter);
  } catch (const Error& e) {
    // read_input_file's message is "PARAMETER: detail"; the detail keeps its separator, as ParameterError asks.
    throw ParameterError(parameter, std::string(e.what()).substr(parameter.size()));
  }
}

}  // namespace specula
