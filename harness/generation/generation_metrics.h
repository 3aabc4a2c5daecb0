// Counters of a generation run, named after llama.cpp's (n_drafts, n_acc_tokens, n_acc_tokens_per_pos)
// and Spec-Bench's per-prompt record (new_tokens, wall time, accept_lengths).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace specula {

struct GenerationMetrics {
  int64_t sequences = 0;
  int64_t stopped = 0;     // sequences ended by a stop token or a constraint's end (the others: max_new_tokens)
  int64_t new_tokens = 0;  // tokens kept (after cutting to max_new_tokens)
  int64_t steps = 0;       // target verification steps (= target calls for speculative methods)
  int64_t target_calls = 0;
  int64_t draft_calls = 0;  // draft model forward passes
  int64_t proposed = 0;     // draft positions offered to the verifier (chain: K per step; tree: depth)
  int64_t accepted = 0;     // accepted draft tokens
  int64_t emitted = 0;      // tokens emitted by verification steps (accepted + correction/bonus)
  int64_t q_zero_errors = 0;
  std::vector<int64_t> position_reached;    // [K] steps in which position i was tested
  std::vector<int64_t> position_accepted;   // [K] steps in which position i was accepted
  std::vector<int64_t> accepted_histogram;  // [K + 1] steps that accepted exactly n drafts
  // [r] verification steps whose target call ran r rows (the tree's nodes + the row after the context): what
  // a cost profile (harness/experiment/cost_profile.h) needs to cost the steps on another machine.
  std::vector<int64_t> verify_rows_histogram;
  // [r] the same steps of a sequence decoded in lockstep, by the rows of the step's widest call: a batch's step over
  // pooled KV caches pads every call to those rows (harness/models/transformer/cache_pool.h), so that is what each
  // sequence's step costs there. Empty for a sequence decoded alone.
  std::vector<int64_t> lockstep_rows_histogram;
  // On a device (--device cuda | cuda-host): the times the host waited for the device's results during the steps this
  // sequence decoded in (a lockstep batch's waits count for each of its sequences), so device_waits / steps is the
  // waits a step: one for verification, plus one a draft depth, or one a proposal for a draft drawn fed. 0 on the CPU.
  int64_t device_waits = 0;
  // On a device: the times, during those steps, a staging buffer was written again while an upload from it might still
  // have been in flight (KernelStream::staging_waits: the guard then drained the stream). 0 for a step laid out as it
  // should be; the device checks require it.
  int64_t staging_waits = 0;
  // On a device: the times, during those steps, a step buffer grew and so drained the stream first (its old array may
  // still have been in use: KernelStream::growth_drains). A run's first steps grow its buffers; a steady step none.
  int64_t growth_waits = 0;
  // On a device: the most bytes the device's step buffers were asked for by the end of a step this sequence decoded in
  // (its batch's, all slots together: KernelStream::requested_device_bytes), which BatchVerifier::check_fits bounds
  // before the run. The buffers hold up to half again. Merged as a maximum.
  int64_t device_buffer_bytes = 0;
  // The target's and the draft model's step graphs (LanguageModel::step_graph_tally) during the steps this sequence
  // decoded in lockstep (a batch's counts charged to each of its sequences, as device_waits): static-shape steps run,
  // of those replayed from a captured CUDA graph, graphs built and graphs evicted for room. 0 without step graphs.
  int64_t step_graph_runs = 0, step_graph_replays = 0, step_graphs_built = 0, step_graphs_evicted = 0;
  double expected_acceptance_sum = 0.0;  // sum over tested positions of sum_x min(p, q)
  int64_t expected_acceptance_count = 0;
  double draft_seconds = 0.0, target_seconds = 0.0, verify_seconds = 0.0, wall_seconds = 0.0;
  // Processing the prompt (the target's prefill and the drafter's begin), the same work for every method and
  // not part of the decoding loop that Leviathan et al.'s speedup models; in wall_seconds, not in the others.
  // Autoregressive decoding's first target call is its prefill: timed here, still counted in target_calls.
  double prompt_seconds = 0.0;

  void resize(int32_t positions);
  void merge(const GenerationMetrics& other);
  double acceptance_rate() const { return proposed ? static_cast<double>(accepted) / proposed : 0.0; }
  double mean_accepted_length() const { return steps ? static_cast<double>(emitted) / steps : 0.0; }
  double expected_acceptance() const {
    return expected_acceptance_count ? expected_acceptance_sum / expected_acceptance_count : 0.0;
  }
  // What makes counters read from a file impossible ("" where none): arrays of other lengths than the draft
  // positions give (merge and the summary index one by another), more positions than the deepest draft, negative
  // counts, more accepted than reached or proposed.
  std::string consistency_problem() const;
  // Accepted / reached at each draft position; NaN where no step reached it.
  std::vector<double> per_position_acceptance() const;
  // The one JSON shape of a run's metrics, written by `generate --metrics-json` (with "method" and "lossy") and
  // inside every record of `run`'s records.jsonl: the counters above under their names (proposed -> proposed_tokens,
  // accepted -> accepted_tokens, emitted -> emitted_tokens, stopped -> stopped_sequences, accepted_histogram ->
  // accepted_length_histogram, times as *_seconds) and what follows from them (acceptance_rate,
  // mean_accepted_length, per_position_acceptance, expected_acceptance, tokens_per_second,
  // decode_tokens_per_second). read_json reads it back (and the *_time names of records written before it).
  void write_json(nlohmann::json& j) const;
  static GenerationMetrics read_json(const nlohmann::json& j);
  std::string to_json(const std::string& method, bool lossy) const;
};

}  // namespace specula
