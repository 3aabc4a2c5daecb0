// The kernels' row code under block emulation (kernels/emulated_kernels.h): several simulated threads per
// block with the collectives, barriers, radix histogram and tile scans of the CUDA Block. Checked against the
// reference sampler pipeline and the reference verifiers, under three thread schedules (a race between two
// barriers would make the schedules disagree), with the device dispatch's vector widths.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "holed_tree_case.h"
#include "kernel_sampler_cases.h"
#include "kernel_verify_cases.h"
#include "kernels/emulated_cluster_block.h"
#include "kernels/emulated_kernels.h"
#include "kernels/fiber_team.h"
#include "kernels/group_exchange.h"
#include "kernels/shared/error.h"
#include "tests/statistics/goodness_of_fit.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/device_sampler.h"
#include "verify/device/sampler_batch.h"

using namespace specula;
using namespace specula::testing;

namespace {

const FiberSchedule kSchedules[] = {FiberSchedule::forward, FiberSchedule::reverse, FiberSchedule::rotating};

struct SamplerRun {
  std::vector<float> probs;
  std::vector<int32_t> tokens, status;
};

SamplerRun emulate_sampler(const SamplerCase& c, const EmulationOptions& o) {
  const SamplerBatch batch(c.vocab, c.rows());
  SamplerRun r{std::vector<float>(c.logits.size()), std::vector<int32_t>(c.batch()), std::vector<int32_t>(c.batch())};
  emulate_fused_sampler(batch.host_params(c.logits.data(), r.probs.data(), r.tokens.data(), r.status.data()), o);
  return r;
}

// stage_rows: the params' ChainVerifyParams::stage_rows (a cluster's blocks copy the rows a draw reads into their
// shared memory first, or read them where they are); overlap: whether the expected acceptance is asked for (it
// changes what a tree stages when).
VerifyResult emulate_verify(const VerifyCase& c, const EmulationOptions& o, int32_t stage_rows = 1,
                            bool overlap = true) {
  VerifyResult r(c.batch(), c.width + 1);
  const auto set = [&](auto& p) {
    p.stage_rows = stage_rows;
    if (!overlap) {
      p.out.overlap_sum = nullptr;
      p.out.overlap_count = nullptr;
    }
  };
  if (c.kind == VerifyKind::tree) {
    TreeVerifyParams p = tree_params(c, r);
    set(p);
    emulate_tree_verify(p, o);
  } else if (c.kind == VerifyKind::chain) {
    ChainVerifyParams p = chain_params(c, r);
    set(p);
    emulate_chain_verify(p, o);
  } else {
    BlockVerifyParams p;
    static_cast<ChainVerifyParams&>(p) = chain_params(c, r);
    set(p);
    emulate_block_verify(p, o);
  }
  if (!overlap) {  // not compared
    r.overlap_sum.clear();
    r.overlap_count.clear();
  }
  return r;
}

// Words of a kept global-memory workspace that a launch left set, reported under `label` (0 without a workspace):
// every launch must leave it zero (group_exchange.h, finish), as the CUDA and cuda-host streams rely on.
int32_t dirty_words(const std::vector<uint64_t>* kept, const std::string& label) {
  if (!kept) return 0;
  const auto dirty = static_cast<int32_t>(std::count_if(kept->begin(), kept->end(), [](uint64_t w) { return w != 0; }));
  if (dirty) UNSCOPED_INFO(label << ": " << dirty << " words of the kept workspace left set");
  return dirty;
}

// The rows of `cases` random cases of `kind` on which the emulated kernels (clusters of `ctas` blocks of 4 threads)
// disagree with the reference verifiers; `stage_rows` as emulate_verify's. `kept`: the global-memory exchange's
// workspace kept across the launches, whose words a launch left set count as differing rows.
int32_t rows_differing_in_clusters(VerifyKind kind, int ctas, FiberSchedule schedule, int32_t stage_rows, int cases,
                                   const std::string& label, bool overlap = true,
                                   RowExchange exchange = RowExchange::automatic,
                                   std::vector<uint64_t>* kept = nullptr) {
  int32_t differing = 0;
  for (int32_t i = 0; i < cases; ++i) {
    const uint64_t seed = 0xc1e + 977 * static_cast<uint64_t>(i) + static_cast<uint64_t>(kind) + 31 * ctas;
    CaseRandom g(seed);
    const int32_t vocab = i % 3 == 0 ? 64 : g.between(1, 64);
    const VerifyCase c = kind == VerifyKind::tree ? random_tree_case(seed, 12, vocab, g.between(0, 12))
                                                  : random_chain_case(seed, kind, 12, vocab, g.between(0, 8));
    EmulationOptions o{4, schedule, ctas, exchange};
    o.group_workspace = kept;
    const VerifyResult r = emulate_verify(c, o, stage_rows, overlap);
    differing += dirty_words(kept, label);
    for (int32_t b = 0; b < c.batch(); ++b) {
      const std::string diff = compare_with_reference(c, b, r);
      if (diff.empty()) continue;
      UNSCOPED_INFO(label << ", " << verify_kind_name(kind) << " case " << i << " row " << b << " V " << vocab << ": "
                          << diff);
      ++differing;
    }
  }
  return differing;
}

// Kept sets, tokens and statuses of the emulated sampler (8 threads per block, `ctas` blocks per row, every
// schedule) against the one-thread CPU backend of the same row algorithm.
void check_decisions_against_host(uint64_t seed, std::initializer_list<int> ctas,
                                  RowExchange exchange = RowExchange::automatic) {
  const SamplerCase c = random_sampler_case(seed, 2048, 40);
  const SamplerBatch batch(c.vocab, c.rows());
  std::vector<float> probs(c.logits.size());
  std::vector<int32_t> tokens(c.batch()), status(c.batch());
  run_fused_sampler_host(batch.host_params(c.logits.data(), probs.data(), tokens.data(), status.data()));
  for (int blocks : ctas)
    for (FiberSchedule schedule : kSchedules) {
      const SamplerRun r = emulate_sampler(c, EmulationOptions{8, schedule, blocks, exchange});
      size_t support_mismatches = 0;
      for (size_t i = 0; i < probs.size(); ++i) support_mismatches += (probs[i] > 0.0f) != (r.probs[i] > 0.0f);
      INFO(blocks << " blocks, " << fiber_schedule_name(schedule) << ", " << row_exchange_name(exchange));
      CHECK(support_mismatches == 0);
      CHECK(r.tokens == tokens);
      CHECK(r.status == status);
    }
}

// Rows that run every radix round: top-k below the number of candidates, no penalties.
SamplerCase top_k_case(uint64_t seed) {
  SamplerCase c = random_sampler_case(seed, 500, 16);
  for (SamplingParams& s : c.params) {
    s = SamplingParams{};
    s.temperature = 0.9f;
    s.top_k = 37;
  }
  for (auto& h : c.histories) h = TokenHistory{};
  return c;
}

// How many of the three schedules make the emulated sampler (`o` but for its schedule) disagree with the
// reference on some row, or fail (a divergent barrier).
int schedules_failing(const SamplerCase& c, EmulationOptions o) {
  int failing = 0;
  for (FiberSchedule schedule : kSchedules) {
    o.schedule = schedule;
    try {
      const SamplerRun r = emulate_sampler(c, o);
      for (int32_t row = 0; row < c.batch(); ++row)
        if (!compare_row(c, row, r.probs.data() + static_cast<size_t>(row) * c.vocab, r.tokens[row], r.status[row],
                         1e-6)
                 .ok) {
          ++failing;
          break;
        }
    } catch (const Error&) {
      ++failing;
    }
  }
  return failing;
}

}  // namespace

