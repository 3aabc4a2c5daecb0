#include "harness/models/hf/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/models/hf/bpe_tokenizer.h"
#include "harness/models/hf/sentencepiece_tokenizer.h"
#include "harness/models/json_fields.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

bool flag(const nlohmann::json& config, const char* key, bool fallback, const std::string& where) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(where, ": '", key, "' must be true or false, got ", it->dump());
  return it->get<bool>();
}

}  // namespace

std::shared_ptr<const Tokenizer> load_hf_tokenizer(const std::string& dir) {
  if (!fs::is_directory(dir)) fail("hf model '", dir, "': no such folder");
  const fs::path spm = fs::path(dir) / "tokenizer.model", bpe = fs::path(dir) / "tokenizer.json";
  if (fs::exists(spm)) {
    nlohmann::json config = nlohmann::json::object();
    const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
    if (fs::exists(config_path)) {
      config = read_json_file(config_path.string(), "cannot open");
      if (!config.is_object()) fail(config_path.string(), ": expected a JSON object");
    }
    return std::make_shared<SentencePieceTokenizer>(spm.string(),
                                                    flag(config, "add_bos_token", true, config_path.string()),
                                                    flag(config, "add_eos_token", false, config_path.string()));
  }
  if (fs::exists(bpe)) return std::make_shared<ByteLevelBpeTokenizer>(bpe.string());
  return nullptr;
}

}  // namespace specula
