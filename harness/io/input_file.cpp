#include "harness/io/input_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/shared/error.h"

namespace specula {

std::string read_input_file(const std::string& path, const std::string& what) {
  if (std::filesystem::is_directory(path)) fail(what, ": '", path, "' is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(what, ": cannot open '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail(what, ": cannot read '", path, "'");
  return ss.str();
}

}  // namespace specula
