#include "draft/draft_vocabulary.h"

#include "harness/models/language_model.h"
#include "kernels/shared/error.h"

namespace specula {

void check_draft_vocabulary(const LanguageModel& target, int32_t draft_vocab, const std::string& draft_description) {
  if (draft_vocab != target.vocab_size())
    fail("vocabulary mismatch: target ", target.description(), " has ", target.vocab_size(), " tokens but draft ",
         draft_description, " has ", draft_vocab);
}

}  // namespace specula
