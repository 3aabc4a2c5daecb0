#include "harness/models/transformer/transformer_config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/io/output_file.h"
#include "harness/models/eos_tokens.h"
#include "harness/models/json_fields.h"
#include "harness/models/transformer/byte_tokenizer.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const json& field(const json& j, const char* key, const std::string& where) { return json_field(j, key, where); }

int32_t int_field(const json& j, const char* key, const std::string& where) {
  const int64_t x = json_integer(field(j, key, where), key, where);
  if (x < INT32_MIN || x > INT32_MAX) fail(where, ": field '", key, "' = ", x, " is out of range");
  return static_cast<int32_t>(x);
}

double number_field(const json& j, const char* key, const std::string& where) {
  return json_number(field(j, key, where), key, where);
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  return json_string(field(j, key, where), key, where);
}

}  // namespace

int64_t TransformerConfig::parameter_count() const {
  const int64_t d = d_model, ff = d_ff, V = vocab_size;
  const int64_t qkv = static_cast<int64_t>(n_heads + 2 * kv_heads()) * head_dim();
  // qkv (+ biases), out, gate+up, down, 2 norms
  const int64_t per_layer = d * qkv + (qkv_bias ? qkv : 0) + d * d + d * 2 * ff + ff * d + 2 * d;
  return V * d + n_layers * per_layer + d + (tie_embeddings ? 0 : V * d);
}

void TransformerConfig::validate(const std::string& where) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v < 1) fail(where, ": ", name, " must be >= 1, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("d_ff", d_ff);
  positive("max_seq_len", max_seq_len);
  // Every layer's RoPE tables and every session's KV cache are built for max_seq_len positions up front.
  if (max_seq_len > kMaxSeqLen) fail(where, ": max_seq_len must be <= ", kMaxSeqLen, ", got ", max_seq_len);
  for (const auto& [name, value, bound] : {std::tuple{"vocab_size", vocab_size, kMaxVocabulary},
                                           {"d_model", d_model, kMaxModelWidth},
                                           {"d_ff", d_ff, kMaxFeedForward},
                                           {"n_layers", n_layers, kMaxLayers}})
    if (value > bound) fail(where, ": ", name, " must be <= ", bound, ", got ", value);
  if (d_model % n_heads != 0) fail(where, ": d_model ", d_model, " is not a multiple of n_heads ", n_heads);
  if (n_kv_heads < 0 || n_heads % kv_heads() != 0)
    fail(where, ": n_heads ", n_heads, " is not a multiple of n_kv_heads ", n_kv_heads);
  if (head_dim() % 2 != 0) fail(where, ": head_dim = d_model / n_heads = ", head_dim(), " must be even for RoPE");
  if (!(rope_theta > 1.0)) fail(where, ": rope_theta must be > 1, got ", rope_theta);
  if (!(norm_eps > 0.0 && norm_eps < 1.0)) fail(where, ": norm_eps must be in (0, 1), got ", norm_eps);
}

std::string TransformerConfig::describe() const {
  std::ostringstream os;
  os << n_layers << " layer" << (n_layers == 1 ? "" : "s") << ", d=" << d_model << ", " << n_heads << " head"
     << (n_heads == 1 ? "" : "s");
  if (kv_heads() != n_heads) os << " (" << kv_heads() << " kv)";
  os << (qkv_bias ? ", qkv bias" : "") << ", ff=" << d_ff << ", " << (tie_embeddings ? "tied" : "untied") << ", "
     << std::fixed;
  os.precision(parameter_count() >= 1000000 ? 2 : 3);
  os << parameter_count() / 1e6 << "M params";
  return os.str();
}

json to_json(const TransformerConfig& c) {
  json j = {{"vocab_size", c.vocab_size}, {"d_model", c.d_model},   {"n_layers", c.n_layers},
            {"n_heads", c.n_heads},       {"d_ff", c.d_ff},         {"max_seq_len", c.max_seq_len},
            {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps}, {"tie_embeddings", c.tie_embeddings}};
  if (c.n_kv_heads > 0 && c.n_kv_heads != c.n_heads) j["n_kv_heads"] = c.n_kv_heads;
  if (c.qkv_bias) j["qkv_bias"] = true;
  return j;
}

