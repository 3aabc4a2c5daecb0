// Runs the built `specula` binary (path from the SPECULA_BINARY compile definition) for end-to-end tests
// of the command-line contracts, capturing stdout, stderr and the exit code.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

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

// Sets an environment variable the child `specula` reads (unsets it for ""), and puts back what was there when
// it goes, whatever a failed REQUIRE leaves behind.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* was = std::getenv(name)) before_ = was;
    value.empty() ? ::unsetenv(name) : ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { before_ ? ::setenv(name_, before_->c_str(), 1) : ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
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

// Lines of whitespace-separated integers (e.g. `generate --output`: one sample's token ids per line).
inline std::vector<std::vector<int>> read_id_lines(const std::string& path) {
  std::vector<std::vector<int>> lines;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::vector<int> tokens;
    int t;
    while (fields >> t) tokens.push_back(t);
    lines.push_back(tokens);
  }
  return lines;
}

// A 4-token bigram target and a draft near it, for the command-line tests of `generate`.
inline const char* const kCliTargetTable =
    "0.5 1.0 -0.3 0.2\n"
    "1.2 -0.4 0.3 0.0\n"
    "-0.2 0.8 0.9 -1.0\n"
    "0.1 0.1 1.5 -0.5\n";
inline const char* const kCliDraftTable =
    "0.4 1.3 -0.1 0.2\n"
    "1.0 -0.2 0.3 0.3\n"
    "-0.5 0.8 1.2 -1.0\n"
    "0.3 0.0 1.1 -0.2\n";

}  // namespace specula::testing
