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
  const json& v = j["eos_token_id"];
  std::vector<Token> ids;
  auto add = [&](const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size)
      fail(path.string(), ": eos_token_id ", v.dump(), " is not a token id in [0, ", vocab_size, ") or a list of them");
    ids.push_back(static_cast<Token>(id.get<int64_t>()));
  };
  if (v.is_null()) return ids;
  if (v.is_array())
    for (const json& id : v) add(id);
  else
    add(v);
  return ids;
}

}  // namespace

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
