#include "harness/train/trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "harness/io/stop_signals.h"
#include "harness/models/transformer/byte_tokenizer.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/train/adamw.h"
#include "harness/train/progress_bar.h"
#include "harness/train/text_corpus.h"
#include "harness/train/training_stop.h"
#include "kernels/shared/elapsed.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

torch::Tensor to_tensor(const std::vector<Token>& tokens) {
  return torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), torch::kInt64);
}

// Windows (inputs x = data[o, o + T), targets y = data[o + 1, o + T + 1)) starting at `offsets`.
std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& data, const std::vector<int64_t>& offsets,
                                                int64_t seq_len) {
  const torch::Tensor starts = torch::tensor(offsets, torch::kInt64).unsqueeze(1);
  const torch::Tensor index = starts + torch::arange(seq_len + 1, torch::kInt64).unsqueeze(0);  // [B, T + 1]
  const torch::Tensor w = data.index_select(0, index.reshape(-1)).view({-1, seq_len + 1});
  return {w.narrow(1, 0, seq_len), w.narrow(1, 1, seq_len)};
}

// Mean next-token cross-entropy (nats per token) over the windows starting at `offsets`, `batch` at a time.
double mean_loss(Transformer& model, const torch::Tensor& data, const std::vector<int64_t>& offsets, int64_t seq_len,
                 int64_t batch) {
  torch::NoGradGuard no_grad;
  model->eval();
  double total = 0.0;
  int64_t count = 0;
  for (size_t i = 0; i < offsets.size(); i += static_cast<size_t>(batch)) {
    const std::vector<int64_t> chunk(
        offsets.begin() + static_cast<std::ptrdiff_t>(i),
        offsets.begin() + static_cast<std::ptrdiff_t>(std::min(offsets.size(), i + batch)));
    const auto [x, y] = windows(data, chunk, seq_len);
    const torch::Tensor logits = model->forward(x);
    total +=
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape(-1),
                                             torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    count += y.numel();
  }
  model->train();
  return total / static_cast<double>(count);
}

// The corpus as tensors, and its validation windows: every non-overlapping window (final loss) and an evenly
// spaced fixed subset of them (periodic loss, cheap enough to run often; the same subset each time so the curve
// is comparable).
struct TrainingData {
  TextCorpus corpus;
  torch::Tensor train, validation;
  std::vector<int64_t> val_all, val_subset;
};

TrainingData load_training_data(const TrainOptions& options) {
  const auto tokenizer = make_tokenizer(options.tokenizer);
  if (tokenizer->vocab_size() != options.model.vocab_size)
    fail_parameter("vocab_size", " ", options.model.vocab_size, " does not match tokenizer '", options.tokenizer, "' (",
                   tokenizer->vocab_size(), " tokens)");
  const int64_t T = options.seq_len;
  TrainingData data;
  data.corpus = load_text_corpus(options.corpus, *tokenizer, options.validation_fraction, static_cast<size_t>(T) + 1);
  data.train = to_tensor(data.corpus.train);
  data.validation = to_tensor(data.corpus.validation);
  data.val_all = window_offsets(data.validation.size(0), T);
  data.val_subset = evenly_spaced(data.val_all, options.eval_windows);
  return data;
}

// One optimiser step on batch_size random training windows at the schedule's learning rate; returns its loss.
double train_step(Transformer& model, torch::optim::AdamW& optimizer, const TrainOptions& options,
                  const torch::Tensor& train_data, std::mt19937_64& rng, std::uniform_int_distribution<int64_t>& pick,
                  int64_t step) {
  const int64_t T = options.seq_len;
  const double lr = options.lr.at(step);
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  std::vector<int64_t> offsets(static_cast<size_t>(options.batch_size));
  for (int64_t& o : offsets) o = pick(rng);
  const auto [x, y] = windows(train_data, offsets, T);
  const torch::Tensor logits = model->forward(x);
  const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape(-1));
  optimizer.zero_grad();
  loss.backward();
  if (options.grad_clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), options.grad_clip);
  optimizer.step();
  const double loss_value = loss.item<double>();
  if (!std::isfinite(loss_value)) fail("training diverged: loss ", loss_value, " at step ", step + 1, " (lower --lr?)");
  return loss_value;
}

// The model folder's training record (config.json "training"): what was trained on, how long, how well.
nlohmann::json training_record(const TrainOptions& options, const TrainingData& data, const TrainResult& result,
                               double train_seconds) {
  nlohmann::json record = {
      {"command", options.command},
      {"corpus", options.corpus},
      {"train_tokens", data.corpus.train.size()},
      {"validation_tokens", data.corpus.validation.size()},
      {"validation_fraction", options.validation_fraction},
      {"best_step", result.best_step},
      {"periodic_val_loss", result.best_periodic_val_loss},
      {"periodic_val_windows", data.val_subset.size()},
      {"final_train_loss", result.final_train_loss},
      {"val_loss", result.val_loss},
      {"val_loss_tokens", result.val_tokens},
      {"val_bits_per_byte", result.val_loss / std::log(2.0)},
      {"parameters", options.model.parameter_count()},
      {"train_seconds", train_seconds},
      {"total_seconds", result.seconds},
      // Process CPU time (all threads): on a shared machine, wall time says more about the neighbours.
      {"cpu_seconds", static_cast<double>(std::clock()) / CLOCKS_PER_SEC},
      {"tokens_per_second", result.tokens_per_second},
      {"torch_version", TORCH_VERSION},
  };
  record.update(optimizer_record(options));
  return record;
}

}  // namespace

