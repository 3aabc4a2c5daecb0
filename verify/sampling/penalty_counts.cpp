#include "verify/sampling/penalty_counts.h"

#include "kernels/shared/error.h"

namespace specula {
namespace {

void check_id(Token t, int32_t vocab_size, const char* part) {
  if (t < 0 || t >= vocab_size)
    fail("history: ", part, " token id ", t, " is outside the vocabulary [0, ", vocab_size, ")");
}

}  // namespace

PenaltyCounts PenaltyCounts::of(const TokenHistory& history, int32_t vocab_size) {
  if (history.output_dropped > 0 || !history.pending_ids.empty())
    fail("penalty counts: the history is not whole (tokens left out, or ids still in device memory)");
  PenaltyCounts c;
  c.vocab_size = vocab_size;
  c.in_prompt.assign(static_cast<size_t>(vocab_size), 0);
  c.in_output.assign(static_cast<size_t>(vocab_size), 0);
  for (Token t : history.prompt) {
    check_id(t, vocab_size, "prompt");
    if (c.in_prompt[t]++ == 0) c.seen.push_back(t);
  }
  c.prompt_size = static_cast<int64_t>(history.prompt.size());
  c.catch_up(history);
  return c;
}

void PenaltyCounts::catch_up(const TokenHistory& history) {
  if (!history.pending_ids.empty()) fail("penalty counts: the history has ids still in device memory");
  if (output_counted < history.output_dropped)
    fail("penalty counts: tokens ", output_counted, " to ", history.output_dropped,
         " of the output are neither counted ", "nor held");
  for (int64_t i = output_counted - history.output_dropped; i < static_cast<int64_t>(history.output.size()); ++i) {
    const Token t = history.output[static_cast<size_t>(i)];
    check_id(t, vocab_size, "output");
    if (in_output[t]++ == 0) {
      produced.push_back(t);
      if (in_prompt[t] == 0) seen.push_back(t);
    }
    ++output_counted;
  }
}

size_t uncounted_tokens(const TokenHistory& history) {
  const PenaltyCounts& c = *history.counts;
  const int64_t uncounted = history.produced() - c.output_counted;
  if (uncounted < 0)
    fail("history: its penalty counts cover ", c.output_counted, " output tokens, but it has ", history.produced());
  if (uncounted > static_cast<int64_t>(history.output.size()))
    fail("history: ", uncounted, " output tokens are not counted, but it holds only the last ", history.output.size());
  return static_cast<size_t>(uncounted);
}

size_t check_penalty_counts(const TokenHistory& history, bool penalised, int32_t vocab_size) {
  if (history.output_dropped > 0 && penalised && !history.counts)
    fail("history: its first ", history.output_dropped,
         " output tokens were left out (SamplerPipeline::trimmed), but a penalty counts them");
  if (!history.counts) return history.output.size();
  const PenaltyCounts& c = *history.counts;
  if (c.vocab_size != vocab_size)
    fail("history: its penalty counts are of a vocabulary of ", c.vocab_size, ", not ", vocab_size);
  if (!history.prompt.empty() && static_cast<int64_t>(history.prompt.size()) != c.prompt_size)
    fail("history: its penalty counts are of a prompt of ", c.prompt_size, " tokens, not ", history.prompt.size());
  return uncounted_tokens(history);
}

}  // namespace specula
