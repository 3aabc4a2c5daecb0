#include "verify/constraints/json_schema.h"

#include <nlohmann/json.hpp>
#include <set>

#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"
#include "verify/constraints/regex.h"

namespace specula {
namespace {

using Json = nlohmann::ordered_json;

// One character of a JSON string: unescaped (not '"', '\' or a control character) or an escape. \u
// escapes of UTF-16 surrogates (d800-dfff) are not generated: characters beyond the BMP come as UTF-8.
const char* kStringChar =
    R"(([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u([0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))))";
const char* kInteger = R"(-?(0|[1-9][0-9]*))";
const char* kNumber = R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)";

// The longest expression a schema may compile to. Nested arrays and optional object members write what they hold twice
// (an array's first item and the rest, each branch of which member comes first), so a schema of a few hundred bytes
// can ask for gigabytes; the check at each node stops the growth there. The bound refuses nothing the regex compiler
// would take: no expression written here spends more than 16 bytes on one NFA state (the widest atom, the class of a
// string's unescaped characters, is 14 bytes), so a longer one needs more than kMaxNfaStates states.
constexpr size_t kMaxSchemaPatternBytes = size_t{16} * kMaxNfaStates;

class SchemaCompiler {
 public:
  explicit SchemaCompiler(std::string source) : source_(std::move(source)) {}

  std::string compile(const Json& schema, const std::string& at) {
    std::string out = compile_node(schema, at);
    bounded(out.size(), at);
    return out;
  }

