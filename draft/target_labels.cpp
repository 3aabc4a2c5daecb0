#include "draft/target_labels.h"

#include <algorithm>
#include <atomic>
#include <boost/crc.hpp>
#include <cmath>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "harness/io/file_checksum.h"
#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "kernels/shared/bounded_json.h"
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

// One target call: it reads tokens [start, end) (the first as context, the rest as a chain) and labels
// positions [first, last], those no earlier window reaches.
struct Window {
  int64_t start, end, first, last;
  int64_t count() const { return last - first + 1; }
};

// The windows that label positions 1 .. T - 1 (T >= 2): one every window - overlap tokens, up to the first that
// reaches T - 1. Window w's rows are the logits after tokens[start .. start + r], the labels of start + r + 1.
std::vector<Window> label_windows(int64_t T, int64_t window, int64_t overlap) {
  std::vector<Window> out;
  for (int64_t s = 0;; s += window - overlap) {
    const int64_t last = std::min(s + window, T - 1);
    out.push_back({s, std::min(s + window, T), s + 1 + (s == 0 ? 0 : overlap), last});
    if (last == T - 1) break;
  }
  return out;
}

// The CRC-32 of the token ids: the checkpoint's record of which corpus it labels.
std::string fingerprint(const std::vector<Token>& tokens) {
  boost::crc_32_type crc;
  crc.process_bytes(tokens.data(), tokens.size() * sizeof(Token));
  return crc32_hex(crc.checksum());
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
void resume_checkpoint(const std::string& path, const nlohmann::json& header, const std::vector<Window>& windows,
                       std::vector<Token>& labels, std::vector<char>& done) {
  std::string kept = header.dump() + "\n";
  if (std::filesystem::exists(path)) {
    std::ifstream in = open_input_file(path, "labels checkpoint");
    std::string line;
    if (!std::getline(in, line)) fail(path, ": empty labels checkpoint (no header line)");
    nlohmann::json found;
    try {
      found = parse_bounded_json(line);
    } catch (const nlohmann::json::exception&) {
      fail(path, ":1: not a labels checkpoint header: '", line.substr(0, 80), "'");
    }
    for (const auto& [key, value] : header.items())
      if (!found.contains(key) || found[key] != value)
        fail(path, ":1: labels checkpoint of another run: '", key, "' is ",
             found.contains(key) ? found[key].dump() : std::string("missing"), ", this run's is ", value.dump(),
             " (remove the file to start over)");
    while (std::getline(in, line)) {
      if (in.eof()) break;  // the last line has no newline: cut short by an interruption
      std::istringstream record(line);
      std::string tag;
      int64_t w = -1, first = -1, count = -1;
      if (!(record >> tag >> w >> first >> count) || tag != "w" || w < 0 || w >= static_cast<int64_t>(windows.size()) ||
          first != windows[w].first || count != windows[w].count())
        break;
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

  const std::vector<Window> windows = label_windows(T, window, options.overlap);
  std::vector<char> done(windows.size(), 0);
  std::unique_ptr<AppendedOutput> checkpoint;
  if (!options.checkpoint.empty()) {
    resume_checkpoint(options.checkpoint, checkpoint_header(target, tokens, options, window), windows, labels, done);
    checkpoint = std::make_unique<AppendedOutput>(options.checkpoint, "the labels checkpoint");
    const int64_t resumed = std::count(done.begin(), done.end(), 1);
    if (resumed > 0 && options.resumed) options.resumed(resumed, static_cast<int64_t>(windows.size()));
  }
  std::vector<size_t> todo;
  int64_t labelled = 0;  // positions labelled so far, a resumed run's included
  for (size_t w = 0; w < windows.size(); ++w) {
    if (done[w])
      labelled += windows[w].count();
    else
      todo.push_back(w);
  }

  std::atomic<size_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  auto worker = [&] {
    try {
      std::unique_ptr<ModelSession> session = target.new_session();
      std::vector<float> logits, weights;
      for (size_t i = next++; i < todo.size(); i = next++) {
        const size_t w = todo[i];
        const Window& win = windows[w];
        const std::vector<Token> context = {tokens[win.start]};
        const TokenTree chain =
            TokenTree::chain(std::vector<Token>(tokens.begin() + win.start + 1, tokens.begin() + win.end));
        logits.resize(static_cast<size_t>(chain.size() + 1) * V);
        session->tree_logits(context, chain, logits.data());
        for (int64_t p = win.first; p <= win.last; ++p)  // position p's row is p - start - 1
          labels[p] = choose(logits.data() + static_cast<size_t>(p - win.start - 1) * V, V, options, p, weights);
        const std::lock_guard<std::mutex> lock(mutex);
        if (checkpoint) {
          std::string record =
              "w " + std::to_string(w) + " " + std::to_string(win.first) + " " + std::to_string(win.count());
          for (int64_t p = win.first; p <= win.last; ++p) record += " " + std::to_string(labels[p]);
          checkpoint->append(record + "\n");
        }
        labelled += win.count();
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
