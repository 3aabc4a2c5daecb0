// Training a transformer language model on a text corpus (`specula train`): random windows of the training
// split, next-token cross-entropy, AdamW with decoupled weight decay on matrices only, linear warm-up +
// cosine schedule, gradient-norm clipping, periodic validation loss on a fixed subset of validation
// windows, a checkpoint whenever that loss improves, and a final validation loss over the whole validation
// split measured on the checkpoint as saved (after any fp16 rounding). Torch-free header.
#pragma once

#include <cstdint>
#include <string>

#include "harness/models/transformer/transformer_config.h"
#include "harness/train/optimizer_options.h"
#include "harness/train/training_stop.h"

namespace specula {

struct TrainOptions : OptimizerOptions {
  TransformerConfig model;
  std::string tokenizer = "byte";
  std::string corpus;                     // text file
  double validation_fraction = 0.1;       // the last 10% of the corpus
  std::string output;                     // checkpoint folder
  std::string weights_dtype = "float32";  // how the checkpoint stores weights: float32 | float16 | bfloat16
  // seq_len <= model.max_seq_len
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
  TrainingStop stop;               // a stop signal's: then only steps, best_step and best_periodic_val_loss are set
};

TrainResult train_transformer(const TrainOptions& options);

}  // namespace specula
