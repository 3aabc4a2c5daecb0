// env.json: where a run ran — machine, threads, BLAS, library versions, build, git revision — so a results
// folder can be understood and repeated on its own.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace specula {

// The JSON text of env.json. `threads` is the compute thread count used by the run.
std::string environment_json(int threads, const std::string& command_line);
// This machine's host name ("unknown-host" if it has none) and CPU model from /proc/cpuinfo.
std::string hostname();
std::string cpu_model();
// The deepest cache cpu0 sees and its size, as Linux's sysfs reports it (on AMD EPYC one core complex's L3): what
// decides whether a model's weights stay cache-resident. {0, 0} where sysfs does not say.
struct LastLevelCache {
  int level = 0;
  int64_t bytes = 0;
};
LastLevelCache last_level_cache();
// /proc/loadavg's 1, 5 and 15-minute load averages ("0.52 0.40 0.33"), "unknown" where there is none: a
// benchmark on a shared machine is only as good as its quiet.
std::string load_averages();
// The "machine" block of every benchmark report: host, CPU model and the ISA extensions the kernels can use,
// logical cores, the last-level cache (`llc_level`, `llc_bytes`), `threads` used, OMP_WAIT_POLICY, compiler and build
// type, and the load averages at the start
// (`load_before`, from load_averages()) and now.
nlohmann::json machine_json(int threads, const std::string& load_before);
// The default report of a CPU benchmark: results/bench/KIND-<hostname>.json. Host names repeat across machines (VMs
// all named "vm"), so where that file holds the report of another machine (its CPU model, AVX2, AVX-512, logical cores
// or last-level cache differ from this one's), or is not a report, it is kept and the command refused, naming both
// machines: give --output. This machine's own report is replaced, as a rerun means to.
std::string default_bench_report(const std::string& kind);
// The short git revision the binary was built from, "-dirty" where tracked files had changes then, "unknown" outside a
// checkout (build_revision.h): not the checkout's at run time, which a pull or an edit after the build would change.
std::string git_revision();
// `specula --version`: "specula 0.1.0 (git 1a2b3c4, Release build)": the version, the source tree's revision
// (as env.json records it) and the build type.
std::string version_text();
// "2026-11-22T01:02:03Z" and a folder-safe "20261122T010203Z".
std::string utc_timestamp(bool folder_safe);

}  // namespace specula
