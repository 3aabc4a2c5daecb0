// Hugging Face-style checkpoints (`hf:DIR`): safetensors reading and writing, config.json, the tokenizers,
// and the models against independent references. All "[hf]".
//
// References (tests/reference/, run with Debian's /usr/bin/python3):
//   hf_reference.py   tiny random Llama / Mistral / Qwen2 folders written with its own safetensors writer,
//                     and their logits by a plain PyTorch forward written from transformers' modeling_*.py
//                     (float64 on the stored weights);
//   bpe_reference.py  byte-level BPE merges learned on a corpus excerpt, and encodings by GPT-2's encoder.py
//                     algorithm with the `regex` module;
//   spm_train / spm_encode (Debian's sentencepiece): the SentencePiece library's own tools.
//
// Tolerance of the model comparisons. The reference is float64 on the exact stored weights; Specula runs
// float32, so the difference is float32 rounding alone: relative ~1e-7 per operation, a few hundred
// operations deep (2 layers of d = 64 dot products, softmax, RMSNorm), on logits up to ~40 in magnitude
// (unit-scale random weights, so attention is far from uniform). That is ~1e-5 absolute; the largest
// difference observed over all comparisons here is printed by the test (1.5e-5). kTol = 2e-4 leaves
// >5x headroom, and each comparison's negative control (RoPE scaling left out, a wrong path) moves the
// logits by more than 100 * kTol, so the tolerance cannot hide a real bug.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "draft/model_drafter.h"
#include "harness/generation/generator.h"
#include "harness/models/hf/bpe_tokenizer.h"
#include "harness/models/hf/hf_config.h"
#include "harness/models/hf/hf_model.h"
#include "harness/models/hf/hf_tokenizer.h"
#include "harness/models/hf/safetensors.h"
#include "harness/models/hf/sentencepiece_tokenizer.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "kernels/shared/error.h"
#include "scaled_transformer.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using nlohmann::json;

constexpr double kTol = 2e-4;

const fs::path kSourceDir = fs::path(__FILE__).parent_path().parent_path();
const fs::path kReferenceDir = kSourceDir / "tests" / "reference";
const fs::path kCorpus = kSourceDir.parent_path() / "shared" / "data" / "tinyshakespeare.txt";

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("specula-test-hf-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub = "") const { return (sub.empty() ? path : path / sub).string(); }
};

void run(const std::string& command) {
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// `n` bytes of the corpus from `offset` (never copied into the repository).
std::string corpus_excerpt(size_t offset, size_t n) {
  INFO("the [hf] tokenizer tests read " << kCorpus << " (README: ../shared/data/tinyshakespeare.txt)");
  REQUIRE(fs::exists(kCorpus));
  return read_file(kCorpus).substr(offset, n);
}

std::string python_script(const char* name) { return "/usr/bin/python3 " + (kReferenceDir / name).string(); }

// A tiny random model folder from hf_reference.py.
std::string make_reference_model(const TempDir& dir, const std::string& name, const std::string& args) {
  const std::string out = dir.str(name);
  run(python_script("hf_reference.py") + " make " + args + " --out " + out);
  return out;
}

using Rows = std::vector<std::vector<double>>;  // [positions][V]

// Reference logits at every position of every sequence.
std::vector<Rows> reference_logits(const TempDir& dir, const std::string& model,
                                   const std::vector<std::vector<Token>>& sequences) {
  const fs::path in = dir.path / "sequences.json", out = dir.path / "logits.json";
  write_file(in, json{{"sequences", sequences}}.dump());
  run(python_script("hf_reference.py") + " logits --model " + model + " --sequences " + in.string() + " --out " +
      out.string());
  return json::parse(read_file(out))["logits"].get<std::vector<Rows>>();
}

std::vector<Token> random_tokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<Token> out(n);
  for (Token& t : out) t = pick(rng);
  return out;
}

TokenTree random_tree(std::mt19937& rng, int n, int vocab) {
  TokenTree tree;
  for (int j = 0; j < n; ++j) {
    tree.parent.push_back(j == 0 ? -1 : std::uniform_int_distribution<int>(-1, j - 1)(rng));
    tree.tokens.push_back(std::uniform_int_distribution<int>(0, vocab - 1)(rng));
  }
  return tree;
}

double max_abs_diff(const float* got, const std::vector<double>& want) {
  double m = 0.0;
  for (size_t v = 0; v < want.size(); ++v) m = std::max(m, std::abs(static_cast<double>(got[v]) - want[v]));
  return m;
}

double largest_observed = 0.0;  // over every reference comparison, for the tolerance comment

// A raw safetensors file: the 8-byte length, `header` as given, then `buffer`.
std::string raw_safetensors(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + buffer;
}

// A unit-scale random Specula model (scaled_transformer.h), saved as a checkpoint.
std::string save_specula_model(const TempDir& dir, const std::string& name, TransformerConfig c, uint64_t seed) {
  Transformer m = scaled_model(c, seed);
  save_checkpoint(dir.str(name), m, CheckpointConfig{});
  return dir.str(name);
}

TransformerConfig small_specula_config() {
  TransformerConfig c;
  c.vocab_size = 256;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // grouped-query attention in the bundled transformer too
  c.d_ff = 48;
  c.max_seq_len = 64;
  c.tie_embeddings = false;
  return c;
}

HfLoadOptions quiet() {
  HfLoadOptions o;
  o.report = false;
  return o;
}

std::vector<float> tree_rows(ModelSession& s, int32_t V, const std::vector<Token>& context, const TokenTree& tree) {
  std::vector<float> out(static_cast<size_t>(tree.size() + 1) * V);
  s.tree_logits(context, tree, out.data());
  return out;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ safetensors

TEST_CASE("safetensors: write -> memory-mapped read round trip", "[hf]") {
  TempDir dir("st-roundtrip");
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x4040};  // bf16 1, -2, 3: odd count, 6 bytes
  const std::vector<int64_t> c = {-1, 1ll << 40};
  const std::string path = dir.str("x.safetensors");
  write_safetensors(path,
                    {{"b.half", SafetensorsDtype::BF16, {3}, b.data()},
                     {"a.float", SafetensorsDtype::F32, {2, 3}, a.data()},
                     {"c.long", SafetensorsDtype::I64, {2}, c.data()}},
                    {{"format", "pt"}});
  const SafetensorsFile f(path);
  REQUIRE(f.tensors().size() == 3);
  CHECK(f.metadata().at("format") == "pt");
  // Largest elements first, so every tensor starts aligned to its element size.
  CHECK(f.tensors()[0].name == "c.long");
  CHECK(f.tensors()[1].name == "a.float");
  CHECK(f.tensors()[2].name == "b.half");
  for (const SafetensorsTensor& t : f.tensors()) CHECK(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0);
  const SafetensorsTensor* ta = f.find("a.float");
  REQUIRE(ta);
  CHECK(ta->dtype == SafetensorsDtype::F32);
  CHECK(ta->shape == std::vector<int64_t>{2, 3});
  CHECK(std::memcmp(ta->data, a.data(), sizeof(float) * a.size()) == 0);
  CHECK(std::memcmp(f.find("b.half")->data, b.data(), 6) == 0);
  CHECK(std::memcmp(f.find("c.long")->data, c.data(), 16) == 0);
  CHECK(f.find("nope") == nullptr);
  // The header is padded to 8 bytes, so the data buffer starts aligned.
  CHECK((f.file_size() - (8 + 6 * 4 + 6 + 16)) % 8 == 0);
}

