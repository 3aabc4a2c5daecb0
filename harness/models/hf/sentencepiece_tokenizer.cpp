#include "harness/models/hf/sentencepiece_tokenizer.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "harness/models/hf/sentencepiece_shim.h"
#include "kernels/shared/error.h"

#ifndef SPECULA_SENTENCEPIECE_SHIM
#define SPECULA_SENTENCEPIECE_SHIM "libspecula_sentencepiece.so"
#endif

namespace specula {
namespace {

namespace fs = std::filesystem;

// The shim's functions (sentencepiece_shim.h), resolved once per process.
struct Shim {
  decltype(&specula_spm_load) load;
  decltype(&specula_spm_free) free;
  decltype(&specula_spm_piece_size) piece_size;
  decltype(&specula_spm_bos_id) bos_id;
  decltype(&specula_spm_eos_id) eos_id;
  decltype(&specula_spm_encode) encode;
  decltype(&specula_spm_decode) decode;
  decltype(&specula_spm_free_buffer) free_buffer;
};

// Where the module may be: where the build put it (compiled in), or next to the executable or its parent
// folder (build/specula, build/tests/specula_torch_tests).
std::vector<std::string> shim_candidates() {
  std::vector<std::string> out = {SPECULA_SENTENCEPIECE_SHIM};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::string name = fs::path(SPECULA_SENTENCEPIECE_SHIM).filename().string();
    out.push_back((exe.parent_path() / name).string());
    out.push_back((exe.parent_path().parent_path() / name).string());
  }
  return out;
}

const Shim& shim() {
  static std::once_flag once;
  static Shim s{};
  static std::string error;
  std::call_once(once, [] {
    void* handle = nullptr;
    for (const std::string& path : shim_candidates()) {
      // RTLD_LOCAL | RTLD_DEEPBIND: libsentencepiece's bundled protobuf stays private (sentencepiece_shim.h).
      handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle) break;
      error += std::string(error.empty() ? "" : "; ") + ::dlerror();
    }
    if (!handle) return;
    auto sym = [&](const char* name) {
      void* f = ::dlsym(handle, name);
      if (!f) error += std::string("missing symbol ") + name + " ";
      return f;
    };
    s.load = reinterpret_cast<decltype(s.load)>(sym("specula_spm_load"));
    s.free = reinterpret_cast<decltype(s.free)>(sym("specula_spm_free"));
    s.piece_size = reinterpret_cast<decltype(s.piece_size)>(sym("specula_spm_piece_size"));
    s.bos_id = reinterpret_cast<decltype(s.bos_id)>(sym("specula_spm_bos_id"));
    s.eos_id = reinterpret_cast<decltype(s.eos_id)>(sym("specula_spm_eos_id"));
    s.encode = reinterpret_cast<decltype(s.encode)>(sym("specula_spm_encode"));
    s.decode = reinterpret_cast<decltype(s.decode)>(sym("specula_spm_decode"));
    s.free_buffer = reinterpret_cast<decltype(s.free_buffer)>(sym("specula_spm_free_buffer"));
    if (!s.free_buffer || !s.decode || !s.encode || !s.eos_id || !s.bos_id || !s.piece_size || !s.free || !s.load)
      s = Shim{};
  });
  if (!s.load) fail("cannot load the SentencePiece module (libspecula_sentencepiece.so, built with Specula): ", error);
  return s;
}

constexpr size_t kErrorSize = 512;

}  // namespace

struct SentencePieceTokenizer::Impl {
  std::string path;
  void* processor = nullptr;  // Encode / Decode are const and thread-safe in the library
  bool add_bos = false, add_eos = false;
  Token bos = -1, eos = -1;
  int32_t vocab_size = 0;
  ~Impl() {
    if (processor) shim().free(processor);
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, bool add_bos, bool add_eos) {
  const Shim& s = shim();
  auto impl = std::make_shared<Impl>();
  impl->path = model_path;
  char error[kErrorSize] = "";
  impl->processor = s.load(model_path.c_str(), error, sizeof error);
  if (!impl->processor) fail(model_path, ": cannot load SentencePiece model: ", error);
  impl->vocab_size = s.piece_size(impl->processor);
  impl->bos = s.bos_id(impl->processor);
  impl->eos = s.eos_id(impl->processor);
  if (add_bos && impl->bos < 0) fail(model_path, ": add_bos_token is set but the model has no <s>");
  if (add_eos && impl->eos < 0) fail(model_path, ": add_eos_token is set but the model has no </s>");
  impl->add_bos = add_bos;
  impl->add_eos = add_eos;
  impl_ = impl;
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int32_t SentencePieceTokenizer::vocab_size() const { return impl_->vocab_size; }

std::vector<Token> SentencePieceTokenizer::encode(const std::string& text) const {
  const Shim& s = shim();
  int* ids = nullptr;
  size_t count = 0;
  char error[kErrorSize] = "";
  if (s.encode(impl_->processor, text.data(), text.size(), &ids, &count, error, sizeof error) != 0)
    fail(impl_->path, ": SentencePiece cannot encode the text: ", error);
  std::vector<Token> out;
  out.reserve(count + 2);
  if (impl_->add_bos) out.push_back(impl_->bos);
  out.insert(out.end(), ids, ids + count);
  s.free_buffer(ids);
  if (impl_->add_eos) out.push_back(impl_->eos);
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<Token>& tokens) const {
  const int32_t V = vocab_size();
  for (Token t : tokens)
    if (t < 0 || t >= V) fail("sentencepiece tokenizer: token id ", t, " is outside the vocabulary [0, ", V, ")");
  const Shim& s = shim();
  const std::vector<int> ids(tokens.begin(), tokens.end());
  char* text = nullptr;
  size_t size = 0;
  char error[kErrorSize] = "";
  if (s.decode(impl_->processor, ids.data(), ids.size(), &text, &size, error, sizeof error) != 0)
    fail(impl_->path, ": SentencePiece cannot decode: ", error);
  std::string out(text, size);
  s.free_buffer(text);
  return out;
}

}  // namespace specula
