// The most worker threads a command may ask for (--threads, `threads =` in experiments): far above any
// machine's cores, and low enough that the thread pools stay small (OpenMP asked for a million threads
// crashes, and for two billion aborts allocating their stacks).
#pragma once

namespace specula {

inline constexpr int kMaxThreads = 1024;

}  // namespace specula
