#include "harness/models/hf/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "harness/models/json_fields.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};

int64_t int_field(const json& j, const char* key, const std::string& where) {
  const json* v = json_field_if_set(j, key);
  if (!v) fail(where, ": missing field '", key, "'");
  return json_integer(*v, key, where);
}

int64_t int_field_or(const json& j, const char* key, int64_t fallback, const std::string& where) {
  const json* v = json_field_if_set(j, key);
  return v ? json_integer(*v, key, where) : fallback;
}

double number_field_or(const json& j, const char* key, double fallback, const std::string& where) {
  const json* v = json_field_if_set(j, key);
  return v ? json_number(*v, key, where) : fallback;
}

bool bool_field_or(const json& j, const char* key, bool fallback, const std::string& where) {
  const json* v = json_field_if_set(j, key);
  return v ? json_bool(*v, key, where) : fallback;
}

int32_t to_int32(int64_t v, const char* key, const std::string& where) {
  if (v < 1 || v > INT32_MAX) fail(where, ": field '", key, "' = ", v, " is out of range");
  return static_cast<int32_t>(v);
}

RopeScaling parse_rope_scaling(const json& j, const std::string& where) {
  RopeScaling s;
  if (!j.is_object()) fail(where, ": rope_scaling must be an object or null, got ", j.dump());
  // transformers >= 4.45 writes "rope_type"; older configs "type".
  const json* type = json_field_if_set(j, "rope_type");
  if (!type) type = json_field_if_set(j, "type");
  if (!type || !type->is_string()) fail(where, ": rope_scaling needs a string 'rope_type' (or 'type')");
  s.type = type->get<std::string>();
  if (s.type == "default") {
    s.type = "none";
    return s;
  }
  if (s.type != "linear" && s.type != "llama3")
    fail(where, ": rope_scaling type '", s.type, "' is not supported (supported: linear, llama3)");
  s.factor = number_field_or(j, "factor", 0.0, where);
  if (!(s.factor >= 1.0)) fail(where, ": rope_scaling.factor must be >= 1, got ", j.value("factor", json()).dump());
  if (s.type == "llama3") {
    for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!json_field_if_set(j, key)) fail(where, ": llama3 rope_scaling needs '", key, "'");
    s.low_freq_factor = number_field_or(j, "low_freq_factor", 0.0, where);
    s.high_freq_factor = number_field_or(j, "high_freq_factor", 0.0, where);
    s.original_max_position_embeddings = number_field_or(j, "original_max_position_embeddings", 0.0, where);
    if (!(s.low_freq_factor > 0.0 && s.high_freq_factor > s.low_freq_factor && s.original_max_position_embeddings > 0))
      fail(where,
           ": llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor and a positive "
           "original_max_position_embeddings, got ",
           j.dump());
  }
  return s;
}

}  // namespace

std::string supported_hf_architectures() {
  std::string s;
  for (const char* a : kArchitectures) s += std::string(s.empty() ? "" : ", ") + a;
  return s;
}

