// Reading a tokenizer.json into ByteLevelBpeTokenizer: its model, added tokens, normalizer, pre-tokenizer and
// post-processor, each checked as supported; and byte_tokenizer_json, the byte tokenizer written as one.
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "harness/models/hf/bpe_tokenizer.h"
#include "harness/models/hf/bpe_tokenizer_impl.h"
#include "harness/models/json_fields.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern (the ByteLevel pre-tokenizer's use_regex).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `\s` and `\S` as Unicode White_Space (what Oniguruma, the tokenizers library's engine, matches; ICU's own
// `\s` is [\t\n\f\r\p{Z}] and misses U+000B and U+0085).
std::string white_space_as_unicode(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      out += c == 's' ? "\\p{White_Space}" : c == 'S' ? "\\P{White_Space}" : std::string{'\\', c};
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

SplitStep compile(const std::string& source, const std::string& where) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  const icu::UnicodeString pattern = icu::UnicodeString::fromUTF8(white_space_as_unicode(source));
  std::shared_ptr<icu::RegexPattern> p(icu::RegexPattern::compile(pattern, 0, parse_error, status));
  if (U_FAILURE(status) || !p)
    fail(where, ": cannot compile pre-tokenizer regex '", source, "': ", u_errorName(status), " at offset ",
         parse_error.offset);
  return {source, p};
}

const json* get(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string type_of(const json& j, const std::string& where) {
  const json* t = get(j, "type");
  if (!t || !t->is_string()) fail(where, ": missing 'type' in ", j.dump().substr(0, 200));
  return t->get<std::string>();
}

}  // namespace

