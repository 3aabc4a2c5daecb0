// The verification methods as one table (verify_methods.h): the built-in rows below, at the rows VerifyMethod
// names (verification.h), then the rows add_verify_method appends. A new method is its verifier's file in
// verify/verifiers/ (the folder's sources are globbed) plus one line in SPECULA_VERIFY_METHODS.
#include "verify/verifiers/verify_methods.h"

#include "kernels/shared/error.h"
#include "verify/verifiers/verification.h"

namespace specula {

// One line per built-in method: METHOD(name, verifier, lossy, trees, greedy, device kernel), in the order of
// VerifyMethod's named rows (verification.h). `verifier` is a function of the verifier's own file with the
// signature of VerifyMethodRow::run; a new method is its file plus one line here.
#define SPECULA_VERIFY_METHODS(METHOD)                            \
  METHOD("greedy", verify_greedy_step, false, false, true, chain) \
  METHOD("chain", verify_chain, false, false, false, chain)       \
  METHOD("tree", verify_tree, false, true, false, tree)           \
  METHOD("block", verify_block, false, false, false, block)       \
  METHOD("typical", verify_typical_step, true, false, false, none)

// Each verifier's declaration, so that adding a method takes its line above and nothing else.
#define SPECULA_DECLARE_VERIFIER(name, verifier, lossy, trees, greedy, kernel) \
  VerifyOutcome verifier(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng);
SPECULA_VERIFY_METHODS(SPECULA_DECLARE_VERIFIER)
#undef SPECULA_DECLARE_VERIFIER

// The built-ins whose verifiers take other arguments, in the table's signature.
VerifyOutcome verify_greedy_step(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom&) {
  return verify_greedy(p, tree, vocab_size);
}
VerifyOutcome verify_typical_step(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng) {
  return verify_typical(p, tree, vocab_size, rng);
}

namespace {

std::vector<VerifyMethodRow>& table() {
#define SPECULA_TABLE_ROW(name, verifier, lossy, trees, greedy, kernel) \
  {name, verifier, lossy, trees, greedy, VerifyKernel::kernel},
  static std::vector<VerifyMethodRow> rows = {SPECULA_VERIFY_METHODS(SPECULA_TABLE_ROW)};
#undef SPECULA_TABLE_ROW
  return rows;
}

const VerifyMethodRow& entry(VerifyMethod m) {
  if (m.row() < 0 || m.row() >= static_cast<int32_t>(table().size()))
    fail("verification method ", m.row(), " has no row in the methods' table (verify/verifiers/verify_methods.h)");
  return table()[m.row()];
}

}  // namespace

VerifyMethod add_verify_method(const VerifyMethodRow& row) {
  if (!row.name || !*row.name || !row.run) fail("add_verify_method: a method needs a name and a verifier");
  if (find_verify_method(row.name)) fail("add_verify_method: a method named '", row.name, "' is already in the table");
  table().push_back(row);
  return VerifyMethod(static_cast<int32_t>(table().size()) - 1);
}

std::string verify_method_names(const std::string& separator) {
  std::string names;
  for (const VerifyMethodRow& e : table()) names += (names.empty() ? "" : separator) + std::string(e.name);
  return names;
}

std::optional<VerifyMethod> find_verify_method(const std::string& text) {
  for (size_t row = 0; row < table().size(); ++row)
    if (text == table()[row].name) return VerifyMethod(static_cast<int32_t>(row));
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
VerifyKernel device_kernel(VerifyMethod m) { return entry(m).device; }
std::vector<VerifyMethod> verify_methods() {
  std::vector<VerifyMethod> all;
  for (size_t row = 0; row < table().size(); ++row) all.push_back(VerifyMethod(static_cast<int32_t>(row)));
  return all;
}

VerifyOutcome verify(VerifyMethod method, const float* p, const TokenTree& tree, int32_t vocab_size,
                     const StepRandom& rng) {
  return entry(method).run(p, tree, vocab_size, rng);
}

}  // namespace specula
