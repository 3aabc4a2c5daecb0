// SIGINT and SIGTERM during `specula run`: the first asks the run to stop after the record in progress (a Slurm
// preemption sends SIGTERM), so that the folder keeps whole records and says it was interrupted.
#pragma once

#include <csignal>

namespace specula {

// Thrown by throw_if_stop_requested once a signal arrived; `signal` is its number.
struct StopRequested {
  int signal;
};

// Called between records: throws StopRequested when a stop was asked for.
void throw_if_stop_requested();

// Installs the handlers for its lifetime (the run), and restores the previous ones.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

}  // namespace specula
