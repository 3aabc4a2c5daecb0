// The most worker threads a command may ask for (--threads, `threads =` in experiments): far above any
// machine's cores, and low enough that the thread pools stay small (OpenMP asked for a million threads
// crashes, and for two billion aborts allocating their stacks).
#pragma once

#include "kernels/shared/error.h"

namespace specula {

inline constexpr int kMaxThreads = 1024;

// Refuses a thread count outside 1..kMaxThreads, naming the parameter `threads` (the CLI prints --threads).
inline void check_thread_count(long threads) {
  if (threads < 1 || threads > kMaxThreads)
    fail_parameter("threads", " must be in 1..", kMaxThreads, ", got ", threads);
}

}  // namespace specula
