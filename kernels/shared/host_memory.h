// The host's available memory, for the checks that bound a run's memory before it starts (model weights,
// the device path's batch buffers under --device cuda-host).
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace specula {

// MemAvailable of /proc/meminfo in bytes (memory that can be allocated without swapping, page cache
// included), or -1 where it cannot be read.
inline int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    int64_t value = -1;
    if (fields >> key >> value >> unit && key == "MemAvailable:") return unit == "kB" ? value * 1024 : value;
  }
  return -1;
}

}  // namespace specula
