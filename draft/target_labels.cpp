#include "draft/target_labels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "harness/io/output_file.h"
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

// FNV-1a over the token ids: the checkpoint's record of which corpus it labels.
std::string fingerprint(const std::vector<Token>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (Token t : tokens)
    for (int b = 0; b < 4; ++b) h = (h ^ ((static_cast<uint32_t>(t) >> (8 * b)) & 0xffu)) * 1099511628211ull;
  std::ostringstream out;
  out << std::hex << h;
  return out.str();
}

// The checkpoint's header: everything the labels depend on.
nlohmann::json checkpoint_header(const LanguageModel& target, const std::vector<Token>& tokens,
                                 const TargetLabelOptions& options, int64_t window) {
  return {{"format", "specula-target-labels"},
          {"version", 1},
          {"tokens", tokens.size()},
          {"fingerprint", fingerprint(tokens)},
          {"target", target.description()},
          {"temperature", options.temperature},
          {"seed", options.seed},
          {"window", window},
          {"overlap", options.overlap}};
}

// Reads the windows a checkpoint already holds into `labels` and `done`, after checking its header against
// `header`; then rewrites it with those records only, so a record cut short by an interruption is not followed
// by new ones. A missing file is started with the header.
void resume_checkpoint(const std::string& path, const nlohmann::json& header, const std::vector<int64_t>& starts,
                       int64_t first_row_after_first, std::vector<Token>& labels, std::vector<char>& done) {
  std::string kept = header.dump() + "\n";
  if (std::filesystem::exists(path)) {
    std::ifstream in(path);
    if (!in) fail(path, ": cannot read the labels checkpoint");
    std::string line;
    if (!std::getline(in, line)) fail(path, ": empty labels checkpoint (no header line)");
    nlohmann::json found;
    try {
      found = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      fail(path, ":1: not a labels checkpoint header: '", line.substr(0, 80), "'");
    }
    for (const auto& [key, value] : header.items())
      if (!found.contains(key) || found[key] != value)
        fail(path, ":1: labels checkpoint of another run: '", key, "' is ",
             found.contains(key) ? found[key].dump() : std::string("missing"), ", this run's is ", value.dump(),
             " (remove the file to start over)");
    const int64_t T = static_cast<int64_t>(labels.size());
    while (std::getline(in, line)) {
      if (in.eof()) break;  // the last line has no newline: cut short by an interruption
      std::istringstream record(line);
      std::string tag;
      int64_t w = -1, first = -1, count = -1;
      if (!(record >> tag >> w >> first >> count) || tag != "w" || w < 0 || w >= static_cast<int64_t>(starts.size()))
        break;
      const int64_t expected_first = starts[w] + 1 + (w == 0 ? 0 : first_row_after_first);
      if (first != expected_first || count < 0 || first + count > T) break;
      std::vector<Token> ids(static_cast<size_t>(count));
      bool ok = true;
      for (Token& id : ids) ok = ok && static_cast<bool>(record >> id) && id >= 0;
      std::string rest;
      if (!ok || (record >> rest)) break;
      std::copy(ids.begin(), ids.end(), labels.begin() + first);
      done[w] = 1;
      kept += line + "\n";
    }
  }
  write_output_file(path, kept, "the labels checkpoint");
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

  std::vector<char> done(starts.size(), 0);
  std::unique_ptr<AppendedOutput> checkpoint;
  if (!options.checkpoint.empty()) {
    resume_checkpoint(options.checkpoint, checkpoint_header(target, tokens, options, window), starts, options.overlap,
                      labels, done);
    checkpoint = std::make_unique<AppendedOutput>(options.checkpoint, "the labels checkpoint");
    const int64_t resumed = std::count(done.begin(), done.end(), 1);
    if (resumed > 0 && options.resumed) options.resumed(resumed, static_cast<int64_t>(starts.size()));
  }
  std::vector<size_t> todo;
  for (size_t w = 0; w < starts.size(); ++w)
    if (!done[w]) todo.push_back(w);

  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  int64_t labelled = 0;
  for (size_t w = 0; w < starts.size(); ++w)  // the positions a resumed run already has
    if (done[w]) labelled += std::min(starts[w] + window, T - 1) - (starts[w] + (w == 0 ? 0 : options.overlap));
  auto worker = [&] {
    try {
      std::unique_ptr<ModelSession> session = target.new_session();
      std::vector<float> logits, weights;
      for (size_t i = next++; i < todo.size(); i = next++) {
        const size_t w = todo[i];
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
        if (checkpoint) {
          std::string record =
              "w " + std::to_string(w) + " " + std::to_string(start + first_row + 1) + " " + std::to_string(count);
          for (int64_t p = start + first_row + 1; p < start + first_row + 1 + count; ++p)
            record += " " + std::to_string(labels[p]);
          checkpoint->append(record + "\n");
        }
        labelled += count;
        if (options.progress) options.progress(labelled, T - 1);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      next = todo.size();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int32_t t = 1; t < std::max(options.threads, 1); ++t) pool.emplace_back(worker);
  } catch (...) {  // a thread that cannot start: stop the others and join them before passing the error on
    next = todo.size();
    for (std::thread& t : pool) t.join();
    throw;
  }
  worker();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
  return labels;
}

}  // namespace specula