TEST_CASE("a fiber team runs every thread to each barrier before any passes it", "[kernels][emulation]") {
  for (FiberSchedule schedule : kSchedules) {
    FiberTeam team(8, schedule);
    std::vector<int> arrived(8, 0), seen_at_barrier(8, -1);
    team.run([&](int rank) {
      arrived[rank] = 1;
      team.barrier();
      int total = 0;
      for (int a : arrived) total += a;
      seen_at_barrier[rank] = total;
    });
    for (int s : seen_at_barrier) CHECK(s == 8);
  }
}

TEST_CASE("a divergent barrier is an error, and an exception in a thread reaches the caller", "[kernels][emulation]") {
  FiberTeam team(4, FiberSchedule::forward);
  CHECK_THROWS_WITH(team.run([&](int rank) {
    if (rank != 2) team.barrier();
  }),
                    Catch::Contains("divergent barrier"));
  CHECK_THROWS_WITH(team.run([&](int rank) {
    team.barrier();
    if (rank == 1) fail("thread one failed");
  }),
                    Catch::Contains("thread one failed"));
  // The team is reusable after both.
  int ran = 0;
  team.run([&](int) { ++ran; });
  CHECK(ran == 4);
}

TEST_CASE("the schedules run a phase's threads in different orders", "[kernels][emulation]") {
  // A read of a value another thread writes in the same phase (a missing barrier) must see different data
  // under different schedules; otherwise comparing schedules could not find such a race.
  std::vector<std::vector<int>> orders;
  for (FiberSchedule schedule : kSchedules) {
    FiberTeam team(4, schedule);
    std::vector<int> order;
    team.run([&](int rank) {
      team.barrier();
      order.push_back(rank);
    });
    orders.push_back(order);
  }
  CHECK(orders[0] != orders[1]);
  CHECK(orders[0] != orders[2]);
}

