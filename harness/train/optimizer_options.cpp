#include "harness/train/optimizer_options.h"

#include <cmath>

#include "harness/config/command_options.h"
#include "kernels/shared/error.h"
#include "kernels/shared/thread_limit.h"

namespace specula {

namespace po = boost::program_options;

void OptimizerOptions::validate_optimizer() const {
  lr.validate();
  // A step holds batch_size x seq_len rows of activations and logits: bounded before the first step.
  if (batch_size < 1 || batch_size > 4096) fail_parameter("batch_size", " must be in 1..4096, got ", batch_size);
  if (!std::isfinite(grad_clip)) fail_parameter("grad_clip", " must be a finite number (<= 0: off), got ", grad_clip);
  if (!(weight_decay >= 0.0)) fail_parameter("weight_decay", " must be >= 0, got ", weight_decay);
  if (!(beta1 >= 0.0 && beta1 < 1.0)) fail_parameter("beta1", " must be in [0, 1), got ", beta1);
  if (!(beta2 >= 0.0 && beta2 < 1.0)) fail_parameter("beta2", " must be in [0, 1), got ", beta2);
  if (eval_interval < 1) fail_parameter("eval_interval", " must be >= 1, got ", eval_interval);
  if (eval_windows < 1) fail_parameter("eval_windows", " must be >= 1, got ", eval_windows);
  check_thread_count(threads);
}

void add_optimizer_options(po::options_description& desc, const OptimizerOptions& d) {
  // clang-format off
  desc.add_options()
    ("steps", po::value<int64_t>()->default_value(d.lr.total_steps), "optimizer steps")
    ("batch-size", po::value<int64_t>()->default_value(d.batch_size), "windows per step")
    ("seq-len", po::value<int64_t>()->default_value(d.seq_len), "tokens per window")
    ("lr", double_value(d.lr.peak), "peak learning rate")
    ("min-lr", double_value(d.lr.min), "learning rate at the end of the cosine")
    ("warmup-steps", po::value<int64_t>()->default_value(d.lr.warmup_steps), "linear warm-up steps")
    ("weight-decay", double_value(d.weight_decay), "AdamW decoupled weight decay (matrices)")
    ("beta1", double_value(d.beta1), "AdamW beta1")
    ("beta2", double_value(d.beta2), "AdamW beta2")
    ("grad-clip", double_value(d.grad_clip), "max gradient norm (<= 0: off)")
    ("eval-interval", po::value<int64_t>()->default_value(d.eval_interval), "steps between validation losses")
    ("eval-windows", po::value<int64_t>()->default_value(d.eval_windows), "validation windows per periodic evaluation")
    ("log-interval", po::value<int64_t>()->default_value(d.log_interval), "steps between progress lines when stderr is not a terminal")
    ("seed", po::value<uint64_t>()->default_value(d.seed), "initialisation and sampling seed")
    ("threads", po::value<int>()->default_value(d.threads), "LibTorch/OpenMP threads");
  // clang-format on
}

void read_optimizer_options(const po::variables_map& vm, OptimizerOptions& o) {
  o.lr.total_steps = vm["steps"].as<int64_t>();
  o.batch_size = vm["batch-size"].as<int64_t>();
  o.seq_len = vm["seq-len"].as<int64_t>();
  o.lr.peak = vm["lr"].as<double>();
  o.lr.min = vm["min-lr"].as<double>();
  o.lr.warmup_steps = vm["warmup-steps"].as<int64_t>();
  o.weight_decay = vm["weight-decay"].as<double>();
  o.beta1 = vm["beta1"].as<double>();
  o.beta2 = vm["beta2"].as<double>();
  o.grad_clip = vm["grad-clip"].as<double>();
  o.eval_interval = vm["eval-interval"].as<int64_t>();
  o.eval_windows = vm["eval-windows"].as<int64_t>();
  o.log_interval = vm["log-interval"].as<int64_t>();
  o.seed = vm["seed"].as<uint64_t>();
  o.threads = vm["threads"].as<int>();
}

nlohmann::json in_progress_record(const OptimizerOptions& options, const std::string& command,
                                  const std::string& corpus) {
  nlohmann::json record = {
      {"status", "in progress (a run killed before its end leaves it so)"}, {"command", command}, {"corpus", corpus}};
  record.update(optimizer_record(options));
  return record;
}

nlohmann::json optimizer_record(const OptimizerOptions& o) {
  return {{"steps", o.lr.total_steps},
          {"batch_size", o.batch_size},
          {"seq_len", o.seq_len},
          {"lr", o.lr.peak},
          {"min_lr", o.lr.min},
          {"warmup_steps", o.lr.warmup_steps},
          {"weight_decay", o.weight_decay},
          {"betas", {o.beta1, o.beta2}},
          {"grad_clip", o.grad_clip},
          {"seed", o.seed},
          {"threads", o.threads}};
}

}  // namespace specula
