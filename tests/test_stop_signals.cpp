// The signal handling of runs and training (harness/io/stop_signals.h), in a forked child that raises the signals
// itself: one request delivered twice within a second is one request, and a second one later ends the process, its
// status file saying so first; training asks for a stop only in its loop, and a held write finishes before a signal
// ends the process.
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "cli_runner.h"
#include "harness/io/stop_signals.h"

using namespace specula;
using namespace specula::testing;
using Catch::Contains;

namespace {

// Runs `child` in a forked process with the run's handlers installed; returns waitpid's status.
template <class Child>
int in_child(const std::string& status_file, Child&& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    const SignalGuard guard(status_file, "RUN-FOLDER");
    _exit(child());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// What a forked child writes inside a held write: open, write and close only (the calls safe after a fork).
void write_marker(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = write(fd, text, strlen(text));
  close(fd);
}

int stop_code() {
  try {
    throw_if_stop_requested();
  } catch (const StopRequested& stop) {
    return stop.signal == SIGINT ? 40 : stop.signal == SIGHUP ? 41 : 42;
  }
  return 43;
}

}  // namespace

TEST_CASE("run's signals: a request delivered twice at once is one; a later second one ends the process", "[runner]") {
  TempDir dir;
  const std::string status = dir.file("status");
  // Twice at once (a terminal's Ctrl-C reaches the process and its group): one request, the process goes on.
  int s = in_child(status, [] {
    raise(SIGINT);
    raise(SIGINT);
    return stop_code();
  });
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 40);
  CHECK_FALSE(std::filesystem::exists(status));
  s = in_child(status, [] {
    raise(SIGHUP);
    return stop_code();
  });
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 41);
  // A signal the process was started ignoring: SIGHUP stays ignored (`nohup`), no stop is asked for; SIGINT is handled
  // even so (a shell starts a script's background job ignoring it, and `kill -INT` stops the run).
  const auto started_ignoring = [&](int signal_number) {
    return in_child(status, [signal_number] {
      signal(signal_number, SIG_IGN);  // before the guard, as nohup or the shell leaves it
      const SignalGuard inner("", "");
      raise(signal_number);
      return stop_code();
    });
  };
  s = started_ignoring(SIGHUP);
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 43);
  s = started_ignoring(SIGINT);
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 40);
  // A second request seconds later: the status says so, and the signal's default action ends the process.
  s = in_child(status, [] {
    raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
    raise(SIGTERM);
    return 0;
  });
  REQUIRE(WIFSIGNALED(s));
  CHECK(WTERMSIG(s) == SIGTERM);
  CHECK_THAT(read_text(status), Contains("killed (a second SIGTERM)") && Contains("specula run --resume RUN-FOLDER"));
  // A write to a pipe nobody reads fails; it does not end the process.
  s = in_child(status, [] {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    close(fds[0]);
    return write(fds[1], "x", 1) < 0 ? 44 : 45;
  });
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 44);
}

TEST_CASE("training's signals: a stop is asked for in the loop only; no signal ends the process inside a held write",
          "[runner]") {
  const auto in_training_child = [](auto&& child) {
    const pid_t pid = fork();
    if (pid == 0) {
      signal(SIGINT, SIG_IGN);   // as a shell starts a script's background job
      signal(SIGPIPE, SIG_DFL);  // as a terminal starts it, whatever ran the tests
      const SignalGuard guard("", "", true);
      _exit(child());
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  };
  // Outside the loop a signal ends the process at once, as the default action would, though it started ignoring it.
  int s = in_training_child([] {
    raise(SIGINT);
    return 50;
  });
  REQUIRE(WIFSIGNALED(s));
  CHECK(WTERMSIG(s) == SIGINT);
  // In the loop it asks for a stop, and the process goes on to stop itself.
  s = in_training_child([] {
    const StopDeferral loop;
    raise(SIGTERM);
    return stop_signal_received() == SIGTERM ? 51 : 52;
  });
  REQUIRE(WIFEXITED(s));
  CHECK(WEXITSTATUS(s) == 51);
  // A signal that ends the process inside a held write ends it when the write is done: the marker is written first.
  TempDir dir;
  const std::string marker = dir.file("written");
  s = in_training_child([&marker] {
    {
      const HeldWrite held;
      raise(SIGTERM);
      write_marker(marker.c_str(), "both files\n");
    }
    return 53;  // not reached
  });
  REQUIRE(WIFSIGNALED(s));
  CHECK(WTERMSIG(s) == SIGTERM);
  CHECK(read_text(marker) == "both files\n");
  // So does a second signal in the loop, two seconds after the first.
  const std::string second = dir.file("second");
  s = in_training_child([&second] {
    const StopDeferral loop;
    raise(SIGINT);
    const timespec gap{2, 100000000};  // 2.1 s, past the clock's whole second of the first
    nanosleep(&gap, nullptr);
    {
      const HeldWrite held;
      raise(SIGINT);
      write_marker(second.c_str(), "whole\n");
    }
    return 54;  // not reached
  });
  REQUIRE(WIFSIGNALED(s));
  CHECK(WTERMSIG(s) == SIGINT);
  CHECK(read_text(second) == "whole\n");
  // SIGPIPE is left as it was: a training run whose log reader went away ends, as before.
  s = in_training_child([] {
    int fds[2];
    if (pipe(fds) != 0) return 55;
    close(fds[0]);
    return write(fds[1], "x", 1) < 0 ? 56 : 57;
  });
  REQUIRE(WIFSIGNALED(s));
  CHECK(WTERMSIG(s) == SIGPIPE);
}
