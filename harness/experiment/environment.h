// env.json: where a run ran — machine, threads, BLAS, library versions, build, git revision — so a results
// folder can be understood and repeated on its own.
#pragma once

#include <string>

namespace specula {

// The JSON text of env.json. `threads` is the compute thread count used by the run.
std::string environment_json(int threads, const std::string& command_line);
// This machine's host name ("unknown-host" if it has none) and CPU model from /proc/cpuinfo.
std::string hostname();
std::string cpu_model();
// Short git revision of the source tree, "unknown" outside a checkout.
std::string git_revision();
// "2026-11-22T01:02:03Z" and a folder-safe "20261122T010203Z".
std::string utc_timestamp(bool folder_safe);

}  // namespace specula
