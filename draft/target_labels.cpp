#include "draft/target_labels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/sampling/categorical.h"

namespace specula {
namespace {

// Positions per call for a model without a limit (a table model reads only its last tokens anyway).
constexpr int64_t kUnboundedWindow = 256;

// The target's choice from one row of logits.
Token choose(const float* logits, int32_t V, const TargetLabelOptions& options, uint64_t position,
             std::vector<float>& weights) {
  if (options.temperature == 0.0) return argmax(logits, V);
  const float top = *std::max_element(logits, logits + V);
  const double t = mutant_on(Mutant::distill_labels_at_unit_temperature) ? 1.0 : options.temperature;
  weights.resize(V);
  for (int32_t x = 0; x < V; ++x) weights[x] = static_cast<float>(std::exp((static_cast<double>(logits[x]) - top) / t));
  return sample_categorical(weights.data(), V, RandomKey{options.seed, philox_stream(0, RandomRole::sample), position});
}

}  // namespace

std::vector<Token> target_labels(const LanguageModel& target, const std::vector<Token>& tokens,
                                 const TargetLabelOptions& options) {
  const int32_t V = target.vocab_size();
  const int64_t most = target.max_positions();  // 0: unbounded (table models)
  const int64_t window = options.window > 0 ? options.window : most > 0 ? most : kUnboundedWindow;
  if (most > 0 && window > most)
    fail("target labels: a window of ", window, " positions is more than ", target.description(), " holds (", most,
         ")");
  if (options.overlap < 0 || options.overlap >= window)
    fail("target labels: the overlap (", options.overlap, " positions) must be >= 0 and smaller than the window (",
         window, ")");
  if (!(options.temperature >= 0.0 && std::isfinite(options.temperature)))
    fail("target labels: temperature must be >= 0, got ", options.temperature);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      fail("target labels: token ", i, " has id ", tokens[i], ", outside the vocabulary [0, ", V, ")");
  const int64_t T = static_cast<int64_t>(tokens.size());
  std::vector<Token> labels(tokens.begin(), tokens.end());
  if (T < 2) return labels;

  // Window w covers positions [start, start + window): its first token is the context, the rest a chain, and
  // its rows are the logits after each of them, i.e. the labels of positions start + 1 .. start + window.
  const int64_t stride = window - options.overlap;
  std::vector<int64_t> starts;  // up to the first window that reaches the last position, T - 1
  for (int64_t s = 0;; s += stride) {
    starts.push_back(s);
    if (s + window >= T - 1) break;
  }

  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  int64_t labelled = 0;
  auto worker = [&] {
    try {
      std::unique_ptr<ModelSession> session = target.new_session();
      std::vector<float> logits, weights;
      for (size_t w = next++; w < starts.size(); w = next++) {
        const int64_t start = starts[w];
        const int64_t end = std::min(start + window, T);  // tokens [start, end) are read
        const std::vector<Token> context = {tokens[start]};
        const TokenTree chain = TokenTree::chain(std::vector<Token>(tokens.begin() + start + 1, tokens.begin() + end));
        logits.resize(static_cast<size_t>(chain.size() + 1) * V);
        session->tree_logits(context, chain, logits.data());
        // Row r is after tokens[start .. start + r]: the label of position start + r + 1.
        const int64_t first_row = w == 0 ? 0 : options.overlap;
        int64_t count = 0;
        for (int64_t r = first_row; r <= chain.size() && start + r + 1 < T; ++r, ++count)
          labels[start + r + 1] =
              choose(logits.data() + static_cast<size_t>(r) * V, V, options, start + r + 1, weights);
        const std::lock_guard<std::mutex> lock(mutex);
        labelled += count;
        if (options.progress) options.progress(labelled, T - 1);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next = starts.size();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int32_t t = 1; t < std::max(options.threads, 1); ++t) pool.emplace_back(worker);
  } catch (...) {  // a thread that cannot start: stop the others and join them before passing the error on
    next = starts.size();
    for (std::thread& t : pool) t.join();
    throw;
  }
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return labels;
}

}  // namespace specula
