// Wall seconds since a steady-clock time point: the times the generation loop, beam search and the trainers record.
#pragma once

#include <chrono>

namespace specula {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace specula
