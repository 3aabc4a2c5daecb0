#include "draft/heads/head_drafter_spec.h"

#include <set>
#include <sstream>

#include "draft/drafter_options.h"
#include "draft/heads/draft_heads_config.h"
#include "harness/io/input_file.h"
#include "harness/models/transformer/transformer_config.h"
#include "kernels/shared/error.h"

namespace specula {

HeadDrafterOptions parse_head_drafter_spec(const std::string& kind, const std::string& rest, const std::string& spec) {
  if (kind != "medusa" && kind != "eagle") fail_parameter("draft", " ", spec, ": unknown head drafter '", kind, "'");
  HeadDrafterOptions o;
  o.kind = kind;
  const size_t comma = rest.find(',');
  o.heads_dir = rest.substr(0, comma);
  if (o.heads_dir.empty())
    fail_parameter("draft", " ", spec, ": '", kind, ":' needs the heads folder, e.g. ", kind, ":results/models/", kind);
  std::string options;
  bool static_flag = false;
  if (comma != std::string::npos) {
    std::stringstream ss(rest.substr(comma + 1));
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item == "dynamic" || item == "static") {
        if (kind != "eagle" && item == "dynamic")
          fail_parameter("draft", " ", spec,
                         ": dynamic trees need the EAGLE head (Medusa's candidates do not see the drafts)");
        (item == "dynamic" ? o.dynamic : static_flag) = true;
        continue;
      }
      options += (options.empty() ? "" : ",") + item;
    }
    if (rest.back() == ',') fail_parameter("draft", " ", spec, ": trailing ','");
  }
  if (o.dynamic && static_flag) fail_parameter("draft", " ", spec, ": both 'static' and 'dynamic'");
  const std::set<std::string> known =
      kind == "eagle" ? std::set<std::string>{"tree", "target", "depth", "top_k", "total_tokens", "weights_dtype"}
                      : std::set<std::string>{"tree", "target", "weights_dtype"};
  for (const auto& [key, value] : parse_drafter_options(options, spec, known)) {
    if (key == "tree") o.tree_file = value;
    if (key == "target") o.target_dir = value;
    if (key == "weights_dtype") {
      if (value != "target" && !is_weights_dtype_name(value))
        fail_parameter("draft", " ", spec, ": weights_dtype must be target, float32, float16 or bfloat16, got '", value,
                       "'");
      o.weights_dtype = value;
    }
    if (key == "depth" || key == "top_k" || key == "total_tokens") {
      if (!o.dynamic)
        fail_parameter("draft", " ", spec, ": ", key, " is an option of the dynamic tree (add ',dynamic')");
      const long v = drafter_option_int(value, key, spec);
      const long hi = key == "total_tokens" ? 4096 : 64;
      if (v < 1 || v > hi) fail_parameter("draft", " ", spec, ": ", key, " must be in 1..", hi, ", got ", v);
      (key == "depth" ? o.depth : key == "top_k" ? o.top_k : o.total_tokens) = static_cast<int32_t>(v);
    }
  }
  if (o.dynamic && !o.tree_file.empty())
    fail_parameter("draft", " ", spec, ": tree=FILE is a static tree; drop 'dynamic'");
  return o;
}

void check_head_drafter_spec(const std::string& kind, const std::string& rest, const std::string& spec) {
  const HeadDrafterOptions o = parse_head_drafter_spec(kind, rest, spec);
  const auto check = [&](const std::string& path, const char* what, bool folder) {
    if (const std::string problem = path_kind_problem(path, folder); !problem.empty())
      fail_parameter("draft", " ", spec, ": ", what, " '", path, "'", problem);
  };
  check(o.heads_dir, "heads folder", true);
  if (!o.target_dir.empty()) check(o.target_dir, "target", true);
  if (!o.tree_file.empty()) check(o.tree_file, "tree", false);
}

int32_t head_drafter_vocab_size(const std::string& kind, const std::string& rest, const std::string& spec) {
  check_head_drafter_spec(kind, rest, spec);
  const HeadDrafterOptions o = parse_head_drafter_spec(kind, rest, spec);
  const DraftHeadsConfig heads = read_draft_heads_config(o.heads_dir);
  const std::string where = kind + ":" + o.heads_dir;  // as the drafter's load names it
  if (heads.kind != kind) fail_parameter("draft", " ", where, ": the folder holds ", heads.kind, " heads, not ", kind);
  const std::string target_dir = o.target_dir.empty() ? heads_target_folder(o.heads_dir, heads) : o.target_dir;
  check_heads_target_config(heads, target_dir, read_checkpoint_config(target_dir), where);
  return static_cast<int32_t>(heads.target_model.vocab_size);
}

int32_t head_drafter_max_depth(const std::string& kind, const std::string& rest, const std::string& spec) {
  check_head_drafter_spec(kind, rest, spec);
  const HeadDrafterOptions o = parse_head_drafter_spec(kind, rest, spec);
  if (kind != "medusa") return 0;
  return head_draft_bound(kind, !o.tree_file.empty(), read_draft_heads_config(o.heads_dir).medusa_heads);
}

}  // namespace specula
