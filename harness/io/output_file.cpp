#include "harness/io/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

std::string reason() { return errno ? std::string(": ") + std::strerror(errno) : std::string(); }

// Writes `path`; errors name `shown` (the file the user named, not a temporary beside it).
void write_in_place(const std::string& path, const std::string& content, const std::string& what,
                    const std::string& shown) {
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(what, ": cannot write '", shown, "'", reason());
  errno = 0;
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.flush();
  if (!out) fail(what, ": writing '", shown, "' failed", reason());
  out.close();
  if (out.fail()) fail(what, ": closing '", shown, "' failed", reason());
}

// Whether a new file can be made in the existing folder `folder`: one is made under a name no other file has
// (mkstemp) and removed at once.
bool folder_takes_files(const fs::path& folder) {
  std::string name = (folder / ".specula-write-check-XXXXXX").string();
  errno = 0;
  const int fd = ::mkstemp(name.data());
  if (fd < 0) return false;
  ::close(fd);
  std::error_code ec;
  fs::remove(name, ec);
  return true;
}

// The file write_output_file replaces for `shown`: `shown` itself, or the file a symbolic link names (so the link
// stays a link). Error naming `what` for a link to nothing.
std::string written_path(const std::string& shown, const std::string& what) {
  std::error_code ec;
  if (!fs::is_symlink(shown, ec)) return shown;
  std::string path = fs::canonical(shown, ec).string();
  if (ec) fail(what, ": '", shown, "' is a symbolic link to nothing: ", ec.message());
  return path;
}

}  // namespace

void check_output_file_writable(const std::string& shown, const std::string& what, bool folder_created) {
  if (shown.empty()) fail(what, ": the file name is empty");
  std::error_code ec;
  const fs::file_status status = fs::status(shown, ec);
  if (fs::is_directory(status)) fail(what, ": '", shown, "' is a folder, not a file");
  if (fs::exists(status) && !fs::is_regular_file(status)) return;  // a device or a pipe: written in place
  // Through a symbolic link, where write_output_file writes: beside the file it names.
  fs::path folder = fs::path(written_path(shown, what)).parent_path();
  if (folder.empty()) folder = ".";
  if (folder_created && !fs::exists(folder, ec)) return check_output_folder_writable(folder.string(), what);
  if (!fs::is_directory(folder, ec))
    fail(what, ": cannot write '", shown, "': its folder '", folder.string(), "' does not exist or is not a folder");
  if (!folder_takes_files(folder))
    fail(what, ": cannot write '", shown, "': no file can be created in '", folder.string(), "'", reason());
}

void check_model_output_folder(const std::string& path, bool overwrite, const std::string& source,
                               const std::string& what) {
  std::error_code ec;
  if (!source.empty() && std::filesystem::exists(path, ec) && std::filesystem::equivalent(path, source, ec))
    fail(what, ": '", path, "' is the model this command reads (", source, "): write elsewhere");
  if (!overwrite && std::filesystem::exists(std::filesystem::path(path) / "config.json", ec))
    fail(what, ": '", path, "' already holds a model (config.json); pass --overwrite to replace it");
  check_output_folder_writable(path, what);
}

void check_output_folder_writable(const std::string& path, const std::string& what) {
  if (path.empty()) fail(what, ": the folder is empty");
  std::error_code ec;
  fs::path folder = fs::absolute(path, ec);
  if (ec) fail(what, ": '", path, "': ", ec.message());
  if (fs::exists(folder, ec) && !fs::is_directory(folder, ec)) fail(what, ": '", path, "' exists and is not a folder");
  // The nearest ancestor that exists: where the missing folders would be created.
  while (!fs::exists(folder, ec) && folder.has_parent_path() && folder.parent_path() != folder)
    folder = folder.parent_path();
  if (!fs::is_directory(folder, ec))
    fail(what, ": cannot create '", path, "': '", folder.string(), "' is not a folder");
  if (!folder_takes_files(folder))
    fail(what, ": cannot write into '", path, "': no file can be created in '", folder.string(), "'", reason());
}

void write_output_file(const std::string& shown, const std::string& content, const std::string& what) {
  std::error_code ec;
  const fs::file_status status = fs::status(shown, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) return write_in_place(shown, content, what, shown);
  // Through a symbolic link to the file it names: the link stays a link.
  replace_file_atomically(written_path(shown, what), what + ": '" + shown + "'",
                          [&](const std::string& temporary) { write_in_place(temporary, content, what, shown); });
}

void replace_file_atomically(const std::string& path, const std::string& what,
                             const std::function<void(const std::string& temporary)>& write) {
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  try {
    write(temporary);
  } catch (...) {
    fs::remove(temporary, ec);
    throw;
  }
  fs::rename(temporary, path, ec);
  if (ec) {
    const std::string message = ec.message();
    fs::remove(temporary, ec);
    fail(what, ": cannot move the finished file into place: ", message);
  }
}

AppendedOutput::AppendedOutput(const std::string& path, const std::string& what)
    : path_(path), what_(what), out_(path, std::ios::binary | std::ios::app) {
  if (!out_) fail(what_, ": cannot write '", path_, "'", reason());
}

void AppendedOutput::append(const std::string& lines) {
  errno = 0;
  out_.write(lines.data(), static_cast<std::streamsize>(lines.size()));
  out_.flush();
  if (!out_) fail(what_, ": writing '", path_, "' failed", reason());
}

void check_standard_output() {
  errno = 0;
  std::cout.flush();
  const bool lost = std::cout.fail() || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (lost) fail("writing standard output failed", reason());
}

void create_parent_folder(const std::string& path, const std::string& what) {
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail(what, ": cannot create the folder '", parent.string(), "': ", ec.message());
}

void check_distinct_files(const std::vector<std::pair<std::string, std::string>>& outputs,
                          const std::vector<std::pair<std::string, std::string>>& inputs) {
  const auto resolved = [](const std::string& path) {
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
    return ec ? std::filesystem::absolute(path).lexically_normal() : p;
  };
  const auto device = [](const std::filesystem::path& p) { return p.string().rfind("/dev/", 0) == 0; };
  const auto same = [&](const std::string& a, const std::filesystem::path& b) {
    if (resolved(a) == b) return true;
    std::error_code ec;
    return std::filesystem::equivalent(a, b, ec) && !ec;  // hard links; false where either is not there
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::filesystem::path out = resolved(outputs[i].second);
    if (device(out)) continue;
    for (size_t j = 0; j < i; ++j)
      if (same(outputs[j].second, out))
        fail(outputs[i].first, ": '", outputs[i].second, "' is also ", outputs[j].first,
             "'s file: each output needs a file of its own");
    for (const auto& [option, path] : inputs)
      if (same(path, out))
        fail(outputs[i].first, ": '", outputs[i].second, "' is the ", option,
             " file this command reads: it would be written over");
  }
}

}  // namespace specula