TEST_CASE("safetensors: truncated or malformed files are errors naming the problem", "[hf]") {
  TempDir dir("st-bad");
  const std::string path = dir.str("bad.safetensors");
  auto open_with = [&](const std::string& bytes) {
    write_file(path, bytes);
    return SafetensorsFile(path);
  };
  const std::string eight(8, 'x'), twelve(12, 'x');
  SECTION("shorter than the length field") {
    CHECK_THROWS_WITH(open_with("abc"), Contains("truncated") && Contains("3 bytes"));
    CHECK_THROWS_WITH(SafetensorsFile(dir.str("missing")), Contains("cannot open"));
    CHECK_THROWS_WITH(SafetensorsFile(dir.str()), Contains("is a folder, not a safetensors file"));
  }
  SECTION("header larger than the file") {
    std::string bytes = raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", eight);
    bytes[0] = static_cast<char>(0xe8);  // claim 1000 header bytes
    bytes[1] = 0x03;
    CHECK_THROWS_WITH(open_with(bytes), Contains("header length 1000 is larger than the file"));
    std::string huge = bytes;
    for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>(0xff);
    CHECK_THROWS_WITH(open_with(huge), Contains("larger than the file"));
  }
  SECTION("truncated data") {
    const std::vector<float> v(16, 1.0f);
    write_safetensors(path, {{"w", SafetensorsDtype::F32, {4, 4}, v.data()}});
    std::string bytes = read_file(path);
    bytes.resize(bytes.size() - 10);
    CHECK_THROWS_WITH(open_with(bytes),
                      Contains("tensor 'w'") && Contains("extend past the data buffer") && Contains("truncated"));
  }
  SECTION("overlapping offsets") {
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                                twelve)),
                      Contains("'a' [0, 8) and 'b' [4, 12) overlap"));
  }
  SECTION("unknown dtype") {
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", eight)),
                      Contains("tensor 'a'") && Contains("unknown dtype 'F17'"));
  }
  SECTION("byte count that disagrees with dtype x shape") {
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight)),
                      Contains("span 8 bytes but F32 [3] needs 12"));
  }
  SECTION("bytes that belong to no tensor") {
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                                twelve)),
                      Contains("bytes [4, 8) belong to no tensor"));
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight)),
                      Contains("trailing bytes"));
  }
  SECTION("not JSON, not an object, bad fields") {
    CHECK_THROWS_WITH(open_with(raw_safetensors("{\"a\": [1, 2", "")), Contains("malformed header JSON"));
    CHECK_THROWS_WITH(open_with(raw_safetensors("[1, 2, 3]  ", "")), Contains("does not start with '{'"));
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight)),
                      Contains("non-negative"));
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight)),
                      Contains("'data_offsets' must be") || Contains("end before they begin"));
    CHECK_THROWS_WITH(open_with(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2]}})", eight)),
                      Contains("'data_offsets' must be [begin, end]"));
  }
}

TEST_CASE("safetensors: random corruptions are errors or valid files, never crashes", "[hf]") {
  TempDir dir("st-fuzz");
  const std::vector<float> a(24, 0.5f);
  const std::vector<uint16_t> b(7, 0x3c00);
  const std::string good_path = dir.str("good.safetensors"), path = dir.str("fuzz.safetensors");
  write_safetensors(good_path,
                    {{"a", SafetensorsDtype::F32, {4, 6}, a.data()}, {"b", SafetensorsDtype::F16, {7}, b.data()}});
  const std::string good = read_file(good_path);
  std::mt19937 rng(17);
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 600; ++trial) {
    std::string bytes = good;
    const int kind = trial % 3;
    if (kind == 0) {  // truncate anywhere
      bytes.resize(std::uniform_int_distribution<size_t>(0, good.size() - 1)(rng));
    } else {  // overwrite 1-3 bytes, mostly in the length field and the header
      const int n = std::uniform_int_distribution<int>(1, 3)(rng);
      const size_t limit = kind == 1 ? 8 + 100 : good.size() - 1;
      for (int i = 0; i < n; ++i)
        bytes[std::uniform_int_distribution<size_t>(0, limit)(rng)] =
            static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    write_file(path, bytes);
    try {
      const SafetensorsFile f(path);
      ++opened;
      for (const SafetensorsTensor& t : f.tensors()) {  // whatever opens stays inside the file
        CHECK(t.bytes == static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype));
        CHECK(t.offset + t.bytes <= f.file_size());
      }
    } catch (const Error&) {
      ++refused;
    }
  }
  CHECK(refused > 300);
  CHECK(opened > 0);  // e.g. a changed digit of a value inside a tensor's data
}

// ------------------------------------------------------------------------------------------------ config.json

