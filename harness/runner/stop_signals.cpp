#include "harness/runner/stop_signals.h"

namespace specula {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

// The first signal asks for a stop after the record in progress; the handler then steps aside, so a second
// one ends the process at once (signal() is async-signal-safe).
extern "C" void request_stop(int signal) {
  g_stop_signal = signal;
  std::signal(signal, SIG_DFL);
}

}  // namespace

void throw_if_stop_requested() {
  if (g_stop_signal) throw StopRequested{g_stop_signal};
}

SignalGuard::SignalGuard() {
  g_stop_signal = 0;
  previous_int_ = std::signal(SIGINT, request_stop);
  previous_term_ = std::signal(SIGTERM, request_stop);
}

SignalGuard::~SignalGuard() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

}  // namespace specula
