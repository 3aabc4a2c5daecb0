// Training draft heads on a frozen target (`specula train-medusa`, `specula train-eagle`; verify/ALGORITHMS.md §6).
// Torch-free header.
//
// Data: `feature_windows` random windows of the corpus's training split are run through the target once and
// their features f_t (final hidden states, the LM head's input) kept in memory, as EAGLE trains on stored
// hidden states; validation uses fixed, evenly spaced windows of the validation split, likewise.
//   Medusa-1 (Cai et al. 2024): the target frozen; head k (k = 1..K) on f_t predicts the corpus token
//     x_{t+k+1}; loss = sum_k lambda_k CE_k with lambda_k = decay^k (0.8^k in the paper). Output layers start
//     from the target's LM head, the ResBlocks from the identity.
//   EAGLE (Li et al. 2024, eagle/train/main.py): the pair (Embed(x_{t+1}), f_t + noise) predicts f_{t+1};
//     loss = w_f SmoothL1(f^, f) + w_p CE(softmax(LMHead(f)), log_softmax(LMHead(f^))) with w_f = 1, w_p = 0.1
//     and uniform noise (U(0,1) - 0.5) * noise * 512 / seq_len on the input features (AddUniformNoise).
//     Embedding and LM head are the target's, frozen.
// AdamW (decoupled weight decay on matrices), linear warm-up + cosine, gradient clipping, a periodic
// validation loss and a checkpoint whenever it improves, a progress bar, and a final record in config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/train/optimizer_options.h"
#include "harness/train/training_stop.h"

namespace specula {

struct HeadTrainOptions : OptimizerOptions {
  HeadTrainOptions() {
    batch_size = 8;
    weight_decay = 0.0;
    eval_interval = 100;
    eval_windows = 32;
    log_interval = 25;
  }

  std::string kind;    // "medusa" | "eagle"
  std::string target;  // target checkpoint folder (frozen)
  std::string corpus;  // text file
  double validation_fraction = 0.1;
  std::string output;  // heads folder (records the target relative to itself)
  // How the written folder stores its matrices: float32 | float16 | bfloat16 (norm gains stay float32). Training
  // runs in float32 throughout; each saved step's matrices are rounded once, as `specula convert-heads` does.
  std::string matrices_dtype = "float32";

  int32_t medusa_heads = 3;
  double medusa_decay = 0.8;          // lambda_k = decay^k
  double eagle_noise = 0.2;           // EAGLE's uniform-noise "std"
  double eagle_feature_weight = 1.0;  // w_f
  double eagle_token_weight = 0.1;    // w_p

  int64_t feature_windows = 512;  // training windows run through the target (features kept in memory)
  // seq_len <= the target's max_seq_len
  std::string command;  // recorded in config.json

  void validate() const;  // throws Error naming the option
};

struct HeadTrainResult {
  int64_t steps = 0;
  int64_t best_step = 0;
  double val_loss = 0.0;          // the saved heads' validation loss (the training objective)
  double final_train_loss = 0.0;  // mean of the last eval_interval steps
  // Medusa: top-1 accuracy of head k against the corpus token x_{t+k+1}; EAGLE: one entry, top-1 agreement of
  // LMHead(f^_{t+1}) with the target's own argmax at t + 1.
  std::vector<double> val_top1;
  double seconds = 0.0;
  TrainingStop stop;  // a stop signal's: then only steps, best_step, val_top1 and val_loss (infinite: none saved)
};

HeadTrainResult train_draft_heads(const HeadTrainOptions& options);

}  // namespace specula
