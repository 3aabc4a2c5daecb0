#include "draft/heads/draft_heads_config.h"

#include <filesystem>

#include "harness/io/file_checksum.h"
#include "harness/io/output_file.h"
#include "harness/models/json_fields.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string string_field(const json& j, const std::string& key, const std::string& where) {
  return json_string(json_field(j, key, where), key, where);
}

}  // namespace

DraftHeadsConfig read_draft_heads_config(const std::string& dir) {
  if (!fs::is_directory(dir)) fail("draft heads '", dir, "': no such folder");
  const std::string path = (fs::path(dir) / "config.json").string();
  const json j =
      read_json_file(path, "missing config (is '" + dir + "' a folder written by specula train-medusa/train-eagle?)");
  if (!j.is_object()) fail(path, ": expected a JSON object");
  reject_unknown_json_fields(
      j, {"format", "kind", "target", "target_model", "target_weights", "medusa_heads", "weights", "training"}, path);
  const std::string format = string_field(j, "format", path);
  if (format != kDraftHeadsFormat) fail(path, ": format '", format, "' is not '", kDraftHeadsFormat, "'");
  DraftHeadsConfig c;
  c.kind = string_field(j, "kind", path);
  if (c.kind != "medusa" && c.kind != "eagle") fail(path, ": kind '", c.kind, "' is not medusa or eagle");
  c.target = string_field(j, "target", path);
  c.target_model = transformer_config_from_json(json_field(j, "target_model", path), path + ": target_model");
  if (c.kind == "medusa") {
    const json& k = json_field(j, "medusa_heads", path);
    if (!k.is_number_integer() || k.get<int64_t>() < 1 || k.get<int64_t>() > 64)
      fail(path, ": medusa_heads must be an integer in 1..64, got ", k.dump());
    c.medusa_heads = k.get<int32_t>();
  } else if (j.contains("medusa_heads")) {
    fail(path, ": medusa_heads is only for kind medusa");
  }
  const json& weights = json_field(j, "weights", path);
  if (!weights.is_object()) fail(path, ": 'weights' must be an object");
  reject_unknown_json_fields(weights, {"file", "matrices_dtype", "bytes", "crc32"}, path + ": weights");
  c.weights_file = string_field(weights, "file", path + ": weights");
  if (weights.contains("matrices_dtype")) {
    c.matrices_dtype = string_field(weights, "matrices_dtype", path + ": weights");
    if (!is_weights_dtype_name(c.matrices_dtype))
      fail(path, ": weights.matrices_dtype '", c.matrices_dtype, "' is not float32, float16 or bfloat16");
  }
  c.weights_checksum = read_weights_checksum(weights, path + ": weights");
  if (j.contains("target_weights")) {
    const json& tw = json_field(j, "target_weights", path);
    if (!tw.is_object()) fail(path, ": 'target_weights' must be an object");
    reject_unknown_json_fields(tw, {"bytes", "crc32"}, path + ": target_weights");
    c.target_weights_checksum = read_weights_checksum(tw, path + ": target_weights");
  }
  if (j.contains("training")) c.training = j["training"];
  return c;
}

void write_draft_heads_config(const std::string& dir, const DraftHeadsConfig& c) {
  json weights = {{"file", c.weights_file}, {"matrices_dtype", c.matrices_dtype}};
  write_weights_checksum(weights, c.weights_checksum);
  json j = {{"format", kDraftHeadsFormat}, {"kind", c.kind},
            {"target", c.target},          {"target_model", to_json(c.target_model)},
            {"weights", weights},          {"training", c.training}};
  if (c.kind == "medusa") j["medusa_heads"] = c.medusa_heads;
  if (c.target_weights_checksum) {
    json tw = json::object();
    write_weights_checksum(tw, c.target_weights_checksum);
    j["target_weights"] = tw;
  }
  const std::string path = (fs::path(dir) / "config.json").string();
  write_output_file(path, j.dump(2) + "\n", "the heads config");
}

std::string resolve_heads_target(const std::string& dir, const DraftHeadsConfig& config) {
  const fs::path target(config.target);
  return (target.is_absolute() ? target : (fs::path(dir) / target).lexically_normal()).string();
}

std::string heads_target_folder(const std::string& dir, const DraftHeadsConfig& config) {
  const std::string resolved = resolve_heads_target(dir, config);
  // Named as the heads' config gives it: the checkpoint's own error would name a folder the user never wrote.
  std::error_code ec;
  if (!fs::is_directory(resolved, ec))
    fail((fs::path(dir) / "config.json").string(), ": field 'target' = '", config.target, "' names no folder (",
         resolved, "): the heads' target checkpoint was moved or removed (give the spec's target=DIR)");
  return resolved;
}

void check_heads_target_config(const DraftHeadsConfig& heads, const std::string& target_dir,
                               const CheckpointConfig& target, const std::string& where) {
  if (to_json(target.model) != to_json(heads.target_model))
    fail_parameter("draft", " ", where, ": the heads were trained on a target with ", heads.target_model.describe(),
                   " but ", target_dir, " has ", target.model.describe());
  if (heads.target_weights_checksum && target.weights_checksum &&
      !(*heads.target_weights_checksum == *target.weights_checksum))
    fail_parameter("draft", " ", where, ": the heads were trained on other weights of their target ", target_dir,
                   " (its weights now have crc32 ", crc32_hex(target.weights_checksum->crc32), ", the heads' ",
                   crc32_hex(heads.target_weights_checksum->crc32),
                   "): the target was retrained since; train the heads again");
}

}  // namespace specula
