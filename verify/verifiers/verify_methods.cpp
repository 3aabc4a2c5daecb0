// The verification methods as one table: name, the verifier a step runs, and the traits the rest of the code reads
// (verification.h). A new method is its verifier's file plus one row here; its VerifyMethod is its row, found by
// name (parse_verify_method). The built-in methods' rows are fixed by VerifyMethod's named values.
#include "verify/verifiers/verify_methods.h"

#include "kernels/shared/error.h"
#include "verify/verifiers/verification.h"

namespace specula {
namespace {

struct VerifyMethodEntry {
  const char* name;
  VerifyOutcome (*run)(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng);
  bool lossy;   // does not preserve the target law
  bool trees;   // verifies a tree with branching
  bool greedy;  // compares the draft with the target's argmax
  bool device;  // the CUDA kernels implement it
};

// Row order: the built-ins first, at the rows VerifyMethod names (verification.h).
const VerifyMethodEntry kVerifyMethods[] = {
    {"greedy", [](const float* p, const TokenTree& t, int32_t v, const StepRandom&) { return verify_greedy(p, t, v); },
     false, false, true, true},
    {"chain", verify_chain, false, false, false, true},
    {"tree", verify_tree, false, true, false, true},
    {"block", verify_block, false, false, false, true},
    {"typical",
     [](const float* p, const TokenTree& t, int32_t v, const StepRandom& r) { return verify_typical(p, t, v, r); },
     true, false, false, false},
};
constexpr int32_t kMethodRows = static_cast<int32_t>(sizeof(kVerifyMethods) / sizeof(kVerifyMethods[0]));

const VerifyMethodEntry& entry(VerifyMethod m) {
  if (m.row() < 0 || m.row() >= kMethodRows)
    fail("verification method ", m.row(), " has no row in verify/verifiers/verify_methods.cpp");
  return kVerifyMethods[m.row()];
}

}  // namespace

std::string verify_method_names() {
  std::string names;
  for (const VerifyMethodEntry& e : kVerifyMethods) names += std::string(names.empty() ? "" : ", ") + e.name;
  return names;
}

std::optional<VerifyMethod> find_verify_method(const std::string& text) {
  for (int32_t row = 0; row < kMethodRows; ++row)
    if (text == kVerifyMethods[row].name) return VerifyMethod(row);
  return std::nullopt;
}

VerifyMethod parse_verify_method(const std::string& text) {
  if (const std::optional<VerifyMethod> m = find_verify_method(text)) return *m;
  fail("unknown verification method '", text, "' (known: ", verify_method_names(), ")");
}

const char* verify_method_name(VerifyMethod m) { return entry(m).name; }
bool is_lossy(VerifyMethod m) { return entry(m).lossy; }
bool verifies_trees(VerifyMethod m) { return entry(m).trees; }
bool verifies_greedily(VerifyMethod m) { return entry(m).greedy; }
bool has_device_kernel(VerifyMethod m) { return entry(m).device; }
std::vector<VerifyMethod> verify_methods() {
  std::vector<VerifyMethod> all;
  for (int32_t row = 0; row < kMethodRows; ++row) all.push_back(VerifyMethod(row));
  return all;
}

VerifyOutcome verify(VerifyMethod method, const float* p, const TokenTree& tree, int32_t vocab_size,
                     const StepRandom& rng) {
  return entry(method).run(p, tree, vocab_size, rng);
}

}  // namespace specula
