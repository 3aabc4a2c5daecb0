// A draft proposes the target's token ids, so its vocabulary must be the target's.
#pragma once

#include <cstdint>
#include <string>

namespace specula {

class LanguageModel;

// An Error "vocabulary mismatch: target T has N tokens but draft D has M" when the sizes differ. Checked where a
// drafter loads, before its sampler is built over its own vocabulary (whose errors would otherwise quote the draft's
// bounds against values the target accepts), and again by the generator.
void check_draft_vocabulary(const LanguageModel& target, int32_t draft_vocab, const std::string& draft_description);

}  // namespace specula