TEST_CASE("a cluster's block barrier waits for its block, the team barrier for every block", "[kernels][emulation]") {
  for (FiberSchedule schedule : kSchedules) {
    FiberTeam team(12, schedule, 256 * 1024, 3);  // 3 blocks of 4
    std::vector<int> arrived(12, 0), block_seen(12, -1), team_seen(12, -1);
    team.run([&](int rank) {
      const int block = rank / 4;
      arrived[rank] = 1;
      team.barrier();
      int mine = 0;
      for (int t = 0; t < 4; ++t) mine += arrived[block * 4 + t];
      block_seen[rank] = mine;
      team.team_barrier();
      int all = 0;
      for (int a : arrived) all += a;
      team_seen[rank] = all;
    });
    for (int s : block_seen) CHECK(s == 4);
    for (int s : team_seen) CHECK(s == 12);
  }
}

TEST_CASE("between cluster barriers each block runs alone, in the schedule's block order", "[kernels][emulation]") {
  // A block that reads another block's shared memory without the cluster barrier must see stale data under
  // some schedule; that needs whole blocks to run ahead of the others, across their own block barriers.
  std::vector<std::vector<int>> orders;
  for (FiberSchedule schedule : kSchedules) {
    FiberTeam team(6, schedule, 256 * 1024, 3);
    std::vector<int> order;
    team.run([&](int rank) {
      team.team_barrier();
      team.barrier();
      if (rank % 2 == 0) order.push_back(rank / 2);  // one entry per block, after its block barrier
      team.barrier();
    });
    orders.push_back(order);
  }
  CHECK(orders[0] == std::vector<int>{0, 1, 2});
  CHECK(orders[1] == std::vector<int>{2, 1, 0});
  CHECK(orders[2] == std::vector<int>{1, 2, 0});
}

TEST_CASE("a cluster whose threads disagree on the barrier is an error", "[kernels][emulation]") {
  FiberTeam team(8, FiberSchedule::forward, 256 * 1024, 2);
  CHECK_THROWS_WITH(team.run([&](int rank) {
    if (rank == 5)
      team.team_barrier();
    else
      team.barrier();
  }),
                    Catch::Contains("divergent barrier"));
  CHECK_THROWS_WITH(team.run([&](int rank) {
    if (rank < 4) team.team_barrier();
  }),
                    Catch::Contains("divergent barrier"));
  CHECK_THROWS_WITH(FiberTeam(6, FiberSchedule::forward, 256 * 1024, 4), Catch::Contains("divide"));
  int ran = 0;
  team.run([&](int) {
    team.team_barrier();
    ++ran;
  });
  CHECK(ran == 8);
}

TEST_CASE("the emulated fused sampler matches the reference pipeline at every thread count and schedule",
          "[kernels][emulation][sampler]") {
  for (int threads : {4, 8, 32})
    for (FiberSchedule schedule : kSchedules)
      for (const auto& [vocab, batch] : {std::pair<int32_t, int32_t>{7, 24}, {300, 24}, {1000, 12}, {1003, 12}}) {
        const SamplerCase c = random_sampler_case(0xe11 + vocab + threads, vocab, batch);
        const SamplerRun r = emulate_sampler(c, EmulationOptions{threads, schedule});
        for (int32_t row = 0; row < c.batch(); ++row) {
          const RowComparison cmp = compare_row(c, row, r.probs.data() + static_cast<size_t>(row) * vocab,
                                                r.tokens[row], r.status[row], 1e-6);
          INFO(threads << " threads, " << fiber_schedule_name(schedule) << ", V " << vocab << ": " << cmp.message);
          CHECK(cmp.ok);
        }
      }
}

// The rows of random sampler cases on which the emulated sampler, its rows split over `ctas` blocks of `threads`
// threads exchanging through `exchange`, disagrees with the reference pipeline; `kept` as rows_differing_in_clusters'.
int32_t sampler_rows_differing(int ctas, int threads, FiberSchedule schedule, RowExchange exchange,
                               std::vector<uint64_t>* kept = nullptr) {
  int32_t differing = 0;
  // Slices of 1 to 250 tokens, empty slices (V 7 over 8 blocks), 4-wide vectors (V 300, 1000).
  for (const auto& [vocab, batch] : {std::pair<int32_t, int32_t>{7, 24}, {300, 24}, {1000, 12}, {1003, 12}}) {
    const SamplerCase c = random_sampler_case(0xc1u + vocab + threads + ctas, vocab, batch);
    EmulationOptions o{threads, schedule, ctas, exchange};
    o.group_workspace = kept;
    const SamplerRun r = emulate_sampler(c, o);
    differing += dirty_words(kept, "the sampler");
    for (int32_t row = 0; row < c.batch(); ++row) {
      RowComparison cmp;
      try {
        cmp =
            compare_row(c, row, r.probs.data() + static_cast<size_t>(row) * vocab, r.tokens[row], r.status[row], 1e-6);
      } catch (const Error& e) {  // a row that is no distribution at all
        cmp = RowComparison{false, e.what()};
      }
      if (cmp.ok) continue;
      UNSCOPED_INFO(ctas << " blocks of " << threads << " threads, " << fiber_schedule_name(schedule) << ", "
                         << row_exchange_name(exchange) << ", V " << vocab << " row " << row << ": " << cmp.message);
      ++differing;
    }
  }
  return differing;
}