 private:
  std::string compile_node(const Json& schema, const std::string& at) {
    if (schema.is_boolean()) unsupported(at, schema.get<bool>() ? "true (any value)" : "false (no value)");
    if (!schema.is_object()) error(at, "a schema must be a JSON object, got ", schema.dump());
    static const std::set<std::string> known = {"type",  "enum",     "const",    "properties", "required",
                                                "items", "minItems", "maxItems", "minLength",  "maxLength"};
    static const std::set<std::string> annotations = {"title",    "description", "$schema",  "$id",
                                                      "$comment", "default",     "examples", "additionalProperties"};
    for (const auto& item : schema.items())
      if (!known.count(item.key()) && !annotations.count(item.key())) unsupported(at, "'" + item.key() + "'");
    if (schema.contains("const")) return literal(schema["const"]);
    if (schema.contains("enum")) {
      const Json& values = schema["enum"];
      if (!values.is_array() || values.empty()) error(at + "/enum", "'enum' must be a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < values.size(); ++i) out += (i ? "|" : "") + literal(values[i]);
      return out + ")";
    }
    if (!schema.contains("type")) unsupported(at, "a schema without 'type', 'enum' or 'const' (any value)");
    const Json& type = schema["type"];
    if (type.is_string()) return of_type(schema, type.get<std::string>(), {type.get<std::string>()}, at);
    if (!type.is_array() || type.empty()) error(at + "/type", "'type' must be a string or a non-empty array");
    std::set<std::string> types;
    for (size_t i = 0; i < type.size(); ++i) {
      if (!type[i].is_string()) error(at + "/type/" + std::to_string(i), "a type name must be a string");
      types.insert(type[i].get<std::string>());
    }
    std::string out = "(";
    for (size_t i = 0; i < type.size(); ++i)
      out += (i ? "|" : "") + of_type(schema, type[i].get<std::string>(), types, at);
    return out + ")";
  }

  // Checked at every node and, inside an object, as its branches grow (they are quadratic in its optional members).
  void bounded(size_t bytes, const std::string& at) const {
    if (bytes > kMaxSchemaPatternBytes)
      error(at, "the schema's regular expression passes ", kMaxSchemaPatternBytes, " bytes here (", bytes,
            "): nested arrays and optional members repeat what they hold, and its automaton would need more than ",
            kMaxNfaStates, " states; nest less deeply, or make fewer members optional");
  }

  template <typename... Parts>
  [[noreturn]] void error(const std::string& at, const Parts&... parts) const {
    fail("json schema '", source_, "': at ", at.empty() ? "/" : at, ": ", parts...);
  }
  [[noreturn]] void unsupported(const std::string& at, const std::string& feature) const {
    error(at, "unsupported feature ", feature,
          " (supported: type, enum, const, properties, required, items, minItems, maxItems, minLength, maxLength)");
  }

  static std::string literal(const Json& value) { return "(" + regex_escape(value.dump()) + ")"; }

  int64_t count(const Json& schema, const char* key, const std::string& at, int64_t fallback) const {
    if (!schema.contains(key)) return fallback;
    const Json& v = schema[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      error(at + "/" + key, "'", key, "' must be a non-negative integer, got ", v.dump());
    if (v.get<int64_t>() > 10000) error(at + "/" + key, "'", key, "' = ", v.dump(), " is too large (at most 10000)");
    return v.get<int64_t>();
  }

  // `item` repeated between lo and hi (-1 = unbounded) times, separated by `sep`. At most one is the item alone: the
  // form below would write it a second time under {0,0}, text without states.
  static std::string separated(const std::string& item, const std::string& sep, int64_t lo, int64_t hi) {
    if (hi == 0) return "";
    if (hi == 1) return lo == 0 ? "(" + item + ")?" : item;
    const std::string more = "(" + sep + item + ")";
    if (lo == 0) {
      return "(" + item + more + (hi < 0 ? "*" : "{0," + std::to_string(hi - 1) + "}") + ")?";
    }
    return item + more + "{" + std::to_string(lo - 1) + "," + (hi < 0 ? "" : std::to_string(hi - 1)) + "}";
  }

  // One type of the schema's `types`. A keyword of another type applies to that type's values alone, as JSON Schema
  // reads it ({"type": ["string", "null"], "maxLength": 3}); one of a type the schema does not list is refused.
  std::string of_type(const Json& schema, const std::string& type, const std::set<std::string>& types,
                      const std::string& at) {
    auto only_for = [&](std::initializer_list<const char*> keys, const char* owner) {
      for (const char* k : keys)
        if (schema.contains(k) && !types.count(owner))
          error(at + "/" + k, "'", k, "' applies to type ", owner, ", not ", type);
    };
    only_for({"properties", "required"}, "object");
    only_for({"items", "minItems", "maxItems"}, "array");
    only_for({"minLength", "maxLength"}, "string");
    if (type == "string") {
      const int64_t lo = count(schema, "minLength", at, 0), hi = count(schema, "maxLength", at, -1);
      if (hi >= 0 && lo > hi) error(at, "minLength ", lo, " > maxLength ", hi);
      std::string reps =
          lo == 0 && hi < 0 ? "*" : "{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}";
      return "(\"" + std::string(kStringChar) + reps + "\")";
    }
    if (type == "number") return std::string("(") + kNumber + ")";
    if (type == "integer") return std::string("(") + kInteger + ")";
    if (type == "boolean") return "(true|false)";
    if (type == "null") return "(null)";
    if (type == "array") {
      if (!schema.contains("items")) unsupported(at, "an array without 'items' (items of any value)");
      const int64_t lo = count(schema, "minItems", at, 0), hi = count(schema, "maxItems", at, -1);
      if (hi >= 0 && lo > hi) error(at, "minItems ", lo, " > maxItems ", hi);
      return "(\\[" + separated(compile(schema["items"], at + "/items"), ",", lo, hi) + "\\])";
    }
    if (type == "object") return object(schema, at);
    error(at + "/type", "unknown type '", type, "' (known: object, array, string, number, integer, boolean, null)");
  }

  std::string object(const Json& schema, const std::string& at) {
    std::vector<std::string> members;
    std::vector<bool> required;
    std::set<std::string> names;
    if (schema.contains("properties")) {
      const Json& props = schema["properties"];
      if (!props.is_object()) error(at + "/properties", "'properties' must be an object");
      for (const auto& item : props.items()) {
        names.insert(item.key());
        members.push_back(regex_escape(Json(item.key()).dump()) + ":" +
                          compile(item.value(), at + "/properties/" + item.key()));
        required.push_back(false);
      }
    }
    if (schema.contains("required")) {
      const Json& req = schema["required"];
      if (!req.is_array()) error(at + "/required", "'required' must be an array of property names");
      for (const Json& name : req) {
        if (!name.is_string() || !names.count(name.get<std::string>()))
          error(at + "/required", "required property ", name.dump(), " is not listed in 'properties'");
        size_t i = 0;
        for (const auto& item : schema["properties"].items()) {
          if (item.key() == name.get<std::string>()) required[i] = true;
          ++i;
        }
      }
    }
    // Members in schema order; optional ones may be left out. The first member present has no leading
    // comma, so branch on which member comes first (none can come before the first required one).
    const size_t n = members.size();
    size_t first_required = n;
    for (size_t i = 0; i < n; ++i)
      if (required[i]) {
        first_required = i;
        break;
      }
    std::string body;
    for (size_t k = 0; k < n && k <= first_required; ++k) {
      body += (k ? "|" : "") + members[k];
      for (size_t j = k + 1; j < n; ++j) {
        body += "(," + members[j] + ")" + (required[j] ? "" : "?");
        bounded(body.size(), at);
      }
    }
    if (first_required == n)
      body = n == 0 ? "" : "(" + body + ")?";
    else
      body = "(" + body + ")";
    return "(\\{" + body + "\\})";
  }

  std::string source_;
};

}  // namespace

std::string json_schema_to_regex(const std::string& schema_json, const std::string& source) {
  Json schema;
  try {
    schema = parse_bounded_json<Json>(schema_json);
  } catch (const nlohmann::json::parse_error& e) {
    fail("json schema '", source, "': byte ", e.byte, ": not valid JSON (", e.what(), ")");
  } catch (const nlohmann::json::exception& e) {  // nested too deep, a number past a double's range (1e400)
    fail("json schema '", source, "': ", e.what());
  }
  return SchemaCompiler(source).compile(schema, "");
}

Nfa compile_json_schema(const std::string& schema_json, const std::string& source) {
  const std::string pattern = json_schema_to_regex(schema_json, source);
  try {
    return compile_regex(pattern);
  } catch (const Error& e) {
    const std::string message = e.what(), prefix = "regex '" + pattern + "': ";
    fail("json schema '", source, "': its regular expression (", pattern.size(),
         " bytes): ", message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message);
  }
}

}  // namespace specula
