#include "harness/train/head_trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <random>

#include "draft/heads/draft_heads.h"
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

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Windows of T + 1 tokens and the target's features of their first T positions.
struct FeatureSet {
  torch::Tensor tokens;    // [W, T + 1] int64
  torch::Tensor features;  // [W, T, H] fp32
};

FeatureSet run_target(Transformer& target, const std::vector<Token>& data, const std::vector<int64_t>& offsets,
                      int64_t T, int64_t batch, const std::string& what, std::ostream& log) {
  torch::NoGradGuard no_grad;  // not InferenceMode: the features are inputs of modules that are trained
  const int64_t W = static_cast<int64_t>(offsets.size()), H = target->config().d_model;
  FeatureSet out;
  out.tokens = torch::empty({W, T + 1}, torch::kInt64);
  out.features = torch::empty({W, T, H});
  auto* tok = out.tokens.data_ptr<int64_t>();
  for (int64_t w = 0; w < W; ++w)
    for (int64_t t = 0; t <= T; ++t) tok[w * (T + 1) + t] = data[static_cast<size_t>(offsets[w] + t)];
  const AttentionLayout layout = causal_layout(0, T);
  const auto start = Clock::now();
  for (int64_t w = 0; w < W; w += batch) {
    const int64_t b = std::min(batch, W - w);
    out.features.narrow(0, w, b).copy_(
        target->hidden_states(out.tokens.narrow(0, w, b).narrow(1, 0, T), layout.positions, layout.mask, nullptr));
  }
  log << "features of " << W << " " << what << " windows x " << T << " tokens through the target in "
      << ProgressBar::format_duration(seconds_since(start)) << "\n";
  return out;
}

torch::Tensor lm_head_weight(Transformer& target) {
  return target->config().tie_embeddings ? target->embedding->weight : target->head->weight;
}

// The objective on a batch; `correct` (if given) accumulates top-1 hits per entry of val_top1, `count` the
// predictions scored.
struct Objective {
  const HeadTrainOptions& o;
  Transformer& target;
  MedusaHeads medusa{nullptr};
  EagleHead eagle{nullptr};

  torch::Tensor operator()(const torch::Tensor& tokens, const torch::Tensor& features, bool noise,
                           std::vector<double>* correct, std::vector<double>* count) {
    const int64_t T = features.size(1);
    if (!medusa.is_empty()) {
      const torch::Tensor logits = medusa->forward(features);  // [K, B, T, V]
      torch::Tensor loss = torch::zeros({});
      for (int64_t k = 1; k <= medusa->count; ++k) {
        const int64_t n = T - k;  // head k at position t predicts x_{t+k+1}, t + k + 1 <= T
        const torch::Tensor lk = logits[k - 1].narrow(1, 0, n), yk = tokens.narrow(1, k + 1, n);
        loss = loss + std::pow(o.medusa_decay, static_cast<double>(k)) *
                          torch::nn::functional::cross_entropy(lk.reshape({-1, lk.size(-1)}), yk.reshape(-1));
        if (correct) {
          (*correct)[k - 1] += (lk.argmax(-1) == yk).sum().item<double>();
          (*count)[k - 1] += static_cast<double>(yk.numel());
        }
      }
      return loss;
    }
    const int64_t n = T - 1;  // pairs t = 0..T-2: (Embed(x_{t+1}), f_t) -> f_{t+1}
    const torch::Tensor emb = target->embed(tokens.narrow(1, 1, n));
    torch::Tensor input = features.narrow(1, 0, n);
    if (noise && o.eagle_noise > 0)
      input = input + (torch::rand_like(input) - 0.5) * (o.eagle_noise * 512.0 / static_cast<double>(T));
    const AttentionLayout layout = causal_layout(0, n);
    const torch::Tensor predicted = eagle->forward(emb, input, layout.positions, layout.mask, nullptr);
    const torch::Tensor truth = features.narrow(1, 1, n);
    const torch::Tensor feature_loss = torch::nn::functional::smooth_l1_loss(predicted, truth);
    torch::Tensor target_p;
    {
      torch::NoGradGuard no_grad;
      target_p = torch::softmax(target->lm_head(truth), -1);
    }
    const torch::Tensor logp = torch::log_softmax(target->lm_head(predicted), -1);
    const torch::Tensor token_loss = -(target_p * logp).sum(-1).mean();
    if (correct) {
      (*correct)[0] += (logp.argmax(-1) == target_p.argmax(-1)).sum().item<double>();
      (*count)[0] += static_cast<double>(n * tokens.size(0));
    }
    return o.eagle_feature_weight * feature_loss + o.eagle_token_weight * token_loss;
  }

