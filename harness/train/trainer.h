// Training a transformer language model on a text corpus (`specula train`): random windows of the training
// split, next-token cross-entropy, AdamW with decoupled weight decay on matrices only, linear warm-up +
// cosine schedule, gradient-norm clipping, periodic validation loss on a fixed subset of validation
// windows, a checkpoint whenever that loss improves, and a final validation loss over the whole validation
// split measured on the checkpoint as saved (after any fp16 rounding). Torch-free header.
#pragma once

#include <cstdint>
#include <string>

#include "harness/models/transformer/transformer_config.h"
#include "harness/train/lr_schedule.h"

namespace specula {

struct TrainOptions {
  TransformerConfig model;
  std::string tokenizer = "byte";
  std::string corpus;                     // text file
  double validation_fraction = 0.1;       // the last 10% of the corpus
  std::string output;                     // checkpoint folder
  std::string weights_dtype = "float32";  // how the checkpoint stores weights: float32 | float16

  int64_t batch_size = 32;  // windows per step
  int64_t seq_len = 256;    // tokens per window (<= model.max_seq_len)
  LrSchedule lr;            // lr.total_steps = number of optimizer steps
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double grad_clip = 1.0;  // max global gradient norm (<= 0: off)

  int64_t eval_interval = 250;  // steps between validation losses (and checkpoints when it improves)
  int64_t eval_windows = 64;    // validation windows per periodic evaluation (evenly spaced, fixed)
  int64_t log_interval = 50;    // steps between plain progress lines when stderr is not a terminal
  uint64_t seed = 0;
  int threads = 1;
  std::string command;  // the command line, recorded in the checkpoint

  void validate() const;  // throws Error naming the option
};

struct TrainResult {
  int64_t steps = 0;
  int64_t best_step = 0;                // step of the saved checkpoint
  double best_periodic_val_loss = 0.0;  // on the periodic subset, at best_step
  double final_train_loss = 0.0;        // mean of the last eval_interval steps' losses
  double val_loss = 0.0;                // whole validation split, saved checkpoint, nats per token
  int64_t val_tokens = 0;
  double seconds = 0.0;
  double tokens_per_second = 0.0;  // training steps only
};

TrainResult train_transformer(const TrainOptions& options);

}  // namespace specula
