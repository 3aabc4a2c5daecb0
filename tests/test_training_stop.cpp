// TrainingStopper (harness/train/training_stop.h), the stop bookkeeping both trainers share, driven without a model: a
// signal in the loop stops the run before the next step, one in the last step stops it at the loop's end, and a
// stopped run's saved record and message say how far it got. The signals are raised on this thread while the loop's
// deferral is in place, so they only ask for a stop; the handlers in place before are back after.
#include <signal.h>
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "harness/train/training_stop.h"

using namespace specula;
using Catch::Contains;

namespace {

// A scratch folder, removed at the end of its scope.
struct ScratchFolder {
  std::string path;
  ScratchFolder() {
    char pattern[] = "/tmp/specula-stop-XXXXXX";
    path = mkdtemp(pattern);
  }
  ~ScratchFolder() { std::filesystem::remove_all(path); }
};

// What `report` leaves: the status it sets ("" when it sets none) and what it prints.
struct Reported {
  std::string status, message;
};

Reported reported(const TrainingStopper& stopper) {
  Reported r;
  std::ostringstream err;
  std::streambuf* const was = std::cerr.rdbuf(err.rdbuf());
  stopper.report([&](const std::string& status) { r.status = status; });
  std::cerr.rdbuf(was);
  r.message = err.str();
  return r;
}

}  // namespace

TEST_CASE("a training run's stops: before the next step, or at the loop's end for one in the last step", "[train]") {
  const ScratchFolder dir;
  const std::string out = dir.path + "/out";
  struct sigaction before {};
  sigaction(SIGINT, nullptr, &before);
  SECTION("a signal in the loop stops the run before the next step") {
    TrainingStopper stopper("specula train", out, 200, 50);
    stopper.begin_loop();
    CHECK_FALSE(stopper.stop_before(0, 0));
    raise(SIGTERM);
    CHECK(stopper.stop_before(37, 0));
    CHECK(stopper.end_loop(0));
    CHECK(stopper.stop().signal == SIGTERM);
    CHECK(stopper.stop().steps_done == 37);
    const Reported r = reported(stopper);
    CHECK(r.status.empty());  // nothing saved: no record to mark
    CHECK(r.message == "specula train: interrupted (SIGTERM) after step 37 of 200; nothing was saved to " + out +
                           " (the first save follows the validation at step 50)\n");
  }
  SECTION("a signal in the last step stops it at the loop's end, with the model saved last") {
    std::ofstream(dir.path + "/config.json") << "{}";  // the output held a model before the run
    TrainingStopper stopper("specula train-medusa", dir.path, 20, 5);
    stopper.begin_loop();
    CHECK_FALSE(stopper.stop_before(19, 15));
    raise(SIGINT);
    CHECK(stopper.end_loop(20));
    CHECK(stopper.stop().steps_done == 20);
    CHECK(stopper.stop().saved_step == 20);
    CHECK(stopper.stop().output_held_model);
    const Reported r = reported(stopper);
    CHECK(r.status == "interrupted (SIGINT) after step 20 of 20");
    CHECK_THAT(r.message, Contains("specula train-medusa: interrupted (SIGINT) after step 20 of 20; " + dir.path +
                                   " holds the model of step 20"));
  }
  SECTION("a run no signal reached is not stopped") {
    TrainingStopper stopper("specula train", out, 10, 5);
    stopper.begin_loop();
    CHECK_FALSE(stopper.stop_before(9, 5));
    CHECK_FALSE(stopper.end_loop(10));
    CHECK(stopper.stop().signal == 0);
  }
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  CHECK(after.sa_handler == before.sa_handler);
}
