// What a run decodes from, kept in its results folder (inputs.json) so that `run --resume` continues only where its
// inputs are the ones its records came from: the prompts as token ids (a prompts file or corpus edited since would
// otherwise mix two prompt sets in one folder, silently), and a fingerprint of each model file the target's and
// drafters' specs name (a checkpoint retrained in place).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "harness/experiment/experiment_config.h"

namespace specula {

// What inputs.json holds for a run of `config` over `prompts` (written as its dump()).
nlohmann::json run_inputs(const ExperimentConfig& config, const std::vector<std::vector<int32_t>>& prompts);

// What of a config.resolved.ini text a resume compares with inputs.json's `configuration`: its lines without comments
// and without `cost_profile`.
std::string configuration_compared(const std::string& resolved_ini);

// A folder's inputs.json, read back: throws Error naming the file where it is not the JSON a run writes (an object
// with a list of prompts).
nlohmann::json read_run_inputs(const std::filesystem::path& file, const std::string& what);

// `inputs` without the model files that are notes (*.md): a model folder's fingerprint leaves them out, and an
// inputs.json written before it did lists them. Comparisons (resume, merge) read both sides so.
nlohmann::json without_notes(const nlohmann::json& inputs);

// Throws Error naming the folder and the first input that differs from the one its inputs.json recorded. A folder
// without inputs.json (written before it was kept) is not checked.
void check_inputs_unchanged(const std::filesystem::path& dir, const nlohmann::json& now);

}  // namespace specula