  torch::nn::Module& module() { return medusa.is_empty() ? static_cast<torch::nn::Module&>(*eagle) : *medusa; }
};

// Mean objective (no noise) and top-1 rates over a feature set.
double evaluate(Objective& objective, const FeatureSet& set, int64_t batch, std::vector<double>& top1) {
  torch::NoGradGuard no_grad;
  objective.module().eval();
  const size_t entries = objective.medusa.is_empty() ? 1 : static_cast<size_t>(objective.medusa->count);
  std::vector<double> correct(entries, 0.0), count(entries, 0.0);
  double total = 0.0;
  int64_t batches = 0;
  const int64_t W = set.tokens.size(0);
  for (int64_t w = 0; w < W; w += batch) {
    const int64_t b = std::min(batch, W - w);
    total +=
        objective(set.tokens.narrow(0, w, b), set.features.narrow(0, w, b), false, &correct, &count).item<double>() *
        static_cast<double>(b);
    batches += b;
  }
  objective.module().train();
  top1.assign(entries, 0.0);
  for (size_t i = 0; i < entries; ++i) top1[i] = count[i] > 0 ? correct[i] / count[i] : 0.0;
  return total / static_cast<double>(batches);
}

std::string rates(const std::vector<double>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + fixed_decimals(v[i], 3);
  return s;
}

}  // namespace

void HeadTrainOptions::validate() const {
  if (kind != "medusa" && kind != "eagle") fail("head training: kind must be medusa or eagle, got '", kind, "'");
  if (target.empty()) fail_parameter("target", " is required (the frozen target checkpoint folder)");
  if (corpus.empty()) fail_parameter("corpus", " is required");
  if (output.empty()) fail_parameter("output", " is required");
  if (!is_weights_dtype_name(matrices_dtype))
    fail_parameter("matrices_dtype", " must be float32, float16 or bfloat16, got '", matrices_dtype, "'");
  validate_optimizer();
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0))
    fail_parameter("validation_fraction", " must be in (0, 1), got ", validation_fraction);
  if (medusa_heads < 1 || medusa_heads > 64) fail_parameter("heads", " must be in 1..64, got ", medusa_heads);
  if (!(medusa_decay > 0.0 && medusa_decay <= 1.0)) fail_parameter("decay", " must be in (0, 1], got ", medusa_decay);
  if (!(eagle_noise >= 0.0)) fail_parameter("noise", " must be >= 0, got ", eagle_noise);
  if (!(eagle_feature_weight >= 0.0) || !(eagle_token_weight >= 0.0) || eagle_feature_weight + eagle_token_weight == 0)
    fail("feature_weight and token_weight must be >= 0 and not both 0");
  if (feature_windows < 1) fail_parameter("feature_windows", " must be >= 1, got ", feature_windows);
  if (batch_size < 1 || batch_size > feature_windows)
    fail_parameter("batch_size", " must be in [1, feature_windows = ", feature_windows, "], got ", batch_size);
  if (seq_len < 2) fail_parameter("seq_len", " must be >= 2, got ", seq_len);
}

namespace {

// `count` training windows of T + 1 tokens at random offsets (the heads see the target's features of each).
std::vector<int64_t> random_windows(const std::vector<Token>& tokens, int64_t T, int64_t count, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> pick(0, static_cast<int64_t>(tokens.size()) - T - 1);
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t& off : offsets) off = pick(rng);
  return offsets;
}

// One optimiser step on the training windows `rows`; the loss before it.
double train_step(Objective& objective, torch::optim::AdamW& optimizer, const FeatureSet& train_set,
                  const std::vector<int64_t>& rows) {
  const torch::Tensor index = torch::tensor(rows, torch::kInt64);
  const torch::Tensor loss = objective(train_set.tokens.index_select(0, index),
                                       train_set.features.index_select(0, index), true, nullptr, nullptr);
  optimizer.zero_grad();
  loss.backward();
  if (objective.o.grad_clip > 0)
    torch::nn::utils::clip_grad_norm_(objective.module().parameters(), objective.o.grad_clip);
  optimizer.step();
  return loss.item<double>();
}

// Creates the heads folder; its config names the target relative to it (absolute where it cannot).
DraftHeadsConfig new_heads_folder(const HeadTrainOptions& o, const TransformerConfig& target_model) {
  DraftHeadsConfig config;
  config.kind = o.kind;
  std::error_code ec;
  fs::create_directories(o.output, ec);
  if (ec) fail(o.output, ": cannot create the heads folder: ", ec.message());
  config.target = fs::relative(fs::absolute(o.target), fs::absolute(o.output), ec).string();
  if (ec || config.target.empty()) config.target = fs::absolute(o.target).lexically_normal().string();
  config.target_model = target_model;
  config.target_weights_checksum = read_checkpoint_config(o.target).weights_checksum;
  config.medusa_heads = o.kind == "medusa" ? o.medusa_heads : 0;
  config.matrices_dtype = o.matrices_dtype;
  return config;
}

