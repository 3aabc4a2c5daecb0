#include "harness/io/input_file.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "kernels/shared/error.h"

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
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(what, ": cannot read '", path, "'");
  return ss.str();
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