TEST_CASE("hf config: the Llama family is read; other architectures and settings are refused by name", "[hf]") {
  const json llama = {{"architectures", {"LlamaForCausalLM"}},
                      {"vocab_size", 100},
                      {"hidden_size", 64},
                      {"intermediate_size", 96},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 8},
                      {"num_key_value_heads", 2},
                      {"max_position_embeddings", 8192},
                      {"rms_norm_eps", 1e-5},
                      {"rope_theta", 500000.0},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", true}};
  const HfConfig c = hf_config_from_json(llama, "config.json", 4096);
  CHECK(c.model.kv_heads() == 2);
  CHECK(c.model.head_dim() == 8);
  CHECK(c.model.max_seq_len == 4096);  // capped
  CHECK(c.model.tie_embeddings);
  CHECK_FALSE(c.model.qkv_bias);
  CHECK(c.model.rope_theta == 500000.0);

  json qwen = llama;
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  CHECK(hf_config_from_json(qwen, "config.json", 4096).model.qkv_bias);
  json mistral = llama;
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = 1024;
  CHECK(hf_config_from_json(mistral, "config.json", 4096).model.max_seq_len == 1024);  // exact below the window

  auto with = [&](const char* key, const json& value) {
    json j = llama;
    j[key] = value;
    return j;
  };
  CHECK_THROWS_WITH(hf_config_from_json(with("architectures", {"GPT2LMHeadModel"}), "m/config.json", 4096),
                    Contains("m/config.json") && Contains("unsupported architecture 'GPT2LMHeadModel'") &&
                        Contains("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM"));
  CHECK_THROWS_WITH(hf_config_from_json(with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "c", 4096),
                    Contains("rope_scaling type 'yarn' is not supported (supported: linear, llama3)"));
  CHECK_THROWS_WITH(hf_config_from_json(with("rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}), "c", 4096),
                    Contains("'dynamic' is not supported"));
  CHECK_THROWS_WITH(hf_config_from_json(with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}), "c", 4096),
                    Contains("llama3 rope_scaling needs 'low_freq_factor'"));
  CHECK_THROWS_WITH(hf_config_from_json(with("hidden_act", "gelu"), "c", 4096), Contains("hidden_act \"gelu\""));
  CHECK_THROWS_WITH(hf_config_from_json(with("attention_bias", true), "c", 4096), Contains("attention_bias"));
  CHECK_THROWS_WITH(hf_config_from_json(with("head_dim", 16), "c", 4096), Contains("head_dim 16"));
  CHECK_THROWS_WITH(hf_config_from_json(with("num_key_value_heads", 3), "c", 4096),
                    Contains("not a multiple of n_kv_heads 3"));
  // Sizes past the engine's bounds (whose products would wrap the memory check), under this file's names.
  CHECK_THROWS_WITH(hf_config_from_json(with("hidden_size", 1 << 30), "c", 4096),
                    Contains("c: hidden_size must be <= 1048576, got 1073741824"));
  CHECK_THROWS_WITH(hf_config_from_json(with("intermediate_size", 1431655679), "c", 4096),
                    Contains("c: intermediate_size must be <= 4194304"));
  CHECK_THROWS_WITH(hf_config_from_json(with("num_hidden_layers", 5000), "c", 4096),
                    Contains("c: num_hidden_layers must be <= 4096"));
  CHECK_THROWS_WITH(hf_config_from_json(with("sliding_window", -5), "c", 4096),
                    Contains("c: sliding_window must be >= 0 (0 or absent: none), got -5"));
  json missing = llama;
  missing.erase("hidden_size");
  CHECK_THROWS_WITH(hf_config_from_json(missing, "c", 4096), Contains("missing field 'hidden_size'"));

  // Through load_language_model: the error names the file.
  TempDir dir("config");
  fs::create_directories(dir.path / "gpt2");
  write_file(dir.path / "gpt2" / "config.json", with("architectures", {"GPT2LMHeadModel"}).dump());
  CHECK_THROWS_WITH(load_language_model("hf:" + dir.str("gpt2"), "target"),
                    Contains("gpt2/config.json") && Contains("unsupported architecture 'GPT2LMHeadModel'"));
  CHECK_THROWS_WITH(load_language_model("hf:" + dir.str("nope"), "target"), Contains("no such folder"));
  CHECK_THROWS_WITH(load_language_model("hf:", "target"), Contains("needs a Hugging Face model folder"));
}

TEST_CASE("hf config: RoPE scaling frequencies follow transformers' rules", "[hf]") {
  RopeScaling none;
  const std::vector<double> base = rope_inverse_frequencies(16, 10000.0, none);
  REQUIRE(base.size() == 8);
  CHECK(base[0] == 1.0);
  CHECK(base[1] == Approx(std::pow(10000.0, -2.0 / 16)).epsilon(1e-15));
  RopeScaling linear;
  linear.type = "linear";
  linear.factor = 4.0;
  const std::vector<double> lin = rope_inverse_frequencies(16, 10000.0, linear);
  for (size_t i = 0; i < base.size(); ++i) CHECK(lin[i] == Approx(base[i] / 4.0).epsilon(1e-15));
  RopeScaling llama3;
  llama3.type = "llama3";
  llama3.factor = 8.0;
  llama3.low_freq_factor = 1.0;
  llama3.high_freq_factor = 4.0;
  llama3.original_max_position_embeddings = 32;
  const std::vector<double> l3 = rope_inverse_frequencies(16, 10000.0, llama3);
  // Wavelengths 2 pi / f: i = 0 is 6.3 < 32 / 4 (kept), i = 1 is 19.9 (smoothed), i >= 2 exceed 32 (divided).
  CHECK(l3[0] == base[0]);
  const double smooth = (32.0 / (2 * M_PI / base[1]) - 1.0) / 3.0;
  CHECK(l3[1] == Approx((1 - smooth) * base[1] / 8.0 + smooth * base[1]).epsilon(1e-15));
  for (size_t i = 2; i < base.size(); ++i) CHECK(l3[i] == Approx(base[i] / 8.0).epsilon(1e-15));
}

// ------------------------------------------------------------------------------------------------ models