const RowExchange kExchanges[] = {RowExchange::automatic, RowExchange::global_memory};

TEST_CASE("the fused sampler split over an emulated cluster matches the reference pipeline",
          "[kernels][emulation][sampler][cluster]") {
  // Every schedule, through a cluster's shared memory and through the global-memory exchange.
  for (RowExchange exchange : kExchanges)
    for (int ctas : {2, 3, 8})
      for (int threads : {4, 32})
        for (FiberSchedule schedule : kSchedules) CHECK(sampler_rows_differing(ctas, threads, schedule, exchange) == 0);
}

TEST_CASE("pass 1's batches of loads in flight leave no vector of a thread out",
          "[kernels][emulation][mutant][sampler]") {
  // Pass 1 loads kLoadsInFlight vectors a thread before using them, and the thread's last ones, short of a batch, one
  // at a time: at V 1003 (one-wide vectors) every thread of 4 has a remainder. Without it, their tokens are never
  // processed: rows differ in one block a row and over a cluster.
  ScopedMutant mutant(Mutant::pass1_tail_vectors_dropped);
  CHECK(sampler_rows_differing(1, 4, FiberSchedule::forward, RowExchange::automatic) > 0);
  CHECK(sampler_rows_differing(3, 4, FiberSchedule::forward, RowExchange::automatic) > 0);
}

TEST_CASE("the cluster's sampler takes the decisions of the one-thread backend under every schedule",
          "[kernels][emulation][sampler][cluster]") {
  check_decisions_against_host(4243, {2, 5});
  check_decisions_against_host(4243, {2, 5}, RowExchange::global_memory);
}

namespace {

// Block and tree verification over 3 emulated blocks under a slots mutant: caught as rows that differ, or as blocks
// that disagree on the path and so on the barriers (an Error).
void check_slots_caught(RowExchange exchange) {
  for (VerifyKind kind : {VerifyKind::block, VerifyKind::tree}) {
    INFO(verify_kind_name(kind));
    bool caught = false;
    try {
      caught =
          rows_differing_in_clusters(kind, 3, FiberSchedule::forward, 1, 6, "one set of slots", true, exchange) > 0;
    } catch (const Error& e) {
      UNSCOPED_INFO(e.what());
      caught = true;
    }
    CHECK(caught);
  }
}

}  // namespace

TEST_CASE("the global-memory exchange's batteries catch slots and histograms that are not rotated",
          "[kernels][emulation][mutant][cluster]") {
  // Two histogram buffers: a block clears its share of the buffer a faster block already adds the next radix round
  // into. One set of slots: a block that runs ahead writes the next fold's partial over the one a slower block has
  // still to read. (A chain's row has too few collectives in a row to expose the slots.)
  CHECK(sampler_rows_differing(3, 4, FiberSchedule::forward, RowExchange::global_memory) == 0);
  {
    ScopedMutant mutant(Mutant::group_histograms_two_buffers);
    CHECK(sampler_rows_differing(3, 4, FiberSchedule::forward, RowExchange::global_memory) > 0);
  }
  {
    // Not the sampler: there a partial read as another fold's type is an index out of the row (pass 1's first bad
    // logit), which a GPU reports as an illegal address, and the emulation as a crash.
    ScopedMutant mutant(Mutant::group_slots_not_alternated);
    check_slots_caught(RowExchange::global_memory);
  }
}

TEST_CASE("a kept global-memory workspace is left zero by every launch, however the next one splits its rows",
          "[kernels][emulation][mutant][cluster]") {
  // One workspace through the sampler's and the verifiers' launches at 3, 8 and 2 blocks a row, so the groups' layouts
  // differ from one launch to the next: a slot or histogram word left set would lie in another launch's counters or
  // histograms. Each launch must match the reference and leave every word zero.
  std::vector<uint64_t> kept;
  for (int ctas : {3, 8, 2}) {
    INFO(ctas << " blocks");
    CHECK(sampler_rows_differing(ctas, 4, FiberSchedule::forward, RowExchange::global_memory, &kept) == 0);
    for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree})
      CHECK(rows_differing_in_clusters(kind, ctas, FiberSchedule::rotating, 1, 4, "kept workspace", true,
                                       RowExchange::global_memory, &kept) == 0);
  }
  // Three groups a launch (kEmulatedResidentGroups), laid out by the largest split.
  CHECK(kept.size() == static_cast<size_t>(kEmulatedResidentGroups * group_exchange::group_words(8)));
  // A launch that leaves it as it is: its words stay set, and the next launch's barriers count the last one's
  // arrivals (the emulated barrier refuses them; a GPU block would pass them early).
  {
    ScopedMutant mutant(Mutant::group_workspace_left_dirty);
    bool caught = false;
    try {
      caught = sampler_rows_differing(3, 4, FiberSchedule::forward, RowExchange::global_memory, &kept) > 0;
    } catch (const Error& e) {
      UNSCOPED_INFO(e.what());
      caught = true;
    }
    CHECK(caught);
  }
  // The launch that threw cleared the workspace: the next ones run from zero.
  CHECK(sampler_rows_differing(3, 4, FiberSchedule::forward, RowExchange::global_memory, &kept) == 0);
}

