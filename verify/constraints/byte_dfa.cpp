#include "verify/constraints/byte_dfa.h"

#include <algorithm>
#include <unordered_set>

#include "kernels/shared/mutation_points.h"

namespace specula {

namespace {

// Per NFA state: can it reach the accepting state through epsilon moves and bytes of `alphabet`? Co-reachability on
// the reversed graph.
std::vector<char> reaches_accept(const Nfa& nfa, const std::bitset<256>& alphabet) {
  const int32_t n = static_cast<int32_t>(nfa.states.size());
  std::vector<std::vector<int32_t>> reverse(n);
  for (int32_t s = 0; s < n; ++s) {
    for (int32_t t : nfa.states[s].epsilon) reverse[t].push_back(s);
    if (nfa.states[s].on_byte >= 0 && (nfa.states[s].bytes & alphabet).any())
      reverse[nfa.states[s].on_byte].push_back(s);
  }
  std::vector<char> reaches(n, 0);
  std::vector<int32_t> stack = {nfa.accept};
  reaches[nfa.accept] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int32_t r : reverse[s])
      if (!reaches[r]) {
        reaches[r] = 1;
        stack.push_back(r);
      }
  }
  return reaches;
}

// The coarsest partition of the bytes that no NFA state's byte set splits: each distinct set splits every class into
// its bytes inside the set and those outside. Returns the number of classes.
int32_t byte_classes(const Nfa& nfa, std::array<uint8_t, 256>& class_of) {
  std::unordered_set<std::bitset<256>> sets;
  for (const NfaState& st : nfa.states)
    if (st.on_byte >= 0 && st.bytes.any()) sets.insert(st.bytes);
  if (mutant_on(Mutant::dfa_byte_classes_merged) && !sets.empty()) sets.erase(sets.begin());
  class_of.fill(0);
  int32_t classes = 1;
  for (const std::bitset<256>& set : sets) {
    std::array<int32_t, 2 * 256> renumbered;  // (old class, inside the set) -> new class
    renumbered.fill(-1);
    classes = 0;
    for (int b = 0; b < 256; ++b) {
      int32_t& to = renumbered[2 * class_of[b] + set.test(b)];
      if (to < 0) to = classes++;
      class_of[b] = static_cast<uint8_t>(to);
    }
  }
  return classes;
}

}  // namespace

LazyByteDfa::LazyByteDfa(Nfa nfa) : nfa_(std::move(nfa)) {
  num_classes_ = byte_classes(nfa_, class_of_);
  live_ = reaches_accept(nfa_, std::bitset<256>().set());
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
  next_.resize(next_.size() + num_classes_, kUnknown);
  ids_.emplace(set, id);
  sets_.push_back(std::move(set));
  return id;
}

bool LazyByteDfa::completes_within(int32_t state, const std::bitset<256>& alphabet, bool nonempty) {
  if (state < 0) return false;
  auto known = std::find_if(completes_.begin(), completes_.end(), [&](const auto& c) { return c.first == alphabet; });
  if (known == completes_.end())
    known = completes_.insert(completes_.end(), {alphabet, reaches_accept(nfa_, alphabet)});
  const std::vector<char>& reaches = known->second;
  // The DFA state's NFA states are its whole epsilon closure, less states that neither read a byte nor accept, whose
  // moves onward are epsilon moves to states of the set: a path to acceptance starts at one of the set's.
  const std::vector<int32_t>& set = sets_[state];
  return std::any_of(set.begin(), set.end(), [&](int32_t s) {
    if (!nonempty) return reaches[s] != 0;
    const NfaState& st = nfa_.states[s];
    return st.on_byte >= 0 && (st.bytes & alphabet).any() && reaches[st.on_byte] != 0;
  });
}

int32_t LazyByteDfa::first_step(int32_t state, unsigned char byte) {
  std::vector<int32_t> seeds;
  for (int32_t s : sets_[state]) {
    const NfaState& st = nfa_.states[s];
    if (st.on_byte >= 0 && st.bytes.test(byte)) seeds.push_back(st.on_byte);
  }
  const int32_t to = seeds.empty() ? kDead : intern(seeds);
  // Any byte of the class steps alike. intern may have grown next_: index again.
  next_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]] = to;
  return to;
}

}  // namespace specula
