// JSON a user supplies, parsed with its nesting bounded. nlohmann's parser keeps its own stack, but copying, comparing
// and printing a value recurse once per level: a file of a few hundred kilobytes nested 100,000 deep would overflow the
// stack wherever its value is used (a model's config, a record, a schema). Every reader of such JSON parses it here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

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

// Json::parse(input...) that throws JsonTooDeep past kMaxJsonDepth levels. `Json`: nlohmann::json or ordered_json.
template <typename Json = nlohmann::json, typename... Input>
Json parse_bounded_json(Input&&... input) {
  using Event = typename Json::parse_event_t;
  return Json::parse(std::forward<Input>(input)..., [](int depth, Event event, Json&) {
    // `depth` counts the arrays and objects around the one that starts: the 257th level starts at depth 256.
    if ((event == Event::array_start || event == Event::object_start) && depth >= kMaxJsonDepth) throw JsonTooDeep();
    return true;
  });
}

}  // namespace specula