int64_t parameter_count(const torch::nn::Module& heads) {
  int64_t n = 0;
  for (const auto& p : heads.parameters()) n += p.numel();
  return n;
}

// The heads folder's record of how they were trained (config.json's "training").
nlohmann::json training_record(const HeadTrainOptions& o, const HeadTrainResult& result, int64_t validation_windows,
                               double initial_val, int64_t parameters, double train_seconds) {
  nlohmann::json training = {
      {"command", o.command},
      {"target", o.target},
      {"corpus", o.corpus},
      {"validation_fraction", o.validation_fraction},
      {"feature_windows", o.feature_windows},
      {"validation_windows", validation_windows},
      {"initial_val_loss", initial_val},
      {"best_step", result.best_step},
      {"val_loss", result.val_loss},
      {"final_train_loss", result.final_train_loss},
      {"val_top1", result.val_top1},
      {"val_top1_meaning", o.kind == "medusa" ? "per head k: argmax head_k(f_t) == corpus x_{t+k+1}"
                                              : "argmax LMHead(f^_{t+1}) == argmax LMHead(f_{t+1}) (the target's)"},
      {"parameters", parameters},
      {"train_seconds", train_seconds},
      {"total_seconds", result.seconds},
      {"torch_version", TORCH_VERSION},
  };
  training.update(optimizer_record(o));
  if (o.kind == "medusa") {
    training["heads"] = o.medusa_heads;
    training["decay"] = o.medusa_decay;
  } else {
    training["noise"] = o.eagle_noise;
    training["feature_weight"] = o.eagle_feature_weight;
    training["token_weight"] = o.eagle_token_weight;
  }
  return training;
}

}  // namespace