void TrainOptions::validate() const {
  model.validate("model options");
  validate_optimizer();
  if (corpus.empty()) fail_parameter("corpus", " is required");
  if (output.empty()) fail_parameter("output", " is required");
  if (!is_weights_dtype_name(weights_dtype))
    fail_parameter("weights_dtype", " must be float32, float16 or bfloat16, got '", weights_dtype, "'");
  if (seq_len < 1 || seq_len > model.max_seq_len)
    fail_parameter("seq_len", " must be in [1, max_seq_len = ", model.max_seq_len, "], got ", seq_len);
}

TrainResult train_transformer(const TrainOptions& options) {
  options.validate();
  // Stop signals (training_stop.h): before and after the loop they end the process at once; in it, after the step.
  TrainingStopper stopper("specula train", options.output, options.lr.total_steps, options.eval_interval);
  torch::set_num_threads(options.threads);
  torch::manual_seed(options.seed);
  const int64_t T = options.seq_len;
  const TrainingData data = load_training_data(options);
  Transformer model(options.model);
  model->train();
  const std::unique_ptr<torch::optim::AdamW> optimizer = make_adamw(*model, options);
  CheckpointConfig checkpoint;
  checkpoint.model = options.model;
  checkpoint.tokenizer = options.tokenizer;
  checkpoint.weights_dtype = options.weights_dtype;

  const int64_t total_steps = options.lr.total_steps;
  std::cerr << "specula train: " << options.model.describe() << "; corpus " << options.corpus << " ("
            << data.corpus.train.size() << " training / " << data.corpus.validation.size() << " validation tokens); "
            << total_steps << " steps of " << options.batch_size << " x " << T << " tokens; " << options.threads
            << " thread(s)\n";
  ProgressBar progress(std::cerr, total_steps, isatty(STDERR_FILENO) == 1, options.log_interval);
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int64_t> pick(0, data.train.size(0) - T - 1);
  TrainResult result;
  result.best_periodic_val_loss = INFINITY;
  TrainingLog log(total_steps, options.eval_interval);
  const auto start = Clock::now();
  // What made the checkpoint, saved with it from the first save on (in_progress_record).
  nlohmann::json in_progress = in_progress_record(options, options.command, options.corpus);
  in_progress["validation_fraction"] = options.validation_fraction;
  in_progress["parameters"] = options.model.parameter_count();
  in_progress["torch_version"] = TORCH_VERSION;
  // A stop signal ends the loop between steps, never between a save's weights and its config (HeldWrite).
  stopper.begin_loop();
  for (int64_t step = 0; step < total_steps; ++step) {
    if (stopper.stop_before(step, result.best_step)) break;
    const auto step_start = Clock::now();
    const double loss_value = train_step(model, *optimizer, options, data.train, rng, pick, step);
    log.add_step(loss_value, seconds_since(step_start));
    const int64_t done = step + 1;
    progress.update(step, loss_value, static_cast<double>(done * options.batch_size * T) / log.train_seconds(),
                    log.eta(done));
    if (done % options.eval_interval != 0 && done != total_steps) continue;
    // Periodic validation; the checkpoint is saved whenever it improves, so an interrupted run leaves the best.
    const auto eval_start = Clock::now();
    const double val = mean_loss(model, data.validation, data.val_subset, T, options.batch_size);
    std::string saved;
    if (val < result.best_periodic_val_loss) {
      result.best_periodic_val_loss = val;
      result.best_step = done;
      checkpoint.training = in_progress;
      checkpoint.training["step"] = done;
      checkpoint.training["periodic_val_loss"] = val;
      {
        const HeldWrite held;
        save_checkpoint(options.output, model, checkpoint);
      }
      saved = ", saved " + options.output;
    }
    log.add_evaluation(seconds_since(eval_start));
    progress.note("step " + std::to_string(done) + ": train loss " + fixed_decimals(log.recent_loss()) + ", val loss " +
                  fixed_decimals(val) + " (" + std::to_string(data.val_subset.size()) + " windows)" + saved);
  }
  progress.finish();
  if (stopper.end_loop(result.best_step)) {
    result.stop = stopper.stop();
    result.steps = result.stop.steps_done;
    stopper.report([&](const std::string& status) {
      CheckpointConfig saved = read_checkpoint_config(options.output);
      saved.training["status"] = status;
      write_checkpoint_config(options.output, saved);
    });
    return result;
  }
  result.steps = total_steps;
  result.final_train_loss = log.recent_loss();
  result.tokens_per_second = static_cast<double>(total_steps * options.batch_size * T) / log.train_seconds();

  // The reported loss is the saved checkpoint's, read back from disk: what `transformer:PATH` will serve.
  LoadedCheckpoint saved = load_checkpoint(options.output);
  result.val_loss = mean_loss(saved.model, data.validation, data.val_all, T, options.batch_size);
  result.val_tokens = static_cast<int64_t>(data.val_all.size()) * T;
  result.seconds = seconds_since(start);
  saved.config.training = training_record(options, data, result, log.train_seconds());
  write_checkpoint_config(options.output, saved.config);
  std::cerr << "specula train: done in " << ProgressBar::format_duration(result.seconds) << "; checkpoint "
            << options.output << " (step " << result.best_step << "), validation loss "
            << fixed_decimals(result.val_loss) << " nats/token over " << result.val_tokens << " tokens\n";
  return result;
}

}  // namespace specula