TEST_CASE("a cluster's batteries catch slots that are not alternated", "[kernels][emulation][mutant][cluster]") {
  // Through the cluster's shared memory, one barrier a fold: with one set of slots, a block that runs ahead writes the
  // next fold's partial over the one a slower block has still to read.
  ScopedMutant mutant(Mutant::cluster_slots_not_alternated);
  check_slots_caught(RowExchange::automatic);
}

TEST_CASE("the emulated group barrier counts the GPU barrier's arrivals and refuses a wrong target",
          "[kernels][emulation][cluster]") {
  // Three blocks of four threads, three barriers: barrier n releases at 3n arrivals. A target of n (arrivals not
  // multiplied by the blocks) would release a GPU block before the others arrive; one of 3n + 3 never.
  for (const auto& [scale, offset, fails] :
       {std::tuple<uint64_t, uint64_t, bool>{3, 0, false}, {1, 0, true}, {3, 3, true}}) {
    FiberTeam team(12, FiberSchedule::forward, 64 * 1024, 3);
    uint64_t arrivals = 0;
    const auto run = [&] {
      team.run([&](int fiber) {
        EmulatedGroupOps<4> ops{&team, fiber % 4, 3};
        for (uint64_t n = 1; n <= 3; ++n) ops.group_barrier(&arrivals, n * scale + offset);
      });
    };
    INFO("target " << scale << " n + " << offset);
    if (fails) {
      CHECK_THROWS_AS(run(), Error);
    } else {
      CHECK_NOTHROW(run());
      CHECK(arrivals == 9);
    }
  }
}

TEST_CASE("the emulated sampler keeps exactly the fixed-point nucleus at a step of the cumulative mass",
          "[kernels][emulation][sampler]") {
  // The float pass's guard band and the exact pass's fall-back under block semantics (test_kernels_host.cpp
  // has the mutant that shows these rows need the fall-back).
  const SamplerCase c = top_p_boundary_case(29, 1000, 60);
  for (int threads : {4, 32})
    for (int ctas : {1, 4}) {
      const SamplerRun r = emulate_sampler(c, EmulationOptions{threads, FiberSchedule::rotating, ctas});
      INFO(ctas << " blocks of " << threads << " threads");
      CHECK(count_top_p_boundary_mismatches(c, r.probs.data()) == 0);
    }
}

TEST_CASE("the emulated sampler takes the decisions of the one-thread backend under every schedule",
          "[kernels][emulation][sampler]") {
  check_decisions_against_host(4242, {1});
}

TEST_CASE("the emulated verification kernels reproduce the reference verifiers", "[kernels][emulation][verify]") {
  for (int threads : {4, 32})
    for (FiberSchedule schedule : kSchedules)
      for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree})
        for (int32_t i = 0; i < 12; ++i) {
          const uint64_t seed = 0xe5e + 977 * static_cast<uint64_t>(i) + static_cast<uint64_t>(kind);
          CaseRandom g(seed);
          const int32_t vocab = i % 3 == 0 ? 64 : g.between(1, 64);  // 64: 4-wide vectors
          const VerifyCase c = kind == VerifyKind::tree ? random_tree_case(seed, 16, vocab, g.between(0, 12))
                                                        : random_chain_case(seed, kind, 16, vocab, g.between(0, 8));
          const VerifyResult r = emulate_verify(c, EmulationOptions{threads, schedule});
          for (int32_t b = 0; b < c.batch(); ++b) {
            const std::string diff = compare_with_reference(c, b, r);
            INFO(threads << " threads, " << fiber_schedule_name(schedule) << ", " << verify_kind_name(kind) << " case "
                         << i << " row " << b << " V " << vocab << ": " << diff);
            CHECK(diff.empty());
          }
        }
}

TEST_CASE("the verification kernels split over an emulated cluster reproduce the reference verifiers",
          "[kernels][emulation][verify][cluster]") {
  // Slices of 1 to 32 tokens and empty ones (V < blocks), every schedule, every kernel; each block's rows staged in
  // its shared memory (poisoned with NaN before each row), and read where they are; with the expected acceptance
  // asked for (the driver's way) and not (the benchmark's: a tree then stages q alone on arrival).
  // The same through the global-memory exchange.
  for (RowExchange exchange : kExchanges)
    for (int32_t stage_rows : {1, 0})
      for (bool overlap : {true, false})
        for (int ctas : {2, 3, 8})
          for (FiberSchedule schedule : kSchedules)
            for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
              std::ostringstream label;
              label << ctas << " blocks, " << fiber_schedule_name(schedule) << ", " << row_exchange_name(exchange)
                    << (stage_rows ? ", staged" : ", unstaged") << (overlap ? ", overlap" : "");
              CHECK(rows_differing_in_clusters(kind, ctas, schedule, stage_rows, 6, label.str(), overlap, exchange) ==
                    0);
            }
}