TEST_CASE("hf models match an independent PyTorch reference, chunk and tree forwards", "[hf]") {
  TempDir dir("reference");
  struct Case {
    const char* name;
    std::string args;
    int32_t vocab;
  };
  // Llama: bf16, GQA, untied, llama3 RoPE scaling; Mistral: fp32, linear RoPE scaling; Qwen2: fp16, 2 shards,
  // q/k/v biases, tied embeddings.
  const std::vector<Case> cases = {
      {"llama", "--arch llama --dtype bf16 --vocab 384 --seed 11", 384},
      {"mistral", "--arch mistral --dtype fp32 --vocab 300 --seed 12", 300},
      {"qwen2", "--arch qwen2 --dtype fp16 --shards 2 --vocab 320 --seed 13", 320},
  };
  for (const Case& c : cases) {
    INFO("model: " << c.name);
    const std::string model_dir = make_reference_model(dir, c.name, c.args);
    const auto model = load_hf_language_model(model_dir, quiet());
    REQUIRE(model->vocab_size() == c.vocab);
    CHECK_THAT(model->description(), Contains("hf:" + model_dir));

    std::mt19937 rng(5);
    const std::vector<Token> sequence = random_tokens(rng, 48, c.vocab);  // past the llama3 original context 32
    const std::vector<Token> context(sequence.begin(), sequence.begin() + 21);
    const TokenTree tree = random_tree(rng, 12, c.vocab);
    std::vector<std::vector<Token>> sequences = {sequence};
    for (int32_t j = 0; j < tree.size(); ++j) {
      std::vector<Token> s = context;
      for (Token t : tree.path(j)) s.push_back(t);
      sequences.push_back(s);
    }
    const std::vector<Rows> ref = reference_logits(dir, model_dir, sequences);
    REQUIRE(ref.size() == sequences.size());

    // Chunk forwards: a session fed growing prefixes runs each new chunk against its KV cache.
    auto session = model->new_session();
    std::vector<float> row(c.vocab);
    double worst = 0.0;
    for (size_t n : {1, 2, 7, 8, 20, 33, 47, 48}) {
      session->next_logits(std::vector<Token>(sequence.begin(), sequence.begin() + n), row.data());
      worst = std::max(worst, max_abs_diff(row.data(), ref[0][n - 1]));
    }
    CHECK(worst < kTol);
    largest_observed = std::max(largest_observed, worst);

    // One tree forward: row 0 after the context, row j + 1 after context + path(j).
    auto tree_session = model->new_session();
    const std::vector<float> rows = tree_rows(*tree_session, c.vocab, context, tree);
    worst = max_abs_diff(rows.data(), ref[0][context.size() - 1]);
    for (int32_t j = 0; j < tree.size(); ++j)
      worst = std::max(worst, max_abs_diff(rows.data() + (j + 1) * c.vocab, ref[j + 1].back()));
    CHECK(worst < kTol);
    largest_observed = std::max(largest_observed, worst);
    // Negative control: node 1's row is not node 0's reference.
    CHECK(max_abs_diff(rows.data() + 2 * c.vocab, ref[1].back()) > 100 * kTol);
  }
  WARN("largest |logit difference| vs the float64 reference: " << largest_observed);

  // Negative control for the RoPE scaling: the same Llama weights without rope_scaling differ.
  const fs::path plain = dir.path / "llama-unscaled";
  fs::create_directories(plain);
  fs::copy_file(dir.path / "llama" / "model.safetensors", plain / "model.safetensors");
  json config = json::parse(read_file(dir.path / "llama" / "config.json"));
  config.erase("rope_scaling");
  write_file(plain / "config.json", config.dump());
  std::mt19937 rng(5);
  const std::vector<Token> sequence = random_tokens(rng, 48, 384);
  const std::vector<Rows> ref = reference_logits(dir, dir.str("llama"), {sequence});
  std::vector<float> row(384);
  load_hf_language_model(plain.string(), quiet())->new_session()->next_logits(sequence, row.data());
  CHECK(max_abs_diff(row.data(), ref[0].back()) > 100 * kTol);
}

TEST_CASE("export -> import round trip of a Specula model: identical logits", "[hf]") {
  TempDir dir("export");
  const std::string checkpoint = save_specula_model(dir, "specula", small_specula_config(), 3);
  export_hf_checkpoint(checkpoint, dir.str("hf32"));
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    CHECK(fs::exists(dir.path / "hf32" / f));
  const json config = json::parse(read_file(dir.path / "hf32" / "config.json"));
  CHECK(config["architectures"][0] == "LlamaForCausalLM");
  CHECK(config["num_key_value_heads"] == 2);
  CHECK(SafetensorsFile(dir.str("hf32/model.safetensors")).find("model.layers.1.self_attn.k_proj.weight")->shape ==
        std::vector<int64_t>{16, 32});

  const auto original = load_language_model("transformer:" + checkpoint, "target");
  const auto imported = load_hf_language_model(dir.str("hf32"), quiet());
  REQUIRE(imported->vocab_size() == 256);
  std::mt19937 rng(9);
  const std::vector<Token> context = random_tokens(rng, 30, 256);
  const TokenTree tree = random_tree(rng, 10, 256);
  auto a = original->new_session(), b = imported->new_session();
  CHECK(tree_rows(*a, 256, context, tree) == tree_rows(*b, 256, context, tree));  // bit for bit

  // The exported folder, read by the independent reference, gives the same logits too.
  const std::vector<Token> seq(context.begin(), context.begin() + 17);
  const std::vector<Rows> ref = reference_logits(dir, dir.str("hf32"), {seq});
  std::vector<float> row(256);
  b->next_logits(seq, row.data());
  CHECK(max_abs_diff(row.data(), ref[0].back()) < kTol);

  // The tokenizer written next to it is the byte tokenizer.
  const auto tokenizer = load_tokenizer_for("hf:" + dir.str("hf32"));
  REQUIRE(tokenizer);
  const std::string text("Caf\xc3\xa9 \xff\x00 ok\n", 12);  // a NUL byte too
  std::vector<Token> bytes;
  for (unsigned char ch : text) bytes.push_back(ch);
  CHECK(tokenizer->encode(text) == bytes);
  CHECK(tokenizer->decode(bytes) == text);

  SECTION("bfloat16 export stores BF16 and stays close") {
    HfExportOptions bf16;
    bf16.dtype = "bfloat16";
    export_hf_checkpoint(checkpoint, dir.str("hf16"), bf16);
    CHECK(SafetensorsFile(dir.str("hf16/model.safetensors")).find("model.embed_tokens.weight")->dtype ==
          SafetensorsDtype::BF16);
    auto c = load_hf_language_model(dir.str("hf16"), quiet())->new_session();
    std::vector<float> x(256), y(256);
    a->next_logits(seq, x.data());
    c->next_logits(seq, y.data());
    double diff = 0.0;
    for (int v = 0; v < 256; ++v) diff = std::max(diff, std::abs(double(x[v]) - y[v]));
    CHECK(diff > 0.0);  // rounded weights
    CHECK(diff < 0.5);  // bf16 keeps 8 bits: ~0.4% per weight, a few tenths on logits of ~10
  }
  SECTION("bad export requests") {
    HfExportOptions bad;
    bad.dtype = "int8";
    CHECK_THROWS_WITH(export_hf_checkpoint(checkpoint, dir.str("x"), bad), Contains("dtype 'int8' is not float32"));
    CHECK_THROWS_WITH(export_hf_checkpoint(dir.str("missing"), dir.str("x")), Contains("no such folder"));
  }
}

