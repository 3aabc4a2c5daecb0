// A team of fibers that runs one CUDA block's threads on one CPU thread with real barrier semantics: every
// simulated thread has its own stack and runs until it reaches a barrier (or ends); when all have arrived,
// the next phase starts. The order in which the threads of a phase run is a schedule, so a kernel whose
// threads read shared memory another thread writes in the same phase (a missing barrier) sees different
// data under different schedules; running a battery under several schedules and asking for identical
// results is the host's race check. A phase in which some threads end while others wait at a barrier is a
// divergent barrier (undefined behaviour on a GPU) and is an Error here.
#pragma once

#include <boost/context/fiber.hpp>
#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace specula {

// The order in which the simulated threads of a block run between two barriers.
enum class FiberSchedule {
  forward,   // 0, 1, ..., T - 1
  reverse,   // T - 1, ..., 0
  rotating,  // phase k starts at thread k mod T
};
const char* fiber_schedule_name(FiberSchedule schedule);

// Fibers are Boost.Context's (a user-space switch of a few nanoseconds: no system call per barrier).
class FiberTeam {
 public:
  // `threads` fibers of `stack_bytes` each, every stack with a guard page below it.
  FiberTeam(int threads, FiberSchedule schedule, size_t stack_bytes = 256 * 1024);

  // Runs body(rank) on every fiber until all have returned; rethrows the first exception a fiber threw.
  void run(const std::function<void(int)>& body);
  // Called by the running fiber: waits until every fiber of the team has reached this barrier.
  void barrier();

  int threads() const { return static_cast<int>(fibers_.size()); }

 private:
  struct Fiber {
    boost::context::fiber self;  // the fiber, suspended at a barrier (empty once it has returned)
    boost::context::fiber main;  // where a barrier switches back to
    bool done = false;
    std::exception_ptr error;
  };

  FiberSchedule schedule_;
  size_t stack_bytes_;
  std::vector<Fiber> fibers_;
  int current_ = -1;
};

}  // namespace specula