TEST_CASE("the cluster batteries catch staged rows that are not replaced", "[kernels][emulation][verify][mutant]") {
  // The mutant keeps the first rows a block staged: block verification's backward scan and a tree's later nodes
  // then read the wrong rows. (A chain stages once per row, so it cannot tell.)
  ScopedMutant mutant(Mutant::staged_rows_stale);
  for (VerifyKind kind : {VerifyKind::block, VerifyKind::tree}) {
    INFO(verify_kind_name(kind));
    CHECK(rows_differing_in_clusters(kind, 3, FiberSchedule::forward, 1, 6, "stale staged rows") > 0);
    CHECK(rows_differing_in_clusters(kind, 3, FiberSchedule::forward, 1, 6, "stale, no overlap", false) > 0);
    CHECK(rows_differing_in_clusters(kind, 3, FiberSchedule::forward, 0, 6, "unstaged") == 0);
  }
}

TEST_CASE(
    "the emulated tree kernel verifies trees with holes as the trees of their drawn nodes, in blocks and clusters",
    "[kernels][emulation][verify]") {
  int64_t rows = 0;
  for (int ctas : {1, 3})
    for (int threads : {4, 32})
      for (FiberSchedule schedule : kSchedules)
        for (int32_t i = 0; i < 6; ++i) {
          const uint64_t seed = 0x401ee + 977 * static_cast<uint64_t>(i) + 31 * static_cast<uint64_t>(ctas);
          CaseRandom g(seed);
          const int32_t vocab = i % 3 == 0 ? 64 : g.between(2, 64);
          const HoledTreeCase h = holed_tree_case(seed, 8, vocab, g.between(1, 12), 6);
          const VerifyResult r = at_drawn_nodes(h, emulate_verify(h.holed, EmulationOptions{threads, schedule, ctas}));
          for (int32_t b = 0; b < h.holed.batch(); ++b, ++rows) {
            const std::string diff = compare_with_reference(h.drawn, b, r);
            INFO(ctas << " blocks of " << threads << " threads, " << fiber_schedule_name(schedule) << ", case " << i
                      << " row " << b << " V " << vocab << ": " << diff);
            CHECK(diff.empty());
          }
        }
  CHECK(rows == 2 * 2 * static_cast<int64_t>(std::size(kSchedules)) * 6 * 8);
}

TEST_CASE("the emulated tree kernel refuses holes out of place in blocks and clusters",
          "[kernels][emulation][verify]") {
  // Five nodes, so that the threads of a block, and the blocks of a cluster, each check some: the root's children are
  // node 0 and a hole, node 0's node 1, node 1's a hole, the hole's a hole. Then a drawn node after the hole, and one
  // under it.
  VerifyCase t = random_tree_case(14, 1, 10, 5);
  t.rows[0].num_draft = 5;
  t.rows[0].flags = kVerifyRowHasQ | kVerifyRowHoles;
  t.rows[0].scheme = static_cast<int32_t>(TreeSiblingScheme::without_replacement);
  struct Case {
    std::vector<int32_t> tokens, parents;
    VerifyRowStatus status;
  };
  for (const Case& k : {Case{{3, 5, -1, -1, -1}, {-1, 0, -1, 1, 2}, VerifyRowStatus::ok},
                        Case{{3, 5, -1, -1, 4}, {-1, 0, -1, 1, -1}, VerifyRowStatus::bad_draft_token},
                        Case{{3, 5, -1, -1, 4}, {-1, 0, -1, 1, 2}, VerifyRowStatus::bad_draft_token}})
    for (int ctas : {1, 3})
      for (FiberSchedule schedule : kSchedules) {
        VerifyCase c = t;
        c.tokens = k.tokens;
        c.parents = k.parents;
        const VerifyResult r = emulate_verify(c, EmulationOptions{4, schedule, ctas});
        INFO(ctas << " blocks, " << fiber_schedule_name(schedule) << ", last node " << k.tokens.back() << " under "
                  << k.parents.back());
        CHECK(r.status[0] == static_cast<int32_t>(k.status));
      }
}

TEST_CASE("the emulated tree kernel handles trees of 256 nodes", "[kernels][emulation][verify]") {
  for (bool deep : {false, true}) {
    const VerifyCase c = random_tree_case(0x256e + (deep ? 1 : 0), 4, 44, kMaxVerifyTreeNodes, deep);
    const VerifyResult r = emulate_verify(c, EmulationOptions{8, FiberSchedule::rotating});
    for (int32_t b = 0; b < c.batch(); ++b) {
      const std::string diff = compare_with_reference(c, b, r);
      INFO((deep ? "deep" : "bushy") << " row " << b << ": " << diff);
      CHECK(diff.empty());
    }
  }
}