TEST_CASE("hf loading refuses bad weights, devices and models too large for memory, with the numbers", "[hf]") {
  TempDir dir("refuse");
  const std::string checkpoint = save_specula_model(dir, "specula", small_specula_config(), 4);
  export_hf_checkpoint(checkpoint, dir.str("good"));
  const std::string weights = dir.str("good/model.safetensors");

  // A copy of the good folder whose weights are rewritten by `edit` (name, dtype, shape, bytes).
  auto variant = [&](const std::string& name,
                     const std::function<void(std::vector<SafetensorsWriteTensor>&, std::vector<std::string>&)>& edit) {
    const fs::path out = dir.path / name;
    fs::create_directories(out);
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(dir.path / "good" / f, out / f, fs::copy_options::overwrite_existing);
    const SafetensorsFile good(weights);
    std::vector<SafetensorsWriteTensor> tensors;
    std::vector<std::string> storage;
    storage.reserve(good.tensors().size() + 4);
    for (const SafetensorsTensor& t : good.tensors()) {
      storage.emplace_back(reinterpret_cast<const char*>(t.data), t.bytes);
      tensors.push_back({t.name, t.dtype, t.shape, nullptr});
    }
    edit(tensors, storage);
    for (size_t i = 0; i < tensors.size(); ++i)
      if (!tensors[i].data) tensors[i].data = storage[i].data();
    write_safetensors((out / "model.safetensors").string(), tensors);
    return out.string();
  };
  auto find = [](std::vector<SafetensorsWriteTensor>& ts, const std::string& name) -> size_t {
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].name == name) return i;
    FAIL("no tensor " << name);
    return 0;
  };

  SECTION("missing and unexpected tensors") {
    const std::string missing = variant("missing", [&](auto& ts, auto& st) {
      const size_t i = find(ts, "model.layers.1.mlp.up_proj.weight");
      ts.erase(ts.begin() + i);
      st.erase(st.begin() + i);
    });
    CHECK_THROWS_WITH(load_hf_language_model(missing, quiet()),
                      Contains("missing tensor 'model.layers.1.mlp.up_proj.weight'"));
    const std::string extra = variant("extra", [&](auto& ts, auto& st) {
      st.push_back(std::string(16, '\0'));
      ts.push_back({"model.layers.0.self_attn.o_proj.bias", SafetensorsDtype::F32, {4}, nullptr});
    });
    CHECK_THROWS_WITH(load_hf_language_model(extra, quiet()),
                      Contains("unexpected tensor 'model.layers.0.self_attn.o_proj.bias'"));
    // A config of a model far larger than its weights is refused by the numbers, before the model is built.
    const std::string larger = variant("larger", [](auto&, auto&) {});
    nlohmann::json config = nlohmann::json::parse(read_file(larger + "/config.json"));
    config["intermediate_size"] = config["intermediate_size"].get<int>() * 64;
    std::ofstream(larger + "/config.json", std::ios::trunc) << config.dump();
    CHECK_THROWS_WITH(load_hf_language_model(larger, quiet()),
                      Contains("model.safetensors hold 31904 numbers, but config.json describes ") &&
                          Contains("the config does not match the weights"));
  }
  SECTION("wrong dtype, wrong shape, NaN") {
    const std::string ints =
        variant("ints", [&](auto& ts, auto&) { ts[find(ts, "model.norm.weight")].dtype = SafetensorsDtype::I32; });
    CHECK_THROWS_WITH(load_hf_language_model(ints, quiet()),
                      Contains("tensor 'model.norm.weight' is I32; weights must be F32, F16 or BF16"));
    const std::string shape = variant("shape", [&](auto& ts, auto&) {
      ts[find(ts, "model.layers.0.mlp.down_proj.weight")].shape = {48, 32};  // transposed
    });
    CHECK_THROWS_WITH(
        load_hf_language_model(shape, quiet()),
        Contains("'model.layers.0.mlp.down_proj.weight' has shape [48, 32] but config.json implies [32, 48]"));
    const std::string nan = variant("nan", [&](auto& ts, auto& st) {
      const float x = std::nanf("");
      std::memcpy(st[find(ts, "model.norm.weight")].data(), &x, 4);
    });
    CHECK_THROWS_WITH(load_hf_language_model(nan, quiet()), Contains("'model.norm.weight' holds NaN or inf"));
  }
  SECTION("no weights, a broken index, a tokenizer larger than the model") {
    fs::create_directories(dir.path / "noweights");
    fs::copy_file(dir.path / "good" / "config.json", dir.path / "noweights" / "config.json");
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("noweights"), quiet()),
                      Contains("no model.safetensors or model.safetensors.index.json"));
    write_file(dir.path / "noweights" / "model.safetensors.index.json",
               json{{"weight_map", {{"model.norm.weight", "shard-1.safetensors"}}}}.dump());
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("noweights"), quiet()),
                      Contains("shard-1.safetensors: missing weight shard"));
    json config = json::parse(read_file(dir.path / "good" / "config.json"));
    config["vocab_size"] = 200;
    fs::create_directories(dir.path / "small-vocab");
    write_file(dir.path / "small-vocab" / "config.json", config.dump());
    fs::copy_file(dir.path / "good" / "tokenizer.json", dir.path / "small-vocab" / "tokenizer.json");
    fs::copy_file(weights, dir.path / "small-vocab" / "model.safetensors");
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("small-vocab"), quiet()),
                      Contains("the tokenizer has 256 tokens but config.json vocab_size is 200"));
  }
  SECTION("memory") {
    HfLoadOptions o = quiet();
    o.memory_available = 100000;
    const HfMemoryPlan plan = plan_hf_memory(dir.str("good"), o);
    CHECK(plan.parameters == small_specula_config().parameter_count());
    CHECK(plan.parameter_bytes == 4 * plan.parameters);
    CHECK(plan.kv_cache_bytes == 2 * 2 * 2 * 64 * 8 * 4);  // k and v, 2 layers, 2 kv heads, 64 positions, D = 8
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("good"), o),
                      Contains(std::to_string(plan.parameters) + " parameters") && Contains("97.66 KiB is available"));
    o.memory_available = plan.total();
    CHECK_NOTHROW(load_hf_language_model(dir.str("good"), o));
    // Kept in bfloat16, the matrices are built as kept, block by block: the plan counts 2 bytes a matrix element
    // and one block's float32 build, and a load the float32 plan would refuse fits.
    o.weights_dtype = "bfloat16";
    const HfMemoryPlan bf16 = plan_hf_memory(dir.str("good"), o);
    CHECK(bf16.build_bytes > 0);
    CHECK(bf16.total() < plan.total());
    CHECK(bf16.parameter_bytes < 3 * plan.parameters);
    o.memory_available = bf16.total();
    const auto model = load_hf_language_model(dir.str("good"), o);
    const auto& transformer = dynamic_cast<const TransformerLanguageModel&>(*model);
    CHECK(transformer.matrices_dtype() == "bfloat16");
    CHECK(transformer.resident_weight_bytes() == bf16.parameter_bytes + bf16.buffer_bytes);
    o.weights_dtype = "float32";
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("good"), o), Contains("is available"));
  }
  SECTION("device") {
    HfLoadOptions o = quiet();
    o.device = "tpu";
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("good"), o), Contains("device 'tpu'"));
    if (!torch::cuda::is_available()) {
      o.device = "cuda";
      CHECK_THROWS_WITH(load_hf_language_model(dir.str("good"), o),
                        Contains("device 'cuda': this LibTorch cannot use CUDA"));
    }
    // A bad SPECULA_STEP_GRAPHS is refused on the CPU too, where graphs never run.
    ::setenv("SPECULA_STEP_GRAPHS", "maybe", 1);
    CHECK_THROWS_WITH(load_hf_language_model(dir.str("good"), quiet()),
                      Contains("SPECULA_STEP_GRAPHS must be on or off, got 'maybe'"));
    ::unsetenv("SPECULA_STEP_GRAPHS");
  }
}

