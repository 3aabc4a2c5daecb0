#include "verify/constraints/byte_dfa.h"

#include <algorithm>

namespace specula {

LazyByteDfa::LazyByteDfa(Nfa nfa) : nfa_(std::move(nfa)) {
  // Co-reachability of the accepting state, on the reversed graph.
  const int32_t n = static_cast<int32_t>(nfa_.states.size());
  std::vector<std::vector<int32_t>> reverse(n);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t t : nfa_.states[s].epsilon) reverse[t].push_back(s);
    if (nfa_.states[s].on_byte >= 0 && nfa_.states[s].bytes.any()) reverse[nfa_.states[s].on_byte].push_back(s);
  }
  live_.assign(n, 0);
  std::vector<int32_t> stack = {nfa_.accept};
  live_[nfa_.accept] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t r : reverse[s])
      if (!live_[r]) {
        live_[r] = 1;
        stack.push_back(r);
      }
  }
  start_ = intern({nfa_.start});
}

int32_t LazyByteDfa::intern(const std::vector<int32_t>& seeds) {
  if (visited_.size() != nfa_.states.size() || ++visit_ == 0) {  // the first call, or the marks wrapped around
    visited_.assign(nfa_.states.size(), 0);
    visit_ = 1;
  }
  auto first_visit = [&](int32_t s) {
    if (visited_[s] == visit_) return false;
    visited_[s] = visit_;
    return true;
  };
  std::vector<int32_t> stack, set;
  for (int32_t s : seeds)
    if (first_visit(s)) stack.push_back(s);
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    const NfaState& st = nfa_.states[s];
    if (live_[s] && ((st.on_byte >= 0 && st.bytes.any()) || s == nfa_.accept)) set.push_back(s);
    for (int32_t t : st.epsilon)
      if (first_visit(t)) stack.push_back(t);
  }
  if (set.empty()) return kDead;
  std::sort(set.begin(), set.end());
  const auto it = ids_.find(set);
  if (it != ids_.end()) return it->second;
  const int32_t id = static_cast<int32_t>(sets_.size());
  accepting_.push_back(std::binary_search(set.begin(), set.end(), nfa_.accept) ? 1 : 0);
  std::array<int32_t, 256> unknown;
  unknown.fill(kUnknown);
  next_.push_back(unknown);
  ids_.emplace(set, id);
  sets_.push_back(std::move(set));
  return id;
}

int32_t LazyByteDfa::first_step(int32_t state, unsigned char byte) {
  std::vector<int32_t> seeds;
  for (int32_t s : sets_[state]) {
    const NfaState& st = nfa_.states[s];
    if (st.on_byte >= 0 && st.bytes.test(byte)) seeds.push_back(st.on_byte);
  }
  const int32_t to = seeds.empty() ? kDead : intern(seeds);
  next_[state][byte] = to;  // intern may have grown next_: index again
  return to;
}

}  // namespace specula
