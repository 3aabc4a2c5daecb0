#include "harness/models/eos_tokens.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "harness/models/json_fields.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The `eos_token_id` of a JSON file, or nullopt when the file or the key is absent.
std::optional<std::vector<Token>> eos_of(const fs::path& path, int32_t vocab_size) {
  if (!fs::exists(path)) return std::nullopt;
  const json j = read_json_file(path.string(), "cannot open");
  if (!j.is_object() || !j.contains("eos_token_id")) return std::nullopt;
  return eos_token_ids(j["eos_token_id"], vocab_size, path.string());
}

}  // namespace

std::vector<Token> eos_token_ids(const nlohmann::json& value, int32_t vocab_size, const std::string& where) {
  std::vector<Token> ids;
  auto add = [&](const nlohmann::json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size)
      fail(where, ": eos_token_id ", value.dump(), " is not a token id in [0, ", vocab_size, ") or a list of them");
    ids.push_back(static_cast<Token>(id.get<int64_t>()));
  };
  if (value.is_null()) return ids;
  if (value.is_array())
    for (const nlohmann::json& id : value) add(id);
  else
    add(value);
  return ids;
}

std::vector<Token> checkpoint_eos_tokens(const std::string& model_spec, int32_t vocab_size) {
  const size_t colon = model_spec.find(':');
  if (colon == std::string::npos) return {};
  const std::string kind = model_spec.substr(0, colon);
  const fs::path dir = model_spec.substr(colon + 1);
  if (kind == "hf") {
    if (auto ids = eos_of(dir / "generation_config.json", vocab_size)) return *ids;
    return eos_of(dir / "config.json", vocab_size).value_or(std::vector<Token>{});
  }
  if (kind == "transformer") return eos_of(dir / "config.json", vocab_size).value_or(std::vector<Token>{});
  return {};
}

void add_stop_tokens(SamplingParams& params, const std::vector<Token>& eos) {
  for (Token t : eos)
    if (std::find(params.stop_tokens.begin(), params.stop_tokens.end(), t) == params.stop_tokens.end())
      params.stop_tokens.push_back(t);
}

}  // namespace specula
