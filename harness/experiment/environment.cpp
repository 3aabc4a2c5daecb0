#include "harness/experiment/environment.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "harness/experiment/build_revision.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

#ifndef SPECULA_VERSION
#define SPECULA_VERSION "unknown"
#endif
#ifndef SPECULA_BUILD_TYPE
#define SPECULA_BUILD_TYPE "unknown"
#endif

namespace specula {
namespace {

std::string command_output(const std::string& command) {
  std::array<char, 256> buf{};
  std::string out;
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (!pipe) return "";
  while (fgets(buf.data(), buf.size(), pipe)) out += buf.data();
  pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string package_version(const std::string& package) {
  const std::string v = command_output("dpkg-query -W -f='${Version}' " + package);
  return v.empty() ? "not installed" : v;
}

}  // namespace

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown-host";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  return "unknown";
}

LastLevelCache last_level_cache() {
  LastLevelCache llc;
  for (int i = 0;; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream level_in(dir + "/level"), size_in(dir + "/size"), type_in(dir + "/type");
    int level = 0;
    std::string size, type;
    if (!(level_in >> level) || !(size_in >> size)) break;
    type_in >> type;
    if (type == "Instruction" || level <= llc.level) continue;
    char* end = nullptr;
    const long long n = std::strtoll(size.c_str(), &end, 10);
    const int64_t unit = *end == 'K' ? 1 << 10 : *end == 'M' ? 1 << 20 : *end == 'G' ? 1 << 30 : 1;
    if (n > 0) llc = {level, static_cast<int64_t>(n) * unit};
  }
  return llc;
}

std::string git_revision() { return kBuildRevision; }

std::string version_text() {
  return std::string("specula ") + SPECULA_VERSION + " (git " + git_revision() + ", " + SPECULA_BUILD_TYPE + " build)";
}

std::string utc_timestamp(bool folder_safe) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, folder_safe ? "%Y%m%dT%H%M%SZ" : "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The Slurm task this process runs as ("JOB_TASK" for an array task, "JOB" otherwise, "" outside Slurm):
// a requeued array task finds the folder it was writing by it and resumes that folder.
std::string slurm_job() {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (array_job && array_task) return std::string(array_job) + "_" + array_task;
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

std::string load_averages() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "unknown";
  return one + " " + five + " " + fifteen;
}

nlohmann::json machine_json(int threads, const std::string& load_before) {
  return {{"hostname", hostname()},
          {"cpu_model", cpu_model()},
          {"cpu_avx2", static_cast<bool>(__builtin_cpu_supports("avx2"))},
          {"cpu_avx512f", static_cast<bool>(__builtin_cpu_supports("avx512f"))},
          {"logical_cores", std::thread::hardware_concurrency()},
          {"llc_level", last_level_cache().level},
          {"llc_bytes", last_level_cache().bytes},
          {"threads_used", threads},
          {"omp_wait_policy", getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "unset"},
          {"load_average_before", load_before},
          {"load_average_after", load_averages()},
          {"compiler", __VERSION__},
          {"build_type", SPECULA_BUILD_TYPE}};
}

std::string environment_json(int threads, const std::string& command_line) {
  nlohmann::json j;
  j["hostname"] = hostname();
  j["cpu_model"] = cpu_model();
  j["cores"] = std::thread::hardware_concurrency();
  j["llc_level"] = last_level_cache().level;
  j["llc_bytes"] = last_level_cache().bytes;
  j["threads"] = threads;
  j["omp_wait_policy"] = getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "";
  j["blas"] = command_output("readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3");
  j["libraries"] = {{"libtorch-dev", package_version("libtorch-dev")},
                    {"libopenblas0-openmp", package_version("libopenblas0-openmp")},
                    {"libboost-program-options-dev", package_version("libboost-program-options-dev")},
                    {"compiler", __VERSION__}};
  j["build_type"] = SPECULA_BUILD_TYPE;
  j["git_revision"] = git_revision();
  j["utc_time"] = utc_timestamp(false);
  j["command_line"] = command_line;
  j["slurm_job"] = slurm_job();
  return j.dump(2) + "\n";
}

namespace {

// "AMD EPYC, AVX-512, 2 cores, L3 32 MiB": what tells two machines' reports apart.
std::string machine_line(const nlohmann::json& m) {
  // Any field may be missing (a report written before it was recorded) or mistyped (a hand-edited file).
  const auto flag = [&](const char* key) { return m.contains(key) && m[key].is_boolean() && m[key].get<bool>(); };
  const auto known = [&](const char* key) { return m.contains(key) && m[key].is_boolean(); };
  std::string line = !m.contains("cpu_model")     ? std::string("unknown CPU")
                     : m["cpu_model"].is_string() ? m["cpu_model"].get<std::string>()
                                                  : m["cpu_model"].dump();
  line += flag("cpu_avx512f")                         ? ", AVX-512"
          : flag("cpu_avx2")                          ? ", AVX2"
          : known("cpu_avx2") && known("cpu_avx512f") ? ", no AVX2"
                                                      : ", AVX unknown";
  if (m.contains("logical_cores")) line += ", " + m["logical_cores"].dump() + " cores";
  if (m.contains("llc_bytes") && m["llc_bytes"].is_number_integer() && m["llc_bytes"].get<int64_t>() > 0)
    line += ", L" + (m.contains("llc_level") ? m["llc_level"].dump() : std::string("?")) + " " +
            std::to_string(m["llc_bytes"].get<int64_t>() >> 20) + " MiB";
  return line;
}

}  // namespace

std::string default_bench_report(const std::string& kind) {
  const std::string path = "results/bench/" + kind + "-" + hostname() + ".json";
  std::ifstream in(path);
  if (!in) return path;  // none yet (or unreadable: the write names it)
  const nlohmann::json here = machine_json(1, "");
  nlohmann::json report = nlohmann::json::value_t::discarded;
  try {
    report = parse_bounded_json(in);
  } catch (const nlohmann::json::exception&) {  // not JSON, or nested past any report: refused below
  }
  if (report.is_discarded() || !report.is_object() || !report.contains("machine") || !report["machine"].is_object())
    fail(path, ": the default report file holds something other than a benchmark report; it is kept: give --output");
  const nlohmann::json& there = report["machine"];
  for (const char* key : {"cpu_model", "cpu_avx2", "cpu_avx512f", "logical_cores", "llc_bytes"})
    if (there.contains(key) && there[key] != here[key])
      fail(path, ": holds the report of another machine with this host name (", machine_line(there),
           "; this one: ", machine_line(here), "); it is kept: give --output");
  return path;
}

}  // namespace specula