TEST_CASE("the first token emitted by the emulated kernels has the target law (G-test)",
          "[kernels][emulation][verify][law]") {
  constexpr int32_t kRows = 20000;
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::block, VerifyKind::tree}) {
    const LawCase lc = law_case(kind, kRows, 505 + static_cast<uint64_t>(kind));
    // One block per row, a cluster, and blocks exchanging through global memory.
    for (const auto& [ctas, exchange] : {std::pair<int, RowExchange>{1, RowExchange::automatic},
                                         {3, RowExchange::automatic},
                                         {3, RowExchange::global_memory}}) {
      const VerifyResult r = emulate_verify(lc.c, EmulationOptions{4, FiberSchedule::forward, ctas, exchange});
      const stats::GofResult gof = stats::g_test(first_token_counts(r, kRows, lc.c.vocab), lc.law);
      INFO(verify_kind_name(kind) << ", " << ctas << " blocks, " << row_exchange_name(exchange) << ": " << gof.detail);
      CHECK(gof.passed(stats::kAlpha));
    }
  }
}

TEST_CASE("the law test through a cluster catches a draw that leaves out the blocks before",
          "[kernels][emulation][mutant]") {
  // Each block of 3 then starts its cumulative weight at 0: tokens of later blocks come out too often.
  constexpr int32_t kRows = 20000;
  ScopedMutant mutant(Mutant::sliced_draw_ignores_blocks_before);
  for (VerifyKind kind : {VerifyKind::chain, VerifyKind::tree}) {
    const LawCase lc = law_case(kind, kRows, 505 + static_cast<uint64_t>(kind));
    const VerifyResult r = emulate_verify(lc.c, EmulationOptions{4, FiberSchedule::forward, 3});
    const stats::GofResult gof = stats::g_test(first_token_counts(r, kRows, lc.c.vocab), lc.law);
    INFO(verify_kind_name(kind) << ": " << gof.detail);
    CHECK_FALSE(gof.passed(stats::kAlpha));
  }
}

TEST_CASE("comparing schedules finds a missing barrier", "[kernels][emulation][mutant]") {
  // The mutant reads the radix select's picked bucket without the barrier after the thread that found it
  // wrote it: threads that run before that thread in a phase read the previous pick.
  const SamplerCase c = top_k_case(77);
  CHECK(schedules_failing(c, EmulationOptions{8}) == 0);
  ScopedMutant mutant(Mutant::emulated_pick_unsynchronised);
  CHECK(schedules_failing(c, EmulationOptions{8}) > 0);
}

TEST_CASE("radix passes over the compacted candidates: the row's thresholds, and a missing barrier found",
          "[kernels][emulation][mutant]") {
  // top-k then top-p: top-p's passes read the candidate list that top-k's cut left (37 fit the host Blocks' 40;
  // 45 do not, and the passes read the row). The mutant reads the list's count before every add has landed, so a
  // thread covers part of the list (or, with 45, takes a partial list for a whole one): the thresholds change.
  for (int32_t top_k : {37, 45}) {
    SamplerCase c = top_k_case(79);
    for (SamplingParams& s : c.params) {
      s.top_k = top_k;
      s.top_p = 0.8f;
    }
    INFO("top_k " << top_k);
    CHECK(schedules_failing(c, EmulationOptions{8}) == 0);
    CHECK(schedules_failing(c, EmulationOptions{4, FiberSchedule::forward, 3}) == 0);
    ScopedMutant mutant(Mutant::emulated_candidates_unsynchronised);
    CHECK(schedules_failing(c, EmulationOptions{8}) > 0);
  }
  // A cluster whose blocks decide differently (top-k 100 over 3 blocks: ~33 candidates each, some fitting 40 and some
  // not), and a cut that rises after a compaction that did not fit (min-p low, then top-k 7, then top-p: the list is
  // tried at min-p's cut, then again at top-k's).
  SamplerCase mixed = top_k_case(80), rising = top_k_case(81);
  for (SamplingParams& s : mixed.params) {
    s.top_k = 100;
    s.top_p = 0.9f;
  }
  for (SamplingParams& s : rising.params) {
    s.min_p = 0.001f;
    s.top_k = 7;
    s.top_p = 0.7f;
  }
  for (const SamplerCase* c : {&mixed, &rising}) {
    CHECK(schedules_failing(*c, EmulationOptions{4, FiberSchedule::forward, 3}) == 0);
    CHECK(schedules_failing(*c, EmulationOptions{8}) == 0);
  }
}

TEST_CASE("comparing schedules finds a cluster histogram merged without its barrier or over a live one",
          "[kernels][emulation][mutant][cluster]") {
  // cluster_histogram_unsynchronised merges the blocks' radix histograms before the cluster barrier that makes them
  // complete, so a block counts what another block had added so far (nothing, or the previous round's counts).
  // cluster_histograms_not_alternated keeps one histogram a block with one barrier a round: a block that runs ahead
  // clears and counts the next round into the histogram a slower block has still to merge.
  const SamplerCase c = top_k_case(78);
  const EmulationOptions clusters{4, FiberSchedule::forward, 3};
  CHECK(schedules_failing(c, clusters) == 0);
  for (Mutant m : {Mutant::cluster_histogram_unsynchronised, Mutant::cluster_histograms_not_alternated}) {
    ScopedMutant mutant(m);
    CHECK(schedules_failing(c, clusters) > 0);
  }
}