TEST_CASE("greedy speculation with an hf: target equals greedy decoding", "[hf]") {
  TempDir dir("greedy");
  const std::string target_dir = make_reference_model(dir, "target", "--arch llama --dtype fp32 --vocab 300 --seed 21");
  const std::string draft_dir =
      make_reference_model(dir, "draft", "--arch llama --dtype fp32 --vocab 300 --seed 22 --layers 1");
  const auto target = load_hf_language_model(target_dir, quiet());
  const auto small = load_hf_language_model(draft_dir, quiet());
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 24;
  const Generator baseline(target, greedy, nullptr, ar);
  const std::vector<std::vector<Token>> prompts = {{5}, {1, 2, 3, 4}, {299, 0, 17, 17, 42, 8}};
  struct Spec {
    const char* name;
    std::shared_ptr<const LanguageModel> draft;
    VerifyMethod method;
    std::vector<int32_t> shape;
  };
  const std::vector<Spec> specs = {{"same model, greedy", target, VerifyMethod::greedy, {}},
                                   {"same model, chain", target, VerifyMethod::chain, {}},
                                   {"1-layer draft, chain", small, VerifyMethod::chain, {}},
                                   {"1-layer draft, tree 2,2", small, VerifyMethod::tree, {2, 2}}};
  for (const Spec& s : specs) {
    INFO(s.name);
    GenerationConfig config = ar;
    config.method = s.method;
    config.num_draft_tokens = 4;
    config.tree_shape = s.shape;
    config.tree_sampling = SiblingScheme::deterministic;
    const Generator spec(target, greedy, std::make_shared<ModelDrafterFactory>(s.draft, greedy), config);
    int64_t accepted = 0;
    for (const auto& prompt : prompts) {
      GenerationMetrics m1, m2;
      const SequenceOutput out = spec.generate(prompt, 1, m2);
      CHECK(out.tokens == baseline.generate(prompt, 1, m1).tokens);
      for (int32_t a : out.accept_lengths) accepted += a;
    }
    if (s.draft == target) CHECK(accepted > 0);  // the same model's drafts are all accepted
  }
}

TEST_CASE("16-bit folders stay 16-bit: half the resident weight bytes of float32, as stored under auto", "[hf]") {
  TempDir dir("resident");
  // bf16 matrices with float32 norms, as many real folders keep them: auto reads the matrices' dtype.
  const std::string mixed = make_reference_model(dir, "mixed", "--arch llama --dtype bf16 --norms-fp32 --vocab 512");
  const std::string fp16 = make_reference_model(dir, "fp16", "--arch llama --dtype fp16 --vocab 512");
  auto load = [&](const std::string& folder, const std::string& dtype) {
    HfLoadOptions o = quiet();
    o.weights_dtype = dtype;
    return std::dynamic_pointer_cast<const TransformerLanguageModel>(load_hf_language_model(folder, o));
  };
  for (const std::string& folder : {mixed, fp16}) {
    INFO(folder);
    const auto as_stored = load(folder, "auto"), widened = load(folder, "float32");
    REQUIRE(as_stored);
    REQUIRE(widened);
    CHECK(as_stored->matrices_dtype() == (folder == mixed ? "bfloat16" : "float16"));
    CHECK(widened->matrices_dtype() == "float32");
    // Matrices are nearly all of the bytes; norms and the RoPE tables stay float32.
    const double ratio = static_cast<double>(as_stored->resident_weight_bytes()) / widened->resident_weight_bytes();
    CHECK(ratio > 0.5);
    CHECK(ratio < 0.56);
  }
}

// ------------------------------------------------------------------------------------------------ tokenizers

TEST_CASE("byte-level BPE matches the GPT-2-algorithm reference on a corpus excerpt", "[hf]") {
  TempDir dir("bpe");
  const std::string excerpt = corpus_excerpt(300000, 6000);  // held out from the merges' training bytes
  write_file(dir.path / "excerpt.txt", excerpt);
  for (const char* style : {"llama3", "qwen2"}) {
    INFO("style " << style);
    const std::string tok = dir.str(std::string(style) + ".json");
    run(python_script("bpe_reference.py") + " train --corpus " + kCorpus.string() +
        " --bytes 20000 --merges 200 --style " + style + " --out " + tok);
    const ByteLevelBpeTokenizer t(tok);
    run(python_script("bpe_reference.py") + " encode --tokenizer " + tok + " --input " + dir.str("excerpt.txt") +
        " --out " + dir.str("ids.json"));
    const std::vector<Token> want = json::parse(read_file(dir.path / "ids.json"))["ids"].get<std::vector<Token>>();
    const std::vector<Token> got = t.encode(excerpt);
    CHECK(got == want);
    CHECK(got.size() < 0.6 * excerpt.size());  // the merges are used (~1.8 bytes per token with 200 of them)
    CHECK(t.decode(got) == excerpt);

    // Special tokens in the text are single ids; the reference agrees on the text around them.
    const std::string special = std::string(style) == "llama3" ? "<|eot_id|>" : "<|im_end|>";
    const std::string chat = "Who's there?" + special + "\nNay, answer me: stand, and unfold yourself." + special;
    write_file(dir.path / "chat.txt", chat);
    run(python_script("bpe_reference.py") + " encode --tokenizer " + tok + " --input " + dir.str("chat.txt") +
        " --out " + dir.str("chat.json"));
    const std::vector<Token> chat_ids = t.encode(chat);
    CHECK(chat_ids == json::parse(read_file(dir.path / "chat.json"))["ids"].get<std::vector<Token>>());
    const Token special_id = t.vocab_size() - 1;  // the last added token of either style
    CHECK(std::count(chat_ids.begin(), chat_ids.end(), special_id) == 2);
    CHECK(chat_ids.back() == special_id);
    CHECK(t.decode(chat_ids) == chat);

    // Any bytes survive, invalid UTF-8 included (every byte has a byte-level token).
    const std::string odd = "caf\xc3\xa9 \xf0\x9f\x99\x82 \xff\xfe\x80 end\r\n\t ";
    CHECK(t.decode(t.encode(odd)) == odd);
    CHECK_THROWS_WITH(t.decode({t.vocab_size()}), Contains("outside the vocabulary"));
  }
}