TransformerConfig transformer_config_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail(where, ": 'model' must be an object");
  reject_unknown_json_fields(j,
                             {"vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "rope_theta",
                              "norm_eps", "tie_embeddings", "n_kv_heads", "qkv_bias"},
                             where);
  TransformerConfig c;
  c.vocab_size = int_field(j, "vocab_size", where);
  c.d_model = int_field(j, "d_model", where);
  c.n_layers = int_field(j, "n_layers", where);
  c.n_heads = int_field(j, "n_heads", where);
  c.d_ff = int_field(j, "d_ff", where);
  c.max_seq_len = int_field(j, "max_seq_len", where);
  c.rope_theta = number_field(j, "rope_theta", where);
  c.norm_eps = number_field(j, "norm_eps", where);
  c.tie_embeddings = json_bool(field(j, "tie_embeddings", where), "tie_embeddings", where);
  if (j.contains("n_kv_heads")) c.n_kv_heads = int_field(j, "n_kv_heads", where);
  if (j.contains("qkv_bias")) c.qkv_bias = json_bool(j["qkv_bias"], "qkv_bias", where);
  c.validate(where);
  return c;
}

CheckpointConfig read_checkpoint_config(const std::string& dir) {
  if (!fs::exists(dir)) fail("transformer checkpoint '", dir, "': no such folder");
  if (!fs::is_directory(dir)) fail("transformer checkpoint '", dir, "': not a folder (expected a checkpoint folder)");
  const std::string path = (fs::path(dir) / kCheckpointConfigFile).string();
  const json j = read_json_file(path, "missing checkpoint config (is '" + dir + "' a transformer checkpoint folder?)");
  if (!j.is_object()) fail(path, ": expected a JSON object");
  // eos_token_id is read where a run's stop tokens are (harness/models/eos_tokens.h), as an hf: config's is.
  reject_unknown_json_fields(j, {"format", "model", "tokenizer", "weights", "training", "eos_token_id"}, path);
  const std::string format = string_field(j, "format", path);
  if (format != kCheckpointFormat) fail(path, ": format '", format, "' is not '", kCheckpointFormat, "'");
  CheckpointConfig c;
  c.model = transformer_config_from_json(field(j, "model", path), path + ": model");
  c.tokenizer = string_field(j, "tokenizer", path);
  const auto tokenizer = with_source(path, [&] { return make_tokenizer(c.tokenizer); });
  if (tokenizer->vocab_size() != c.model.vocab_size)
    fail(path, ": tokenizer '", c.tokenizer, "' has ", tokenizer->vocab_size(), " tokens but model.vocab_size is ",
         c.model.vocab_size);
  const json& weights = field(j, "weights", path);
  if (!weights.is_object()) fail(path, ": 'weights' must be an object");
  reject_unknown_json_fields(weights, {"file", "dtype", "bytes", "crc32"}, path + ": weights");
  c.weights_file = string_field(weights, "file", path + ": weights");
  c.weights_dtype = string_field(weights, "dtype", path + ": weights");
  if (!is_weights_dtype_name(c.weights_dtype))
    fail(path, ": weights.dtype '", c.weights_dtype, "' is not float32, float16 or bfloat16");
  c.weights_checksum = read_weights_checksum(weights, path + ": weights");
  if (j.contains("training")) c.training = j["training"];
  if (j.contains("eos_token_id")) {  // checked here, so a bad value is named even where --ignore-eos never reads it
    eos_token_ids(j["eos_token_id"], c.model.vocab_size, path);
    c.eos_token_id = j["eos_token_id"];
  }
  return c;
}

bool is_weights_dtype_name(const std::string& name) {
  return name == "float32" || name == "float16" || name == "bfloat16";
}

std::optional<FileChecksum> read_weights_checksum(const json& weights, const std::string& where) {
  if (!weights.contains("bytes") && !weights.contains("crc32")) return std::nullopt;
  FileChecksum c;
  const int64_t bytes = json_integer(field(weights, "bytes", where), "bytes", where);
  if (bytes < 0) fail(where, ": bytes must be >= 0, got ", bytes);
  c.bytes = static_cast<uint64_t>(bytes);
  const json& crc = field(weights, "crc32", where);
  if (!crc.is_string()) fail(where, ": crc32 must be a string of 8 hex digits, got ", crc.dump());
  c.crc32 = parse_crc32_hex(crc.get<std::string>(), where);
  return c;
}

void write_weights_checksum(json& weights, const std::optional<FileChecksum>& checksum) {
  if (!checksum) return;
  weights["bytes"] = checksum->bytes;
  weights["crc32"] = crc32_hex(checksum->crc32);
}

void write_checkpoint_config(const std::string& dir, const CheckpointConfig& c) {
  json weights = {{"file", c.weights_file}, {"dtype", c.weights_dtype}};
  write_weights_checksum(weights, c.weights_checksum);
  json j = {{"format", kCheckpointFormat},
            {"model", to_json(c.model)},
            {"tokenizer", c.tokenizer},
            {"weights", weights},
            {"training", c.training}};
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  const std::string path = (fs::path(dir) / kCheckpointConfigFile).string();
  write_output_file(path, j.dump(2) + "\n", "the checkpoint config");
}

}  // namespace specula
