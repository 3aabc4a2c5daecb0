#include "harness/io/stop_signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

namespace specula {
namespace {

// Lock-free atomics: a handler may run on any thread (training's OpenMP workers among them) while the main thread reads
// the flag, and a lock-free atomic is safe to touch in a handler.
std::atomic<int> g_stop_signal{0};
std::atomic<long> g_first_second{0};  // CLOCK_MONOTONIC seconds of the first signal
std::atomic<int> g_deferring{1};      // 0: a signal ends the process at once (training outside its loop)
// 0: no HeldWrite open; 1: one open; 2 + signal: one open, and `signal` ends the process when it closes. One atomic,
// so that a handler on another thread and the closing write cannot both miss the signal.
std::atomic<int> g_held{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long>::is_always_lock_free);
// What a second signal writes, prepared before the handlers are installed (a handler may only call async-signal-safe
// functions: open, write, close, signal, raise, clock_gettime).
char g_status_path[4096] = {};
char g_killed_status[3][4608] = {};  // per signal: SIGINT, SIGTERM, SIGHUP

int slot(int signal) { return signal == SIGINT ? 0 : signal == SIGTERM ? 1 : 2; }

long monotonic_seconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long>(now.tv_sec);
}

// The signal's default action, now or, inside a HeldWrite, when it closes.
void end_process(int signal) {
  int open_write = 1;
  if (g_held.compare_exchange_strong(open_write, 2 + signal) || open_write >= 2) return;
  std::signal(signal, SIG_DFL);
  raise(signal);
}

extern "C" void request_stop(int signal) {
  // The first request delivered twice (a terminal's Ctrl-C reaches the process and its group) is one, in the loop or
  // after it.
  if (g_stop_signal.load() && monotonic_seconds() - g_first_second.load() <= 1) return;
  if (!g_deferring.load()) return end_process(signal);
  if (!g_stop_signal.load()) {
    g_first_second.store(monotonic_seconds());
    g_stop_signal.store(signal);
    return;
  }
  // A second request: the status says how the run ended (the write is best effort: the process is ending), then the
  // signal's default action ends it.
  if (g_status_path[0]) {
    const int fd = open(g_status_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const char* text = g_killed_status[slot(signal)];
      [[maybe_unused]] const ssize_t n = write(fd, text, strlen(text));
      close(fd);
    }
  }
  end_process(signal);
}

}  // namespace

const char* stop_signal_name(int signal) {
  return signal == SIGTERM ? "SIGTERM" : signal == SIGHUP ? "SIGHUP" : "SIGINT";
}

void throw_if_stop_requested() {
  if (const int signal = g_stop_signal.load()) throw StopRequested{signal};
}

int stop_signal_received() { return g_stop_signal.load(); }

int end_by_signal(int signal) {
  std::fflush(nullptr);  // what was printed, before the process ends without its exit handlers
  std::signal(signal, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(signal);
  return 128 + signal;
}

SignalGuard::SignalGuard(const std::string& status_file, const std::string& folder, bool for_training)
    : for_training_(for_training) {
  g_stop_signal.store(0);
  g_deferring.store(for_training ? 0 : 1);
  g_held.store(0);
  g_status_path[0] = '\0';
  if (status_file.size() < sizeof(g_status_path)) {
    std::snprintf(g_status_path, sizeof(g_status_path), "%s", status_file.c_str());
    for (int signal : {SIGINT, SIGTERM, SIGHUP})
      std::snprintf(g_killed_status[slot(signal)], sizeof(g_killed_status[0]),
                    "killed (a second %s): the record in progress and the summary were not written; `specula run "
                    "--resume %s` finishes the run\n",
                    stop_signal_name(signal), folder.c_str());
  }
  // SIGINT and SIGTERM always ask for a stop (a script's `kill -INT` reaches a background run, which a shell starts
  // with SIGINT ignored); SIGHUP only where the run was not started ignoring it, as `nohup` starts it. The previous
  // actions are kept whole (their flags and masks), to be put back.
  struct sigaction stop {};
  stop.sa_handler = request_stop;
  stop.sa_flags = SA_RESTART;
  sigemptyset(&stop.sa_mask);
  sigaction(SIGINT, &stop, &previous_int_);
  sigaction(SIGTERM, &stop, &previous_term_);
  sigaction(SIGHUP, nullptr, &previous_hup_);
  if (previous_hup_.sa_handler != SIG_IGN) sigaction(SIGHUP, &stop, nullptr);
  if (!for_training) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &previous_pipe_);
  }
}

void SignalGuard::status_written() { g_status_path[0] = '\0'; }

SignalGuard::~SignalGuard() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGHUP, &previous_hup_, nullptr);
  if (!for_training_) sigaction(SIGPIPE, &previous_pipe_, nullptr);
  g_status_path[0] = '\0';
  g_deferring.store(1);
}

StopDeferral::StopDeferral() { g_deferring.store(1); }
StopDeferral::~StopDeferral() { g_deferring.store(0); }

HeldWrite::HeldWrite() { g_held.store(1); }
HeldWrite::~HeldWrite() {
  if (const int state = g_held.exchange(0); state >= 2) {
    std::signal(state - 2, SIG_DFL);
    raise(state - 2);
  }
}

}  // namespace specula
