#include "kernels/fiber_team.h"

#include <boost/context/protected_fixedsize_stack.hpp>
#include <memory>
#include <utility>

#include "kernels/shared/error.h"

namespace specula {

namespace ctx = boost::context;

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

FiberTeam::FiberTeam(int threads, FiberSchedule schedule, size_t stack_bytes)
    : schedule_(schedule), stack_bytes_(stack_bytes) {
  if (threads < 1 || threads > 1024) fail("fiber team: threads must be in [1, 1024], got ", threads);
  fibers_.resize(static_cast<size_t>(threads));
}

void FiberTeam::barrier() {
  if (current_ < 0) fail("fiber team: barrier() called outside a fiber");
  Fiber& f = fibers_[static_cast<size_t>(current_)];
  f.main = std::move(f.main).resume();
}

void FiberTeam::run(const std::function<void(int)>& body) {
  const int n = threads();
  for (int rank = 0; rank < n; ++rank) {
    Fiber& f = fibers_[static_cast<size_t>(rank)];
    f.done = false;
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
                          me.done = true;
                          return std::move(me.main);
                        });
  }
  const auto abandon = [&] {
    current_ = -1;
    for (Fiber& f : fibers_) f.self = ctx::fiber();  // unwinds the stacks of fibers left at a barrier
  };
  for (int phase = 0;; ++phase) {
    for (int k = 0; k < n; ++k) {
      int rank = k;
      if (schedule_ == FiberSchedule::reverse) rank = n - 1 - k;
      if (schedule_ == FiberSchedule::rotating) rank = (k + phase) % n;
      Fiber& f = fibers_[static_cast<size_t>(rank)];
      if (f.done) continue;
      current_ = rank;
      f.self = std::move(f.self).resume();
    }
    current_ = -1;
    int done = 0;
    std::exception_ptr error;
    for (const Fiber& f : fibers_) {
      done += f.done ? 1 : 0;
      if (f.error && !error) error = f.error;
    }
    if (error) {
      abandon();
      std::rethrow_exception(error);
    }
    if (done == n) break;
    if (done > 0) {
      abandon();
      fail("fiber team: divergent barrier in phase ", phase, ": ", done, " of ", n,
           " threads ended while the others wait at a barrier");
    }
  }
}

}  // namespace specula
