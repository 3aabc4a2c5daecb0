// Runs the built `specula` binary (path from the SPECULA_BINARY compile definition) for end-to-end tests
// of the command-line contracts, capturing stdout, stderr and the exit code.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace specula::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A scratch directory removed at exit of the scope.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/specula-test-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` is appended to the binary path as-is (quote paths with spaces yourself).
inline CliResult run_specula(const std::string& args) {
  TempDir tmp;
  const std::string out_path = tmp.file("stdout"), err_path = tmp.file("stderr");
  const std::string command = std::string(SPECULA_BINARY) + " " + args + " >" + out_path + " 2>" + err_path;
  const int status = std::system(command.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  return r;
}

}  // namespace specula::testing