void ByteLevelBpeTokenizer::Impl::parse_pre_tokenizer(const json& p, bool& byte_level) {
  const std::string type = type_of(p, where + ": pre_tokenizer");
  if (type == "Sequence") {
    const json* steps = get(p, "pretokenizers");
    if (!steps || !steps->is_array()) fail(where, ": pre_tokenizer Sequence needs 'pretokenizers'");
    for (const json& s : *steps) parse_pre_tokenizer(s, byte_level);
  } else if (type == "ByteLevel") {
    if (get(p, "add_prefix_space") && (*get(p, "add_prefix_space")).get<bool>())
      fail(where, ": ByteLevel add_prefix_space = true is not supported");
    byte_level = true;
    const json* use_regex = get(p, "use_regex");
    if (!use_regex || use_regex->get<bool>()) splits.push_back(compile(kGpt2Pattern, where));
  } else if (type == "Split") {
    const json* behavior = get(p, "behavior");
    if (!behavior || *behavior != "Isolated")
      fail(where, ": Split behavior ", behavior ? behavior->dump() : "null", " is not supported (only \"Isolated\")");
    if (get(p, "invert") && get(p, "invert")->get<bool>()) fail(where, ": Split with invert = true is not supported");
    const json* pattern = get(p, "pattern");
    if (pattern && get(*pattern, "Regex") && get(*pattern, "Regex")->is_string())
      splits.push_back(compile(get(*pattern, "Regex")->get<std::string>(), where));
    else if (pattern && get(*pattern, "String") && get(*pattern, "String")->is_string())
      splits.push_back(compile("\\Q" + get(*pattern, "String")->get<std::string>() + "\\E", where));
    else
      fail(where, ": Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
  } else if (type == "Digits") {
    const json* individual = get(p, "individual_digits");
    splits.push_back(compile(individual && individual->get<bool>() ? "\\p{N}" : "\\p{N}+", where));
  } else {
    fail(where, ": pre-tokenizer '", type, "' is not supported (supported: ByteLevel, Split, Digits, Sequence)");
  }
}

void ByteLevelBpeTokenizer::Impl::parse_post_processor(const json& p) {
  const std::string type = type_of(p, where + ": post_processor");
  if (type == "Sequence") {
    const json* steps = get(p, "processors");
    if (!steps || !steps->is_array()) fail(where, ": post_processor Sequence needs 'processors'");
    for (const json& s : *steps) parse_post_processor(s);
  } else if (type == "TemplateProcessing") {
    const json* single = get(p, "single");
    const json* specials = get(p, "special_tokens");
    if (!single || !single->is_array()) fail(where, ": TemplateProcessing needs 'single'");
    bool seen_sequence = false;
    for (const json& item : *single) {
      if (get(item, "Sequence")) {
        seen_sequence = true;
        continue;
      }
      const json* special = get(item, "SpecialToken");
      if (!special || !get(*special, "id")) fail(where, ": TemplateProcessing item ", item.dump(), " not understood");
      const std::string name = get(*special, "id")->get<std::string>();
      const json* entry = specials ? get(*specials, name.c_str()) : nullptr;
      if (!entry || !get(*entry, "ids"))
        fail(where, ": TemplateProcessing names special token '", name, "' without ids");
      for (const json& id : *get(*entry, "ids")) (seen_sequence ? suffix : prefix).push_back(id.get<Token>());
    }
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets
    fail(where, ": post-processor '", type, "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
}

// model: type BPE, its options, vocab, merges (ranked in order) and unk_token.
void ByteLevelBpeTokenizer::Impl::parse_model(const json& model_json) {
  const json* model = &model_json;
  const std::string model_type = get(*model, "type") ? type_of(*model, where) : "BPE";
  if (model_type != "BPE") fail(where, ": model type '", model_type, "' is not supported (only BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (get(*model, key) && !get(*model, key)->get<std::string>().empty())
      fail(where, ": BPE '", key, "' is not supported");
  if (get(*model, "dropout") && get(*model, "dropout")->get<double>() != 0.0)
    fail(where, ": BPE dropout is not supported (encoding must be deterministic)");
  ignore_merges = get(*model, "ignore_merges") && get(*model, "ignore_merges")->get<bool>();
  byte_fallback = get(*model, "byte_fallback") && get(*model, "byte_fallback")->get<bool>();

  const json* v = get(*model, "vocab");
  if (!v || !v->is_object()) fail(where, ": model.vocab must be an object");
  // Ids index the pieces' table, so they are bounded by what the file defines: a tokenizer numbers its tokens densely
  // (a few holes at most), and one id of 2e9 must not size a table of two billion strings.
  const int64_t id_bound = 2 * static_cast<int64_t>(v->size()) + 1024;
  std::vector<bool> has_entry;  // by id
  for (const auto& item : v->items()) {
    if (!item.value().is_number_integer() || item.value().get<int64_t>() < 0)
      fail(where, ": vocab entry '", item.key(), "' has id ", item.value().dump());
    if (item.value().get<int64_t>() >= id_bound)
      fail(where, ": vocab entry '", item.key(), "' has id ", item.value().dump(), ", far past the ", v->size(),
           " entries of model.vocab (ids must be below ", id_bound, ")");
    const Token id = item.value().get<Token>();
    vocab[item.key()] = id;
    if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(id + 1), has_entry.resize(id + 1);
    // Two entries of one id would decode that id as either: the file is not one tokenizer.
    if (has_entry[id])
      fail(where, ": vocab entries '", pieces[id], "' and '", item.key(), "' both have id ", id,
           " (model.vocab maps each id to one token)");
    pieces[id] = item.key();
    has_entry[id] = true;
  }
  const json* merges = get(*model, "merges");
  if (merges) {
    if (!merges->is_array()) fail(where, ": model.merges must be an array");
    int32_t rank = 0;
    for (size_t i = 0; i < merges->size(); ++i) {
      const json& m = (*merges)[i];
      std::string left, right;
      if (m.is_string()) {
        const std::string line = m.get<std::string>();
        if (line.rfind("#version", 0) == 0) continue;  // a merges.txt header, skipped and unranked as HF does
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
          fail(where, ": model.merges[", i, "] '", line, "' is not two symbols");
        left = line.substr(0, space), right = line.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>(), right = m[1].get<std::string>();
      } else {
        fail(where, ": model.merges[", i, "] ", m.dump(), " is not \"a b\" or [\"a\", \"b\"]");
      }
      // Both symbols and their join must be tokens, or a merge would build a symbol the vocabulary cannot encode
      // (the tokenizers library refuses such a file: MergeTokenOutOfVocabulary).
      for (const std::string& symbol : {left, right, left + right})
        if (!vocab.count(symbol))
          fail(where, ": model.merges[", i, "] '", left, " ", right, "': '", symbol, "' is not in model.vocab");
      // A repeated merge takes its last rank, as in the tokenizers library (its merge map is collected from the
      // list in order, a later entry replacing an earlier one) and GPT-2's encoder.py (dict(zip(merges, ranks))).
      merge_rank[left + " " + right] = rank++;
    }
  }
  if (const json* u = get(*model, "unk_token")) {
    const auto it = vocab.find(u->get<std::string>());
    if (it == vocab.end()) fail(where, ": unk_token '", u->get<std::string>(), "' is not in the vocabulary");
    unk = it->second;
  }
}

// added_tokens: matched before BPE, longest content first.
void ByteLevelBpeTokenizer::Impl::parse_added_tokens(const json& added_tokens) {
  for (const json& a : added_tokens) {
    if (!get(a, "id") || !get(a, "content")) fail(where, ": added token ", a.dump(), " needs 'id' and 'content'");
    const json& id_value = *get(a, "id");
    const int64_t id_bound = 2 * static_cast<int64_t>(pieces.size() + added_tokens.size()) + 1024;  // as model.vocab's
    if (!id_value.is_number_integer() || id_value.get<int64_t>() < 0 || id_value.get<int64_t>() >= id_bound)
      fail(where, ": added token ", a.dump(), ": id must be an integer in [0, ", id_bound, ") (the tokens defined, ",
           "twice over)");
    const Token id = id_value.get<Token>();
    const std::string content = get(a, "content")->get<std::string>();
    if (content.empty()) fail(where, ": added token ", id, " has empty content");
    added.push_back({content, id});
    added_content[id] = content;
    if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(id + 1);
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < added.size(); ++i)
    added_by_first_byte[static_cast<unsigned char>(added[i].content[0])].push_back(i);
}

// normalizer: one Unicode normal form (alone or as a one-step Sequence), through ICU.
void ByteLevelBpeTokenizer::Impl::parse_normalizer(const json& n) {
  std::string type = type_of(n, where + ": normalizer");
  if (type == "Sequence" && get(n, "normalizers") && get(n, "normalizers")->size() == 1)
    type = type_of((*get(n, "normalizers"))[0], where + ": normalizer");
  UErrorCode status = U_ZERO_ERROR;
  if (type == "NFC")
    normalizer = icu::Normalizer2::getNFCInstance(status);
  else if (type == "NFKC")
    normalizer = icu::Normalizer2::getNFKCInstance(status);
  else if (type == "NFD")
    normalizer = icu::Normalizer2::getNFDInstance(status);
  else if (type == "NFKD")
    normalizer = icu::Normalizer2::getNFKDInstance(status);
  else
    fail(where, ": normalizer '", type, "' is not supported (supported: NFC, NFKC, NFD, NFKD or none)");
  if (U_FAILURE(status)) fail(where, ": ICU has no ", type, " normalizer: ", u_errorName(status));
}

void ByteLevelBpeTokenizer::Impl::parse(const json& j) {
  if (!j.is_object()) fail(where, ": expected a JSON object");
  const json* model = get(j, "model");
  if (!model || !model->is_object()) fail(where, ": missing 'model'");
  parse_model(*model);
  if (const json* added_tokens = get(j, "added_tokens")) parse_added_tokens(*added_tokens);
  vocab_size = static_cast<int32_t>(pieces.size());

  if (const json* n = get(j, "normalizer")) parse_normalizer(*n);

  bool byte_level = false;
  if (const json* p = get(j, "pre_tokenizer")) parse_pre_tokenizer(*p, byte_level);
  if (!byte_level)
    fail(where,
         ": not a byte-level BPE (its pre_tokenizer has no ByteLevel step); SentencePiece-style "
         "tokenizers are read from tokenizer.model");
  if (const json* d = get(j, "decoder")) {
    const std::string type = type_of(*d, where + ": decoder");
    if (type != "ByteLevel")
      fail(where, ": decoder '", type, "' is not supported (byte-level BPE decodes with ByteLevel)");
  }
  if (const json* p = get(j, "post_processor")) parse_post_processor(*p);
  for (Token t : prefix)
    if (t < 0 || t >= vocab_size) fail(where, ": template token id ", t, " is outside the vocabulary");
  for (Token t : suffix)
    if (t < 0 || t >= vocab_size) fail(where, ": template token id ", t, " is outside the vocabulary");

  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) byte_of[alphabet[b]] = static_cast<uint8_t>(b);
}

namespace {

json read_json(const std::string& path) { return read_json_file(path, "cannot open tokenizer"); }

}  // namespace

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(const std::string& path) : ByteLevelBpeTokenizer(read_json(path), path) {}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(const json& tokenizer_json, const std::string& where) {
  auto impl = std::make_shared<Impl>();
  impl->where = where;
  try {
    impl->parse(tokenizer_json);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    fail(where, ": malformed tokenizer: ", e.what());
  }
  impl_ = impl;
}

ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

json byte_tokenizer_json() {
  json vocab = json::object();
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", json::array()}}}};
}

}  // namespace specula