HfConfig hf_config_from_json(const json& j, const std::string& where, int32_t max_seq_len_cap) {
  if (!j.is_object()) fail(where, ": expected a JSON object");
  HfConfig c;
  const json* archs = json_field_if_set(j, "architectures");
  if (!archs || !archs->is_array() || archs->size() != 1 || !(*archs)[0].is_string())
    fail(where, ": 'architectures' must list exactly one architecture (supported: ", supported_hf_architectures(), ")");
  c.architecture = (*archs)[0].get<std::string>();
  bool known = false;
  for (const char* a : kArchitectures) known = known || c.architecture == a;
  if (!known)
    fail(where, ": unsupported architecture '", c.architecture, "' (supported: ", supported_hf_architectures(), ")");
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";

  const json* act = json_field_if_set(j, "hidden_act");
  if (act && (!act->is_string() || act->get<std::string>() != "silu"))
    fail(where, ": hidden_act ", act->dump(), " is not supported (SwiGLU needs \"silu\")");
  // Llama's attention_bias puts a bias on o_proj too; Specula's attention has biases on q, k, v only.
  if (bool_field_or(j, "attention_bias", false, where))
    fail(where, ": attention_bias = true (biases on q, k, v and o_proj) is not supported");
  if (bool_field_or(j, "mlp_bias", false, where)) fail(where, ": mlp_bias = true is not supported");

  TransformerConfig& m = c.model;
  m.vocab_size = to_int32(int_field(j, "vocab_size", where), "vocab_size", where);
  m.d_model = to_int32(int_field(j, "hidden_size", where), "hidden_size", where);
  m.n_layers = to_int32(int_field(j, "num_hidden_layers", where), "num_hidden_layers", where);
  m.n_heads = to_int32(int_field(j, "num_attention_heads", where), "num_attention_heads", where);
  m.n_kv_heads = to_int32(int_field_or(j, "num_key_value_heads", m.n_heads, where), "num_key_value_heads", where);
  m.d_ff = to_int32(int_field(j, "intermediate_size", where), "intermediate_size", where);
  m.rope_theta = number_field_or(j, "rope_theta", 10000.0, where);
  m.norm_eps = number_field_or(j, "rms_norm_eps", 1e-6, where);
  m.tie_embeddings = bool_field_or(j, "tie_word_embeddings", false, where);  // all three configs default false
  m.qkv_bias = qwen2;
  if (m.d_model % m.n_heads != 0)
    fail(where, ": hidden_size ", m.d_model, " is not a multiple of num_attention_heads ", m.n_heads);
  const int64_t head_dim = int_field_or(j, "head_dim", m.d_model / m.n_heads, where);
  if (head_dim != m.d_model / m.n_heads)
    fail(where, ": head_dim ", head_dim, " != hidden_size / num_attention_heads = ", m.d_model / m.n_heads,
         " is not supported");

  c.max_position_embeddings = int_field(j, "max_position_embeddings", where);
  if (c.max_position_embeddings < 1) fail(where, ": max_position_embeddings must be >= 1");
  if (const json* s = json_field_if_set(j, "rope_scaling")) c.rope_scaling = parse_rope_scaling(*s, where);
  // Mistral v0.1 sets sliding_window; Qwen2 carries one but uses it only with use_sliding_window.
  if (!qwen2 || bool_field_or(j, "use_sliding_window", false, where))
    c.sliding_window = int_field_or(j, "sliding_window", 0, where);
  if (c.sliding_window < 0) fail(where, ": sliding_window must be >= 0 (0 or absent: none), got ", c.sliding_window);
  if (const json* d = json_field_if_set(j, "torch_dtype"); d && d->is_string()) c.torch_dtype = d->get<std::string>();

  int64_t served = std::min<int64_t>(c.max_position_embeddings, max_seq_len_cap);
  if (c.sliding_window > 0) served = std::min(served, c.sliding_window);
  m.max_seq_len = static_cast<int32_t>(served);
  // The engine's bounds, under this file's names (validate names the engine's fields, which it does not have).
  for (const auto& [name, value, bound] : {std::tuple{"vocab_size", m.vocab_size, kMaxVocabulary},
                                           {"hidden_size", m.d_model, kMaxModelWidth},
                                           {"intermediate_size", m.d_ff, kMaxFeedForward},
                                           {"num_hidden_layers", m.n_layers, kMaxLayers}})
    if (value > bound) fail(where, ": ", name, " must be <= ", bound, ", got ", value);
  m.validate(where);
  return c;
}

HfConfig read_hf_config(const std::string& dir, int32_t max_seq_len_cap) {
  if (!fs::exists(dir)) fail("hf model '", dir, "': no such folder");
  if (!fs::is_directory(dir)) fail("hf model '", dir, "': not a folder (expected a Hugging Face model folder)");
  const std::string path = (fs::path(dir) / kHfConfigFile).string();
  return hf_config_from_json(
      read_json_file(path, "missing model config (is '" + dir + "' a Hugging Face model folder?)"), path,
      max_seq_len_cap);
}

json hf_config_json(const TransformerConfig& c, const std::string& torch_dtype) {
  const bool qwen2 = c.qkv_bias;
  return {{"architectures", {qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
          {"model_type", qwen2 ? "qwen2" : "llama"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.d_model},
          {"intermediate_size", c.d_ff},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.head_dim()},
          {"hidden_act", "silu"},
          {"max_position_embeddings", c.max_seq_len},
          {"rms_norm_eps", c.norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", c.tie_embeddings},
          {"attention_bias", false},
          {"torch_dtype", torch_dtype}};
}

std::vector<double> rope_inverse_frequencies(int32_t head_dim, double theta, const RopeScaling& scaling) {
  std::vector<double> inv(head_dim / 2);
  for (int32_t i = 0; i < head_dim / 2; ++i) inv[i] = std::pow(theta, -2.0 * i / head_dim);
  if (scaling.type == "linear") {
    for (double& f : inv) f /= scaling.factor;
  } else if (scaling.type == "llama3") {
    const double old_len = scaling.original_max_position_embeddings;
    const double low_freq_wavelen = old_len / scaling.low_freq_factor;
    const double high_freq_wavelen = old_len / scaling.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_freq_wavelen) {
        f /= scaling.factor;  // long wavelengths: interpolate
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - smooth) * f / scaling.factor + smooth * f;
      }  // short wavelengths: unchanged
    }
  } else if (scaling.type != "none") {
    fail("rope_scaling type '", scaling.type, "' is not supported (supported: linear, llama3)");
  }
  return inv;
}

}  // namespace specula
