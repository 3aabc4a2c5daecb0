// A team of fibers that runs the threads of one CUDA block, or of a thread-block cluster, on one CPU thread with
// real barrier semantics: every simulated thread has its own stack and runs until it reaches a barrier (or
// ends); when all the threads a barrier waits for have arrived, they go on. The order in which threads run is a
// schedule, so a kernel whose threads read shared memory another thread writes in the same phase (a missing
// barrier) sees different data under different schedules; running a battery under several schedules and asking
// for identical results is the host's race check. A phase in which some threads end while others wait at a
// barrier is a divergent barrier (undefined behaviour on a GPU) and is an Error here.
//
// A cluster is `groups` blocks of threads() / groups threads each. barrier() waits for the caller's block
// (__syncthreads); team_barrier() for every thread of the team (the cluster's barrier). Between two team
// barriers the blocks run one after the other, each as far as it can get alone, in the schedule's block order:
// the most hostile order for data one block writes and another reads (a missing cluster barrier reads stale
// data under one order or the other).
#pragma once

#include <boost/context/fiber.hpp>
#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace specula {

// The order in which the simulated threads of a block, and the blocks of a cluster, run between two barriers.
enum class FiberSchedule {
  forward,   // 0, 1, ..., T - 1
  reverse,   // T - 1, ..., 0
  rotating,  // phase k starts at thread (block) k mod T
};
const char* fiber_schedule_name(FiberSchedule schedule);

// Fibers are Boost.Context's (a user-space switch of a few nanoseconds: no system call per barrier).
class FiberTeam {
 public:
  // `threads` fibers of `stack_bytes` each, every stack with a guard page below it, in `groups` blocks of
  // threads / groups (groups must divide threads).
  FiberTeam(int threads, FiberSchedule schedule, size_t stack_bytes = 256 * 1024, int groups = 1);

  // Runs body(rank) on every fiber until all have returned; rethrows the first exception a fiber threw. Fiber
  // `rank` is thread rank % block_threads() of block rank / block_threads().
  void run(const std::function<void(int)>& body);
  // Called by the running fiber: waits until every fiber of its block has reached a barrier().
  void barrier();
  // Called by the running fiber: waits until every fiber of the team has reached a team_barrier().
  void team_barrier();

  int threads() const { return static_cast<int>(fibers_.size()); }
  int groups() const { return groups_; }
  int block_threads() const { return threads() / groups_; }

 private:
  enum class State { runnable, at_barrier, at_team_barrier, done };
  struct Fiber {
    boost::context::fiber self;  // the fiber, suspended at a barrier (empty once it has returned)
    boost::context::fiber main;  // where a barrier switches back to
    State state = State::runnable;
    std::exception_ptr error;
  };

  void wait(State state);
  // Runs block `group` until each of its fibers has ended or waits at a team barrier; `phase` counts its
  // block phases for the rotating schedule. Throws on an exception or a divergent barrier.
  void run_group(int group, int& phase);
  void rethrow_if_failed();
  void abandon();

  FiberSchedule schedule_;
  size_t stack_bytes_;
  int groups_;
  std::vector<Fiber> fibers_;
  int current_ = -1;
};

}  // namespace specula
