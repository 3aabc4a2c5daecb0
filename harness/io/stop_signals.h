// SIGINT, SIGTERM and SIGHUP during `specula run`: the first asks the run to stop after the record in progress (a
// Slurm preemption sends SIGTERM, a closed terminal SIGHUP), so that the folder keeps whole records and says it was
// interrupted. A stop signal within a second or two of the first (the clock's whole seconds) is that request
// delivered twice (a `timeout -s INT` or a terminal's Ctrl-C reaches the process and its group); a later one ends the
// process at once, its folder's status first saying so. SIGHUP stays ignored where the process was started ignoring
// it (`nohup`); SIGINT is handled even so (a shell starts a script's background job ignoring it, and `kill -INT`
// should still stop the run). SIGPIPE is ignored during the run: a reader of the progress output that goes away fails a
// write, not the run.
// Training (harness/train/training_stop.h) asks for a stop only inside its loop (StopDeferral); elsewhere a signal ends
// the process at once, as the default action would, even where the process was started ignoring SIGINT. In both, a
// signal that would end the process during a HeldWrite (a model's weights and config) ends it after the write.
#pragma once

#include <signal.h>

#include <csignal>
#include <string>

namespace specula {

// Thrown by throw_if_stop_requested once a signal arrived; `signal` is its number.
struct StopRequested {
  int signal;
};

// Called between records: throws StopRequested when a stop was asked for.
void throw_if_stop_requested();
// The signal that asked for a stop, 0 while none has (for a loop that ends itself rather than unwinding).
int stop_signal_received();

// After a stop's cleanup (the status and message written): ends the process by `signal`'s default action, as a program
// that handles a signal should, so that a script running it stops too (bash ends a script at a child's SIGINT only
// when the child died of it; a child that exits 130 is taken to have handled it). A shell reports 128 + signal;
// returns that where the signal cannot end the process.
int end_by_signal(int signal);

// The signal's name as a status says it: "SIGINT", "SIGTERM", "SIGHUP".
const char* stop_signal_name(int signal);

// Installs the handlers for its lifetime (the run), and restores the previous ones. `status_file`: the file a second
// signal writes (the run's `status`), naming the signal and the folder's resume ("" for none). A guard `for_training`
// asks for stops only inside a StopDeferral and leaves SIGPIPE as it was (a training run's log reader that goes away
// ends it, as before).
class SignalGuard {
 public:
  explicit SignalGuard(const std::string& status_file, const std::string& folder, bool for_training = false);
  ~SignalGuard();
  // The run's final status is written: a second signal now ends the process without writing over it.
  void status_written();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
  struct sigaction previous_hup_ {};
  struct sigaction previous_pipe_ {};
  bool for_training_;
};

// Within its scope (a training loop, under a SignalGuard for_training), the first stop signal asks for a stop instead
// of ending the process.
class StopDeferral {
 public:
  StopDeferral();
  ~StopDeferral();
  StopDeferral(const StopDeferral&) = delete;
  StopDeferral& operator=(const StopDeferral&) = delete;
};

// Within its scope (a save of two files that are read together), a signal that would end the process ends it when the
// scope ends, so that no signal lands between the two.
class HeldWrite {
 public:
  HeldWrite();
  ~HeldWrite();
  HeldWrite(const HeldWrite&) = delete;
  HeldWrite& operator=(const HeldWrite&) = delete;
};

}  // namespace specula