TEST_CASE("byte-level BPE: template BOS, NFC, load_tokenizer_for(hf:DIR)", "[hf]") {
  TempDir dir("bpe-details");
  for (const char* style : {"llama3", "qwen2"})
    run(python_script("bpe_reference.py") + " train --corpus " + kCorpus.string() +
        " --bytes 20000 --merges 200 --style " + style + " --out " + dir.str(std::string(style) + ".json"));
  {  // Llama 3 style: BOS from the template, dropped by decode
    const ByteLevelBpeTokenizer t(dir.str("llama3.json"));
    const std::vector<Token> ids = t.encode("To be");
    REQUIRE(t.template_prefix().size() == 1);
    CHECK(ids.front() == t.template_prefix()[0]);
    CHECK(ids.front() == t.vocab_size() - 2);  // <|begin_of_text|>
    CHECK(t.decode(ids) == "To be");
    // A literal BOS in the text stays text: the second one decodes.
    CHECK(t.decode(t.encode("<|begin_of_text|>x")) == "<|begin_of_text|>x");
    CHECK(t.encode("e\xcc\x81") != t.encode("\xc3\xa9"));  // no normalizer: the NFC check below means something
  }
  {  // Qwen2 style: NFC normalizer, no BOS
    const ByteLevelBpeTokenizer t(dir.str("qwen2.json"));
    CHECK(t.template_prefix().empty());
    CHECK(t.encode("e\xcc\x81") == t.encode("\xc3\xa9"));  // e + combining acute == precomposed
  }
  {  // load_tokenizer_for(hf:DIR) reads tokenizer.json
    const std::string excerpt = corpus_excerpt(300000, 6000);
    fs::create_directories(dir.path / "folder");
    fs::copy_file(dir.path / "llama3.json", dir.path / "folder" / "tokenizer.json");
    const auto t = load_tokenizer_for("hf:" + dir.str("folder"));
    REQUIRE(t);
    CHECK(t->name() == "bpe");
    CHECK(t->decode(t->encode(excerpt)) == excerpt);
    CHECK(load_tokenizer_for("hf:" + dir.str()) == nullptr);  // a folder with no tokenizer
  }
}

TEST_CASE("byte-level BPE: byte fallback, merge order, unsupported tokenizer.json", "[hf]") {
  const auto& alphabet = byte_level_alphabet();
  CHECK(alphabet['a'] == "a");
  CHECK(alphabet[' '] == "\xc4\xa0");   // U+0120 'Ġ'
  CHECK(alphabet['\n'] == "\xc4\x8a");  // U+010A 'Ċ'

  // A vocabulary without most bytes, but with <0xXX> tokens: symbols outside it fall back to bytes.
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}, {"bc", 5}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 6 + b;
  }
  json tokenizer = {{"added_tokens", json::array({{{"id", 262}, {"content", "<eos>"}, {"special", true}}})},
                    {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
                    {"decoder", {{"type", "ByteLevel"}}},
                    {"model",
                     {{"type", "BPE"},
                      {"byte_fallback", true},
                      {"vocab", vocab},
                      {"merges", {"b c", "a b", "ab c"}}}}};  // "b c" ranks first
  const ByteLevelBpeTokenizer t(tokenizer, "hand-made tokenizer.json");
  CHECK(t.vocab_size() == 263);
  CHECK(t.encode("abc") == std::vector<Token>{0, 5});  // b+c merges first, so "ab" never forms
  CHECK(t.encode("ab") == std::vector<Token>{3});
  CHECK(t.encode("a!") == std::vector<Token>{0, 6 + '!'});
  CHECK(t.encode("\xc3\xa9") == std::vector<Token>{6 + 0xc3, 6 + 0xa9});  // é as its two UTF-8 bytes
  CHECK(t.encode("ab<eos>c") == std::vector<Token>{3, 262, 2});
  CHECK(t.decode({0, 6 + '!', 6 + 0xc3, 6 + 0xa9, 262}) == "a!\xc3\xa9<eos>");

  SECTION("no fallback: an error naming the symbol") {
    json no_fallback = tokenizer;
    no_fallback["model"]["byte_fallback"] = false;
    const ByteLevelBpeTokenizer strict(no_fallback, "t.json");
    CHECK_THROWS_WITH(strict.encode("a!"), Contains("cannot encode '!'"));
  }
  SECTION("unsupported files are refused by name") {
    json metaspace = tokenizer;
    metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}};
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(metaspace, "t.json"),
                      Contains("pre-tokenizer 'Metaspace' is not supported"));
    json no_byte_level = tokenizer;
    no_byte_level.erase("pre_tokenizer");
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(no_byte_level, "t.json"), Contains("not a byte-level BPE"));
    json unigram = tokenizer;
    unigram["model"]["type"] = "Unigram";
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(unigram, "t.json"), Contains("model type 'Unigram' is not supported"));
    json lower = tokenizer;
    lower["normalizer"] = {{"type", "Lowercase"}};
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(lower, "t.json"), Contains("normalizer 'Lowercase' is not supported"));
    json bad_regex = tokenizer;
    bad_regex["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(bad_regex, "t.json"), Contains("cannot compile pre-tokenizer regex"));
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer("/nonexistent/tokenizer.json"), Contains("cannot open tokenizer"));
  }
  SECTION("merges: the tokenizers library's rules") {
    json repeated = tokenizer;  // "b c" again, last: it now ranks after "a b" and "ab c", so "abc" is one token
    repeated["model"]["merges"] = {"b c", "a b", "ab c", "b c"};
    CHECK(ByteLevelBpeTokenizer(repeated, "t.json").encode("abc") == std::vector<Token>{4});
    json header = tokenizer;  // merges.txt's header line, skipped
    header["model"]["merges"] = {"#version: 0.2", "b c", "a b", "ab c"};
    CHECK(ByteLevelBpeTokenizer(header, "t.json").encode("abc") == std::vector<Token>{0, 5});
    json pairs = tokenizer;  // the newer [left, right] form
    pairs["model"]["merges"] =
        json::array({json::array({"b", "c"}), json::array({"a", "b"}), json::array({"ab", "c"})});
    CHECK(ByteLevelBpeTokenizer(pairs, "t.json").encode("abc") == std::vector<Token>{0, 5});
    for (const auto& [merge, missing] : std::vector<std::pair<json, std::string>>{
             {"a x", "'x'"}, {"x a", "'x'"}, {"c a", "'ca'"}, {json::array({"ab", "b"}), "'abb'"}}) {
      json outside = tokenizer;
      outside["model"]["merges"] = {"b c", merge};
      CHECK_THROWS_WITH(ByteLevelBpeTokenizer(outside, "t.json"),
                        Contains("t.json: model.merges[1] '") && Contains(missing + " is not in model.vocab"));
    }
    json three = tokenizer;
    three["model"]["merges"] = {"a b c"};
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(three, "t.json"),
                      Contains("t.json: model.merges[0] 'a b c' is not two symbols"));
  }
  SECTION("two vocabulary entries of one id are refused, naming both") {
    json twice = tokenizer;
    twice["model"]["vocab"]["bc"] = 3;  // "ab"'s id
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(twice, "t.json"),
                      Contains("t.json: vocab entries 'ab' and 'bc' both have id 3"));
  }
  SECTION("an id far past the tokens the file defines is refused, not made the size of the pieces' table") {
    json far = tokenizer;  // 262 entries: ids up to 2 x 262 + 1024 are read as holes, past that refused
    far["model"]["vocab"]["abc"] = 2000000000;
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(far, "t.json"),
                      Contains("t.json: vocab entry 'abc' has id 2000000000, far past the 262 entries of model.vocab"));
    json far_added = tokenizer;
    far_added["added_tokens"][0]["id"] = 2000000000;
    CHECK_THROWS_WITH(ByteLevelBpeTokenizer(far_added, "t.json"),
                      Contains("t.json: added token") && Contains("id must be an integer in [0, 1550)"));
    json holes = tokenizer;
    holes["added_tokens"][0]["id"] = 1500;
    CHECK(ByteLevelBpeTokenizer(holes, "t.json").vocab_size() == 1501);
  }
}

