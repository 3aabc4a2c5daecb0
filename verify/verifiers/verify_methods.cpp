// The verification methods as one table: name, and the verifier a step runs. A new method is its verifier's
// file plus its VerifyMethod value and one line here.
#include "verify/verifiers/verify_methods.h"

#include "kernels/shared/error.h"
#include "verify/verifiers/verification.h"

namespace specula {
namespace {

struct VerifyMethodEntry {
  VerifyMethod method;
  const char* name;
  VerifyOutcome (*run)(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng);
};

const VerifyMethodEntry kVerifyMethods[] = {
    {VerifyMethod::greedy, "greedy",
     [](const float* p, const TokenTree& t, int32_t v, const StepRandom&) { return verify_greedy(p, t, v); }},
    {VerifyMethod::chain, "chain", verify_chain},
    {VerifyMethod::tree, "tree", verify_tree},
    {VerifyMethod::block, "block", verify_block},
    {VerifyMethod::typical, "typical",
     [](const float* p, const TokenTree& t, int32_t v, const StepRandom& r) { return verify_typical(p, t, v, r); }},
};

const VerifyMethodEntry& entry(VerifyMethod m) {
  for (const VerifyMethodEntry& e : kVerifyMethods)
    if (e.method == m) return e;
  fail("verification method ", static_cast<int>(m), " has no entry in verify/verifiers/verify_methods.cpp");
}

}  // namespace

std::string verify_method_names() {
  std::string names;
  for (const VerifyMethodEntry& e : kVerifyMethods) names += std::string(names.empty() ? "" : ", ") + e.name;
  return names;
}

std::optional<VerifyMethod> find_verify_method(const std::string& text) {
  for (const VerifyMethodEntry& e : kVerifyMethods)
    if (text == e.name) return e.method;
  return std::nullopt;
}

VerifyMethod parse_verify_method(const std::string& text) {
  if (const std::optional<VerifyMethod> m = find_verify_method(text)) return *m;
  fail("unknown verification method '", text, "' (known: ", verify_method_names(), ")");
}

const char* verify_method_name(VerifyMethod m) { return entry(m).name; }

VerifyOutcome verify(VerifyMethod method, const float* p, const TokenTree& tree, int32_t vocab_size,
                     const StepRandom& rng) {
  return entry(method).run(p, tree, vocab_size, rng);
}

}  // namespace specula
