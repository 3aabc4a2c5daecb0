// Mutation points: one-line markers, `if (mutant_on(Mutant::name))`, where the test suite can switch on a
// deliberately broken variant of the sampler, a verifier or the generation loop. Each is a realistic bug seen
// in public systems (tests/TESTING.md, "Mutants"); the suite switches one on at a time and asserts that the
// same statistical test that passes the correct code now fails. A test that cannot fail is a defect; this is
// how we show ours can.
//
// The switch itself is test code (tests/support/mutant_switch.h). Production code only reads it through a weak
// reference: in any program that does not link the switch (the `specula` binary among them) the reference is
// unresolved, and every point reads false. Configuring with -DSPECULA_MUTATION_POINTS=OFF compiles the points
// out altogether (mutant_on is then constant false); the test suite is not built in that configuration.
#pragma once

namespace specula {

enum class Mutant {
  none,
  // Sampler pipeline.
  top_p_drops_crossing_token,       // keeps only tokens strictly inside P, not the one that crosses it
  top_k_breaks_ties_by_index,       // keeps exactly k tokens, dropping tied ones at the boundary
  min_p_before_temperature,         // min-p threshold computed on untempered logits
  temperature_applied_twice,        // logits / T^2
  repetition_penalty_ignores_sign,  // always divides by r, so negative logits get *more* likely
  frequency_penalty_counts_prompt,  // frequency counts over prompt ∪ output
  presence_penalty_per_occurrence,  // presence applied per occurrence like frequency
  logit_bias_after_temperature,     // bias added after dividing by T
  min_tokens_off_by_one,            // stop tokens allowed once |output| == min_tokens - 1
  bad_words_ignore_prefix,          // bans the last token of a bad word whatever the history
  typical_signed_score,             // ranks by -log p - H instead of |-log p - H|
  tfs_first_derivative,             // tail-free uses first instead of second derivatives
  dynatemp_full_vocab_entropy,      // normalises entropy by log V instead of log(#candidates)
  mirostat_natural_log_surprise,    // surprise in nats instead of bits
  uniform_reused_across_rows,       // every row of a batch draws with the same uniform
  // Sampler edges outside the frequency tests' range above (they move no law of random rows: they are caught on
  // rows built for them, tests/test_top_p_boundary.cpp and test_logprobs.cpp).
  top_p_keeps_boundary_token,  // keeps the token whose preceding mass equals top_p * Z exactly
  logprobs_top_lists_removed,  // --logprobs' processed top-n lists tokens the filters removed (p = 0)
  // Verifiers (used from the verification issue on).
  accept_q_over_p,                 // accepts with min(1, q/p)
  residual_not_subtracted,         // resamples from p instead of norm((p - q)+)
  residual_zero_draft_token,       // residual = p with the draft token zeroed even for a real q
  bonus_from_draft,                // bonus token drawn from q_{k+1} instead of p_{k+1}
  bonus_missing,                   // no bonus token after a fully accepted draft
  penalties_ignore_draft_prefix,   // target rows see only the committed history
  uniform_shared_accept_residual,  // one uniform decides acceptance and picks the residual token
  uniform_closed_at_zero,          // u drawn in [0, 1) with the test u <= p/q
  tree_merge_duplicate_siblings,   // duplicate i.i.d. siblings tested once
  tree_prune_stochastic_by_q,      // stochastic candidates reranked by q, then tested with p/q
  block_tokenwise_residual,        // block verification with the token-wise residual
  draft_q_from_raw_logits,         // recorded q is softmax(raw logits) while the draft sampled processed
  constraint_state_not_advanced,   // draft-path rows keep the committed constraint state
  constraint_liveness_per_byte,    // a constraint allows tokens into prefixes no permitted tokens can complete
  constraint_byte_walk_any_byte,   // ... or takes bytes no single-byte token spells as a way to complete one
  constraint_ignores_min_tokens,   // ... or into matches that must end before min_tokens, when only a stop ends them
  constraint_ignores_bad_words,    // ... or into outputs after which bad words of several tokens ban every way on
  dfa_byte_classes_merged,         // the byte DFA's classes ignore one NFA byte set: bytes it splits step alike
  dynamic_tree_tested_with_q,      // EAGLE-2's value-chosen tree tested with p/q as draws w/o replacement
  typical_threshold_max,           // Medusa typical acceptance with max(eps, delta e^-H) instead of min
  typical_entropy_without_offset,  // Medusa's entropy as -sum p log p, without its log(p + 1e-5)
  step_draws_overlap,              // (step, slot) packed as (step << 8) | slot: draw 256 of a step is the next's 0
  // Drafter training.
  distill_labels_at_unit_temperature,  // a distilled n-gram's labels drawn from softmax(logits), whatever T
  // Models.
  kv_cache_keeps_rejected_drafts,        // a session keeps the keys/values of a rejected draft tree
  batch_rows_use_shortest_cache_length,  // a batched forward gives every sequence the shortest cache's length
  step_graph_sees_unused_slots,          // a static-shape step leaves the cache's unused slots visible (mask 0)
  pool_padding_writes_cached_slot,       // a pooled step's padding rows write slot 0 instead of the scratch slot
  // Generation loop.
  stop_checked_per_step,            // a stop token ends the sequence only after its step: later tokens kept
  tree_proposed_counts_nodes,       // a tree step adds its nodes, not its depth, to the proposed positions
  tree_reached_counts_every_depth,  // a tree step counts every depth as reached, not those up to the rejection
  confidence_stop_drops_draft,      // a chain's stop on the draft's doubt drops the draft it doubts
  draft_cut_at_unlikely_token,      // a chain cut before its first token the draft drew with probability < 0.3
  // Kernels.
  top_p_float_pass_uncertified,  // the float-first top-p threshold used without the guard band's proof
  pass1_tail_vectors_dropped,    // pass 1 skips a thread's last vectors, short of a batch of loads in flight
  staged_rows_stale,             // a cluster's shared memory keeps the verification rows it staged first
  // Kernel emulation (kernels/emulated_block.h).
  emulated_pick_unsynchronised,        // the radix select's picked bucket read without the barrier after its write
  emulated_candidates_unsynchronised,  // the candidate list's count read without the barrier after the adds
  cluster_histogram_unsynchronised,    // a cluster's blocks merge each other's radix histograms before its barrier
  sliced_draw_ignores_blocks_before,   // a cluster's draw leaves out the weight of the blocks before this one
  cluster_slots_not_alternated,        // a cluster's blocks write every fold's partials into one set of slots
  cluster_histograms_not_alternated,   // a cluster's blocks count every radix round into one histogram
  group_slots_not_alternated,          // a global-memory exchange writes every fold's partials into one set of slots
  group_histograms_two_buffers,        // a global-memory exchange rotates its radix histograms over two buffers
  group_workspace_left_dirty,          // a global-memory exchange's launch leaves its counters, slots and histogram set
  // Device drafting (verify/device/batch_verifier.cpp, draft/model_drafter.cpp, kernels/draft_children_row.h).
  device_draft_laws_misplaced,  // drafts drawn on the device keep the laws of rows 2m and 2m + 1 at each other's row
  device_siblings_share_key,    // a tree's children of one node, drawn in one launch, all take the first child's key
  ranked_children_skip_ties,    // a ranked tree's next child is the best token strictly less probable than the last
  device_siblings_replaced,     // siblings drawn without replacement on the device each from the whole law
  device_siblings_skip_spent,   // a row's siblings drawn on the device start as if every earlier row drew them all
  fed_drafts_read_first_depth,  // a fed draft's every depth's forward reads the first depth's ids as its newest nodes'
  device_siblings_dead_rows_draw,  // a fixed-shape tree's rows under a node never drawn draw siblings all the same
  device_siblings_carry_dropped,   // a fixed-shape tree's depths each start at the sequence's first uniform
  kept_ids_depths_misplaced,       // a fed draft's ids kept for verification take each depth's from the depth before
  tree_holes_keyed_by_shape,       // a tree with holes is verified with its full shape's keys, not its drawn nodes'
  device_chains_not_cut,  // chains drawn on the device keep the batch's longest K: none cut to its own K or after a
                          // doubt
  pending_counts_skip_newest,  // a penalised row's pending draft ids leave out the newest one (its own node's token)
};

#ifdef SPECULA_NO_MUTATION_POINTS
constexpr bool mutant_on(Mutant) { return false; }
#else
// The active mutant's number, defined only by tests/support/mutant_switch.cpp (0 = Mutant::none).
extern int g_active_mutant_number __attribute__((weak));
inline bool mutant_on(Mutant m) {
  return &g_active_mutant_number != nullptr && g_active_mutant_number == static_cast<int>(m);
}
#endif

}  // namespace specula
