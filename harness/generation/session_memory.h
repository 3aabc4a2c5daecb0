// The target sessions a run keeps alive together (lockstep decoding's batch, beam search's beams), bounded in the
// host's memory before any work, so that a run too wide for the machine stops with a clear error instead of swapping.
#pragma once

#include <cstdint>
#include <string>

#include "harness/models/language_model.h"

namespace specula {

// Fails, naming `who` (e.g. "lockstep: 4 sequences") and ending with `advice`, when `count` sessions of `target`
// (LanguageModel::session_bytes each) exceed the host's available memory (MemAvailable); nothing where either is
// unknown. For sessions in the host's memory: a caller whose sessions live on a GPU does not call it.
void check_sessions_fit_host(const LanguageModel& target, int64_t count, const std::string& who,
                             const std::string& advice);

}  // namespace specula
