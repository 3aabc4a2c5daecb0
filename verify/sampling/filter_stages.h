// The filter stages as one table: the truncation rules that run after temperature, in `sampler_order`
// (min_p, top_k, top_p, typical_p, tfs_z, mirostat). A row holds a stage's name, its parameters, when it is on,
// how its values are checked, how it narrows the candidates, and whether the CUDA fused sampler applies it. The
// pipeline, `sampler_order`, validation, the command line's and experiment files' options, and the device path's
// refusals all read the table. A new stage is its file in verify/sampling/ (globbed), defining its apply function
// and `FilterStageRow maker()` (its row), plus one line STAGE(maker) in SPECULA_ADDED_FILTER_STAGES
// (filter_stages.cpp); a parameter kept by name (SamplingParams::stage_value) needs no field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verify/sampling/logits_processors.h"
#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula {

// One parameter of a stage. Its name is the sampling parameter's ("top_p"), the flag's with '-' ("--top-p") and
// the experiment key's under [sampling] and [draft_sampling] ("sampling.top_p").
struct StageParameter {
  const char* name;
  const char* help;                              // the option's help text
  bool integer;                                  // read as an integer (top_k, mirostat), else as a float32
  double (*get)(const SamplingParams& s);        // a typed field, or s.stage_value(name, default)
  void (*set)(SamplingParams& s, double value);  // likewise
};

struct FilterStageRow {
  const char* name;                        // in sampler_order and the pipeline's description
  std::vector<StageParameter> parameters;  // the first one switches the stage on and off
  double off;                              // the first parameter's value that switches it off
  bool (*active)(const SamplingParams& s);
  void (*validate)(const SamplingParams& s);  // fail_parameter(name, " must be ..., got ", value) when out of range
  void (*apply)(Candidates& c, const SamplingParams& s, const TokenHistory& h);
  // The processed row depends on the token history (mirostat's mu): a draft or verifier row then gets the whole history
  // (SamplerPipeline::trimmed), except mirostat's, which reads mu alone.
  bool reads_history;
  bool device;  // the CUDA fused sampler applies it; a device run of an active stage without it is refused
};

// The table in canonical order (the order active stages missing from sampler_order run in): the built-in rows,
// at FilterStage's named values, then those add_filter_stage appended.
const std::vector<FilterStageRow>& filter_stages();
const FilterStageRow& filter_stage(FilterStage stage);

// Appends a stage (a stage kept in a file of its own registers itself at start-up) and returns it. Refused: a
// stage or parameter name already in the table.
FilterStage add_filter_stage(const FilterStageRow& row);

}  // namespace specula