TEST_CASE("RowSampler on cuda-host draws, from one uploaded row, what the CPU draws", "[kernels][emulation][sampler]") {
  const testing::RowSamplerCheck c = testing::check_row_sampler(Device::cuda_host);
  CHECK(c.drawn == c.expected);
  CHECK(c.worst_probability_difference < 1e-6);
}

// A launch through row maps (SamplerKernelParams::logits_rows / probs_rows): row r reads logits row pick[r] (a row read
// by several rows, as a draft's frontier row is by each of its children) and writes probs row place[r] of a larger
// array. Each row must give, bit for bit, what the dense launch gives for row pick[r] with the same parameters,
// history and key.
TEST_CASE("the fused sampler reads and writes rows through maps as the dense launch does",
          "[kernels][emulation][sampler]") {
  const int32_t vocab = 300;
  const SamplerCase c = random_sampler_case(0x3a9, vocab, 6);
  const SamplerBatch dense_batch(c.vocab, c.rows());
  std::vector<float> dense_probs(c.logits.size());
  std::vector<int32_t> dense_tokens(c.batch()), dense_status(c.batch());
  run_fused_sampler_host(
      dense_batch.host_params(c.logits.data(), dense_probs.data(), dense_tokens.data(), dense_status.data()));

  const std::vector<int32_t> pick = {4, 0, 0, 5, 2, 2, 2, 1, 3};
  const std::vector<int32_t> place = {7, 2, 9, 0, 4, 11, 1, 5, 8};  // distinct rows of 12
  // Two ways to the same rows: every row its own copy of its inputs and logits read through logits_rows, or the
  // dense inputs read through input_rows (the logits following them).
  std::vector<SamplerBatchRow> rows;
  for (int32_t r : pick) rows.push_back(c.rows()[static_cast<size_t>(r)]);
  const SamplerBatch copied(c.vocab, rows);
  std::vector<SamplerRowParams> picked_params;
  for (int32_t r : pick) picked_params.push_back(dense_batch.rows[static_cast<size_t>(r)]);
  const size_t R = pick.size(), V = static_cast<size_t>(vocab);
  const auto check_run = [&](const std::string& label, const auto& run) {
    for (bool through_inputs : {false, true}) {
      std::vector<float> probs(12 * V, -1.0f);
      std::vector<int32_t> tokens(R), status(R);
      SamplerKernelParams p = (through_inputs ? dense_batch : copied)
                                  .host_params(c.logits.data(), probs.data(), tokens.data(), status.data());
      p.batch = static_cast<int32_t>(R);
      if (through_inputs) {
        p.rows = picked_params.data();
        p.input_rows = pick.data();
      } else {
        p.logits_rows = pick.data();
      }
      p.probs_rows = place.data();
      run(p);
      for (size_t r = 0; r < R; ++r) {
        const size_t from = static_cast<size_t>(pick[r]);
        INFO(label << (through_inputs ? ", through input_rows" : ", through logits_rows") << ": row " << r
                   << " reads row " << from << ", writes row " << place[r]);
        CHECK(tokens[r] == dense_tokens[from]);
        CHECK(status[r] == dense_status[from]);
        CHECK(std::equal(dense_probs.begin() + from * V, dense_probs.begin() + (from + 1) * V,
                         probs.begin() + place[r] * V));
      }
      // The rows no map names are left as they were.
      for (size_t row : {3u, 6u, 10u}) CHECK(probs[row * V] == -1.0f);
    }
  };
  check_run("one-thread backend", [](const SamplerKernelParams& p) { run_fused_sampler_host(p); });
  for (RowExchange exchange : kExchanges)
    for (int ctas : {1, 3})
      for (FiberSchedule schedule : kSchedules)
        check_run(
            std::to_string(ctas) + " blocks, " + fiber_schedule_name(schedule) + ", " + row_exchange_name(exchange),
            [&](const SamplerKernelParams& p) {
              emulate_fused_sampler(p, EmulationOptions{8, schedule, ctas, exchange});
            });
}

TEST_CASE("emulation refuses a thread count it has no instantiation for", "[kernels][emulation]") {
  CHECK_THROWS_WITH(check_emulation_options(EmulationOptions{6, FiberSchedule::forward}),
                    Catch::Contains("must be 4, 8 or 32, got 6"));
  CHECK_THROWS_WITH(check_emulation_options(EmulationOptions{8, FiberSchedule::forward, 0}),
                    Catch::Contains("blocks per cluster must be in [1, 16], got 0"));
  CHECK_THROWS_WITH(check_emulation_options(EmulationOptions{8, FiberSchedule::forward, 17}),
                    Catch::Contains("got 17"));
}
