#include "harness/generation/session_memory.h"

#include "kernels/shared/error.h"
#include "kernels/shared/host_memory.h"

namespace specula {

void check_sessions_fit_host(const LanguageModel& target, int64_t count, const std::string& who,
                             const std::string& advice) {
  const int64_t session = target.session_bytes(), sessions = session * count;
  if (const int64_t available = mem_available_bytes(); session > 0 && available >= 0 && sessions > available)
    fail(who, " need ", sessions >> 20, " MiB of target sessions (", session >> 20,
         " MiB each: KV cache and rows) but ", available >> 20, " MiB is available (MemAvailable): ", advice);
}

}  // namespace specula