TEST_CASE("SentencePiece tokenizer.model matches spm_encode; byte fallback; user-defined symbols", "[hf]") {
  TempDir dir("spm");
  write_file(dir.path / "train.txt", corpus_excerpt(0, 60000));
  run("spm_train --input=" + dir.str("train.txt") + " --model_prefix=" + dir.str("sp") +
      " --vocab_size=600 --model_type=bpe --byte_fallback=true --character_coverage=1.0"
      " --normalization_rule_name=identity --remove_extra_whitespaces=false --split_digits=true"
      " --user_defined_symbols='<|sep|>' --minloglevel=2 > " +
      dir.str("spm_train.log") + " 2>&1");
  fs::create_directories(dir.path / "folder");
  fs::copy_file(dir.path / "sp.model", dir.path / "folder" / "tokenizer.model");
  write_file(dir.path / "folder" / "tokenizer_config.json", R"({"add_bos_token": false})");

  // Held-out lines, and a few that need byte fallback or hold the user-defined symbol.
  std::istringstream held_out(corpus_excerpt(500000, 8000));
  std::vector<std::string> lines;
  for (std::string line; std::getline(held_out, line);)
    if (!line.empty()) lines.push_back(line);
  lines.push_back(
      "Na\xc3\xafve caf\xc3\xa9 \xf0\x9f\x99\x82 \xe2\x82\xac"
      "5 <|sep|> KING 1599:");
  lines.push_back("  two  spaces  and\ttabs ");
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_file(dir.path / "lines.txt", text);
  run("spm_encode --model=" + dir.str("sp.model") + " --output_format=id < " + dir.str("lines.txt") + " > " +
      dir.str("ids.txt"));

  const auto t = load_tokenizer_for("hf:" + dir.str("folder"));
  REQUIRE(t);
  CHECK(t->name() == "sentencepiece");
  CHECK(t->vocab_size() == 600);
  std::istringstream ids(read_file(dir.path / "ids.txt"));
  size_t i = 0;
  for (std::string line; std::getline(ids, line); ++i) {
    REQUIRE(i < lines.size());
    INFO("line " << i << ": " << lines[i]);
    std::vector<Token> want;
    std::istringstream fields(line);
    for (Token id; fields >> id;) want.push_back(id);
    const std::vector<Token> got = t->encode(lines[i]);
    CHECK(got == want);
    CHECK(t->decode(got) == lines[i]);
  }
  CHECK(i == lines.size());

  const SentencePieceTokenizer plain(dir.str("sp.model"), false, false);
  const std::vector<Token> odd = plain.encode("\xf0\x9f\x99\x82");  // 🙂: not in the training text
  CHECK(odd.size() >= 4);  // its four UTF-8 bytes as <0xXX> pieces (after the dummy-prefix piece)
  CHECK(plain.decode(odd) == "\xf0\x9f\x99\x82");
  const std::vector<Token> sep = plain.encode("<|sep|>");
  CHECK(std::count(sep.begin(), sep.end(), 3) == 1);  // user-defined symbols follow <unk>, <s>, </s>
  CHECK_THROWS_WITH(plain.decode({600}), Contains("outside the vocabulary"));

  SECTION("BOS by default (transformers' LlamaTokenizer), dropped by decode as a control piece") {
    const SentencePieceTokenizer llama_style(dir.str("sp.model"), true, false);
    const std::vector<Token> with_bos = llama_style.encode("To be");
    CHECK(with_bos.front() == 1);
    CHECK(std::vector<Token>(with_bos.begin() + 1, with_bos.end()) == plain.encode("To be"));
    CHECK(llama_style.decode(with_bos) == "To be");
  }
  SECTION("errors") {
    write_file(dir.path / "broken.model", "not a protobuf");
    CHECK_THROWS_WITH(SentencePieceTokenizer(dir.str("broken.model"), true, false),
                      Contains("broken.model: cannot load SentencePiece model"));
    write_file(dir.path / "folder" / "tokenizer_config.json", R"({"add_bos_token": "yes"})");
    CHECK_THROWS_WITH(load_tokenizer_for("hf:" + dir.str("folder")), Contains("'add_bos_token' must be true or false"));
  }
}

}  // namespace specula