HeadTrainResult train_draft_heads(const HeadTrainOptions& o) {
  o.validate();
  // Stop signals (training_stop.h): before and after the loop they end the process at once; in it, after the step.
  TrainingStopper stopper("specula train-" + o.kind, o.output, o.lr.total_steps, o.eval_interval);
  torch::set_num_threads(o.threads);
  torch::manual_seed(o.seed);
  const auto start = Clock::now();
  LoadedCheckpoint loaded = load_checkpoint(o.target);
  Transformer target = loaded.model;
  const TransformerConfig& tc = loaded.config.model;
  for (auto& p : target->parameters()) p.requires_grad_(false);
  target->eval();
  const int64_t T = o.seq_len;
  if (T > tc.max_seq_len) fail_parameter("seq_len", " ", T, " exceeds the target's max_seq_len ", tc.max_seq_len);
  // The windows' features are all kept in memory (float32, d_model a position): bounded by the machine's memory before
  // the target runs over them, so a typo is an error naming the option, not the allocator's failure minutes later.
  const double feature_bytes = static_cast<double>(o.feature_windows + o.eval_windows) * static_cast<double>(T) *
                               static_cast<double>(tc.d_model) * sizeof(float);
  const double memory_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (memory_bytes > 0 && feature_bytes > memory_bytes / 2)
    fail_parameter("feature_windows", " ", o.feature_windows, " keeps ", feature_bytes / (1 << 30),
                   " GiB of target features (windows x seq_len ", T, " x d_model ", tc.d_model,
                   " x 4 bytes), over half of this machine's ", memory_bytes / (1 << 30), " GiB");
  const auto tokenizer = with_source(o.target, [&] { return make_tokenizer(loaded.config.tokenizer); });
  const TextCorpus corpus = load_text_corpus(o.corpus, *tokenizer, o.validation_fraction, static_cast<size_t>(T) + 1);

  std::cerr << "specula train-" << o.kind << ": target " << o.target << " (" << tc.describe() << ", frozen); corpus "
            << o.corpus << " (" << corpus.train.size() << " training / " << corpus.validation.size()
            << " validation tokens); " << o.threads << " thread(s)\n";
  std::mt19937_64 rng(o.seed);
  const std::vector<int64_t> train_offsets = random_windows(corpus.train, T, o.feature_windows, rng);
  const std::vector<int64_t> val_offsets =
      evenly_spaced(window_offsets(static_cast<int64_t>(corpus.validation.size()), T), o.eval_windows);
  const FeatureSet train_set = run_target(target, corpus.train, train_offsets, T, o.batch_size, "training", std::cerr);
  const FeatureSet val_set =
      run_target(target, corpus.validation, val_offsets, T, o.batch_size, "validation", std::cerr);

  Objective objective{o, target};
  if (o.kind == "medusa") {
    objective.medusa = MedusaHeads(o.medusa_heads, tc.d_model, tc.vocab_size);
    objective.medusa->init_from_lm_head(lm_head_weight(target));
  } else {
    objective.eagle = EagleHead(tc);
  }
  torch::nn::Module& heads = objective.module();
  heads.train();
  const std::unique_ptr<torch::optim::AdamW> adamw = make_adamw(heads, o);
  torch::optim::AdamW& optimizer = *adamw;

  DraftHeadsConfig config = new_heads_folder(o, tc);
  // What made the heads, saved with them from the first save on (in_progress_record).
  nlohmann::json in_progress = in_progress_record(o, o.command, o.corpus);
  in_progress["target"] = o.target;
  in_progress["torch_version"] = TORCH_VERSION;

  std::vector<double> top1;
  const double initial_val = evaluate(objective, val_set, o.batch_size, top1);
  std::cerr << "initial validation loss " << fixed_decimals(initial_val) << ", top-1 " << rates(top1) << "\n";
  const int64_t total_steps = o.lr.total_steps;
  ProgressBar progress(std::cerr, total_steps, isatty(STDERR_FILENO) == 1, o.log_interval);
  std::uniform_int_distribution<int64_t> pick_window(0, o.feature_windows - 1);
  HeadTrainResult result;
  double best_val = INFINITY;
  TrainingLog log(total_steps, o.eval_interval);
  // A stop signal ends the loop between steps, never between a save's weights and its config (HeldWrite).
  stopper.begin_loop();
  for (int64_t step = 0; step < total_steps; ++step) {
    if (stopper.stop_before(step, result.best_step)) break;
    const auto step_start = Clock::now();
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(o.lr.at(step));
    std::vector<int64_t> rows(static_cast<size_t>(o.batch_size));
    for (int64_t& r : rows) r = pick_window(rng);
    const double loss_value = train_step(objective, optimizer, train_set, rows);
    if (!std::isfinite(loss_value))
      fail("training diverged: loss ", loss_value, " at step ", step + 1, " (lower --lr?)");
    log.add_step(loss_value, seconds_since(step_start));
    const int64_t done = step + 1;
    progress.update(step, loss_value, static_cast<double>(done * o.batch_size * T) / log.train_seconds(),
                    log.eta(done));
    if (done % o.eval_interval == 0 || done == total_steps) {
      const auto eval_start = Clock::now();
      const double val = evaluate(objective, val_set, o.batch_size, top1);
      std::string saved;
      if (val < best_val) {
        best_val = val;
        result.best_step = done;
        result.val_top1 = top1;
        config.training = in_progress;
        config.training["step"] = done;
        config.training["val_loss"] = val;
        {
          const HeldWrite held;
          save_draft_heads(o.output, heads, config);
        }
        saved = ", saved " + o.output;
      }
      log.add_evaluation(seconds_since(eval_start));
      progress.note("step " + std::to_string(done) + ": train loss " + fixed_decimals(log.recent_loss()) +
                    ", val loss " + fixed_decimals(val) + ", top-1 " + rates(top1) + saved);
    }
  }
  progress.finish();
  if (stopper.end_loop(result.best_step)) {
    result.stop = stopper.stop();
    result.steps = result.stop.steps_done;
    result.val_loss = best_val;
    stopper.report([&](const std::string& status) {
      DraftHeadsConfig saved = read_draft_heads_config(o.output);
      saved.training["status"] = status;
      write_draft_heads_config(o.output, saved);
    });
    return result;
  }
  result.steps = total_steps;
  result.val_loss = best_val;
  result.final_train_loss = log.recent_loss();
  result.seconds = seconds_since(start);
  config.training = training_record(o, result, static_cast<int64_t>(val_offsets.size()), initial_val,
                                    parameter_count(heads), log.train_seconds());
  config.weights_checksum = read_draft_heads_config(o.output).weights_checksum;  // of the best step's weights
  write_draft_heads_config(o.output, config);
  std::cerr << "specula train-" << o.kind << ": done in " << ProgressBar::format_duration(result.seconds) << "; heads "
            << o.output << " (step " << result.best_step << "), validation loss " << fixed_decimals(result.val_loss)
            << " (initial " << fixed_decimals(initial_val) << "), top-1 " << rates(result.val_top1) << "\n";
  return result;
}

}  // namespace specula
