// JSON a user supplies, parsed with its nesting bounded. nlohmann's parser keeps its own stack, but copying, comparing
// and printing a value recurse once per level: a file of a few hundred kilobytes nested 100,000 deep would overflow the
// stack wherever its value is used (a model's config, a record, a schema). Every reader of such JSON parses it here.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace specula {

// Far beyond any config, record, tokenizer or schema a tool writes; far below what a thread's stack holds.
inline constexpr int kMaxJsonDepth = 256;

// Thrown as a JSON exception, so that every reader's handler of malformed JSON names its file for it too.
class JsonTooDeep : public nlohmann::json::exception {
 public:
  JsonTooDeep()
      : nlohmann::json::exception(
            599, ("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects").c_str()) {}
};

// A key given twice in one object: nlohmann keeps the last without a word, so a hand-edited config's first value
// would be read as if it were not there.
class JsonDuplicateKey : public nlohmann::json::exception {
 public:
  explicit JsonDuplicateKey(const std::string& key)
      : nlohmann::json::exception(598, ("key '" + key + "' is given twice in one object").c_str()) {}
};

// Json::parse(input...) that throws JsonTooDeep past kMaxJsonDepth levels and JsonDuplicateKey for a key repeated in
// one object. `Json`: nlohmann::json or ordered_json.
template <typename Json = nlohmann::json, typename... Input>
Json parse_bounded_json(Input&&... input) {
  using Event = typename Json::parse_event_t;
  // The keys of each object open around the parser's position (a callback is copied: the stack is shared).
  auto keys = std::make_shared<std::vector<std::set<std::string>>>();
  return Json::parse(std::forward<Input>(input)..., [keys](int depth, Event event, Json& parsed) {
    // `depth` counts the arrays and objects around the one that starts: the 257th level starts at depth 256.
    if ((event == Event::array_start || event == Event::object_start) && depth >= kMaxJsonDepth) throw JsonTooDeep();
    if (event == Event::object_start) keys->emplace_back();
    if (event == Event::object_end) keys->pop_back();
    if (event == Event::key && !keys->back().insert(parsed.template get<std::string>()).second)
      throw JsonDuplicateKey(parsed.template get<std::string>());
    return true;
  });
}

}  // namespace specula
