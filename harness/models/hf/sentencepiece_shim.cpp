// specula_sentencepiece: see sentencepiece_shim.h. Built as a MODULE library linked to libsentencepiece only.
#include "harness/models/hf/sentencepiece_shim.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* error, size_t error_size, const std::string& message) {
  if (!error || error_size == 0) return;
  std::strncpy(error, message.c_str(), error_size - 1);
  error[error_size - 1] = '\0';
}

const sentencepiece::SentencePieceProcessor& sp(const void* p) {
  return *static_cast<const sentencepiece::SentencePieceProcessor*>(p);
}

}  // namespace

extern "C" {

void* specula_spm_load(const char* path, char* error, size_t error_size) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    set_error(error, error_size, status.ToString());
    delete processor;
    return nullptr;
  }
  return processor;
}

void specula_spm_free(void* processor) { delete static_cast<sentencepiece::SentencePieceProcessor*>(processor); }

int specula_spm_piece_size(const void* processor) { return sp(processor).GetPieceSize(); }
int specula_spm_bos_id(const void* processor) { return sp(processor).bos_id(); }
int specula_spm_eos_id(const void* processor) { return sp(processor).eos_id(); }

int specula_spm_encode(const void* processor, const char* text, size_t size, int** ids, size_t* count, char* error,
                       size_t error_size) {
  std::vector<int> out;
  const auto status = sp(processor).Encode(std::string(text, size), &out);
  if (!status.ok()) {
    set_error(error, error_size, status.ToString());
    return -1;
  }
  *count = out.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.empty() ? 1 : out.size())));
  if (!*ids) {
    set_error(error, error_size, "out of memory");
    return -1;
  }
  if (!out.empty()) std::memcpy(*ids, out.data(), sizeof(int) * out.size());
  return 0;
}

int specula_spm_decode(const void* processor, const int* ids, size_t count, char** text, size_t* size, char* error,
                       size_t error_size) {
  std::string out;
  const auto status = sp(processor).Decode(std::vector<int>(ids, ids + count), &out);
  if (!status.ok()) {
    set_error(error, error_size, status.ToString());
    return -1;
  }
  *size = out.size();
  *text = static_cast<char*>(std::malloc(out.size() + 1));
  if (!*text) {
    set_error(error, error_size, "out of memory");
    return -1;
  }
  std::memcpy(*text, out.data(), out.size() + 1);
  return 0;
}

void specula_spm_free_buffer(void* buffer) { std::free(buffer); }

}  // extern "C"
