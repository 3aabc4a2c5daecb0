#include "kernels/fiber_team.h"

#include <boost/context/protected_fixedsize_stack.hpp>
#include <memory>
#include <utility>

#include "kernels/shared/error.h"

namespace specula {

namespace ctx = boost::context;

namespace {

// The k-th of n to run in phase `phase` under `schedule`.
int scheduled(FiberSchedule schedule, int k, int n, int phase) {
  if (schedule == FiberSchedule::reverse) return n - 1 - k;
  if (schedule == FiberSchedule::rotating) return (k + phase) % n;
  return k;
}

}  // namespace

const char* fiber_schedule_name(FiberSchedule schedule) {
  switch (schedule) {
    case FiberSchedule::forward:
      return "forward";
    case FiberSchedule::reverse:
      return "reverse";
    case FiberSchedule::rotating:
      return "rotating";
  }
  return "?";
}

FiberTeam::FiberTeam(int threads, FiberSchedule schedule, size_t stack_bytes, int groups)
    : schedule_(schedule), stack_bytes_(stack_bytes), groups_(groups) {
  if (threads < 1 || threads > 1024) fail("fiber team: threads must be in [1, 1024], got ", threads);
  if (groups < 1 || threads % groups != 0)
    fail("fiber team: groups must be >= 1 and divide the threads (", threads, "), got ", groups);
  fibers_.resize(static_cast<size_t>(threads));
}

void FiberTeam::wait(State state) {
  if (current_ < 0) fail("fiber team: a barrier called outside a fiber");
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  f.state = state;
  f.main = std::move(f.main).resume();
}

void FiberTeam::barrier() { wait(State::at_barrier); }

void FiberTeam::team_barrier() { wait(State::at_team_barrier); }

void FiberTeam::abandon() {
  current_ = -1;
  for (Fiber& f : fibers_) f.self = ctx::fiber();  // unwinds the stacks of fibers left at a barrier
}

void FiberTeam::rethrow_if_failed() {
  for (const Fiber& f : fibers_)
    if (f.error) {
      const std::exception_ptr error = f.error;
      abandon();
      std::rethrow_exception(error);
    }
}

void FiberTeam::run_group(int group, int& phase) {
  const int n = block_threads();
  for (;; ++phase) {
    for (int k = 0; k < n; ++k) {
      const int rank = group * n + scheduled(schedule_, k, n, phase);
      Fiber& f = fibers_[static_cast<size_t>(rank)];
      if (f.state != State::runnable) continue;
      current_ = rank;
      f.self = std::move(f.self).resume();
    }
    current_ = -1;
    rethrow_if_failed();
    int at_barrier = 0, done = 0;
    for (int t = 0; t < n; ++t) {
      const State s = fibers_[static_cast<size_t>(group * n + t)].state;
      at_barrier += s == State::at_barrier ? 1 : 0;
      done += s == State::done ? 1 : 0;
    }
    if (at_barrier == 0) return;  // every thread ended or waits for the team
    if (at_barrier + done == n && done > 0) {
      abandon();
      fail("fiber team: divergent barrier in phase ", phase, ": ", done, " of ", n,
           " threads ended while the others wait at a barrier");
    }
    if (at_barrier != n) {
      abandon();
      fail("fiber team: divergent barrier in phase ", phase, " of block ", group, ": ", at_barrier, " of ", n,
           " threads wait at the block's barrier, the others at the cluster's");
    }
    for (int t = 0; t < n; ++t) fibers_[static_cast<size_t>(group * n + t)].state = State::runnable;
  }
}

void FiberTeam::run(const std::function<void(int)>& body) {
  const int n = threads();
  for (int rank = 0; rank < n; ++rank) {
    Fiber& f = fibers_[static_cast<size_t>(rank)];
    f.state = State::runnable;
    f.error = nullptr;
    f.self = ctx::fiber(std::allocator_arg, ctx::protected_fixedsize_stack(stack_bytes_),
                        [this, rank, &body](ctx::fiber&& main) {
                          Fiber& me = fibers_[static_cast<size_t>(rank)];
                          me.main = std::move(main);
                          try {
                            body(rank);
                          } catch (const ctx::detail::forced_unwind&) {
                            throw;  // an abandoned fiber being unwound: let Boost finish it
                          } catch (...) {
                            me.error = std::current_exception();  // must not leave the fiber's stack
                          }
                          me.state = State::done;
                          return std::move(me.main);
                        });
  }
  std::vector<int> phases(static_cast<size_t>(groups_), 0);
  for (int team_phase = 0;; ++team_phase) {
    for (int k = 0; k < groups_; ++k) {
      const int group = scheduled(schedule_, k, groups_, team_phase);
      run_group(group, phases[static_cast<size_t>(group)]);
    }
    int done = 0;
    for (const Fiber& f : fibers_) done += f.state == State::done ? 1 : 0;
    if (done == n) break;
    if (done > 0) {
      abandon();
      fail("fiber team: divergent barrier in cluster phase ", team_phase, ": ", done, " of ", n,
           " threads ended while the others wait at the cluster's barrier");
    }
    for (Fiber& f : fibers_) f.state = State::runnable;
  }
}

}  // namespace specula
