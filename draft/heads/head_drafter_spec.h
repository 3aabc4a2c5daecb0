// What a `medusa:` or `eagle:` drafter spec says, read without LibTorch: the command line and a run check a spec
// with it before any model loads (draft/registry's check_drafter_spec); head_drafters.cpp loads what it names.
#pragma once

#include <cstdint>
#include <string>

namespace specula {

struct HeadDrafterOptions {
  std::string kind;          // "medusa" | "eagle"
  std::string heads_dir;     // the folder from specula train-medusa / train-eagle
  std::string target_dir;    // the target checkpoint read for features ("" = the one recorded with the heads)
  std::string tree_file;     // static tree of rank paths ("" = from the request)
  bool dynamic = false;      // EAGLE-2 dynamic tree (eagle only)
  int32_t depth = 0;         // dynamic: levels of the tree (0 = the request's --tree depth)
  int32_t top_k = 4;         // dynamic: frontier width and children ranked per expanded node
  int32_t total_tokens = 0;  // dynamic: nodes kept (0 = the request's --tree node count)
  // The heads' matrices in memory: "target" (the dtype the target's matrices are kept in: a drafter streams
  // its weights every draft token, so fp32 heads beside a 16-bit target would cost twice the bytes they need)
  // | float32 | float16 | bfloat16. Rounding the draft's weights changes the drafts, never the output law.
  std::string weights_dtype = "target";
};

// "DIR[,static|dynamic][,depth=N][,top_k=N][,total_tokens=N][,tree=FILE][,target=DIR][,weights_dtype=D]" after
// "medusa:" or "eagle:". Throws Error naming the spec and the bad entry.
HeadDrafterOptions parse_head_drafter_spec(const std::string& kind, const std::string& rest, const std::string& spec);

// Checks a spec before any model loads: parse_head_drafter_spec's checks, and that the heads folder and a
// tree=FILE or target=DIR it names exist as what they should be.
void check_head_drafter_spec(const std::string& kind, const std::string& rest, const std::string& spec);

// The vocabulary the heads of a spec draft over (their target's), read from the configs alone after
// check_head_drafter_spec's checks: the heads' config, and their target's, which must still be the target they were
// trained on (check_heads_target_config). A run reads it before any model loads.
int32_t head_drafter_vocab_size(const std::string& kind, const std::string& rest, const std::string& spec);

// How deep the heads of a spec draft, read from their config alone: Medusa's K heads draft K tokens ahead; 0 where a
// request's shape sets no bound the heads could miss (EAGLE, which drafts any depth, or a tree=FILE, checked against
// the heads when it is read).
int32_t head_drafter_max_depth(const std::string& kind, const std::string& rest, const std::string& spec);
// The rule both read: `heads` Medusa heads draft that many tokens ahead; a tree file or EAGLE sets no bound.
inline int32_t head_draft_bound(const std::string& kind, bool tree_file, int32_t heads) {
  return kind == "medusa" && !tree_file ? heads : 0;
}

}  // namespace specula
