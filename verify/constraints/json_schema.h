// A JSON Schema subset compiled to a regular expression (verify/constraints/regex.h) that matches exactly
// the compact JSON texts (no whitespace, as json.dumps(separators=(",", ":")) writes) valid under the
// schema, with object properties in the order the schema lists them.
//
// Supported:  type (one or a list of) object, array, string, number, integer, boolean, null; enum; const;
//             object: properties, required (properties not listed are optional; without `required`
//             every property is optional, as JSON Schema says); array: items, minItems, maxItems;
//             string: minLength, maxLength.
// Ignored annotations: title, description, $schema, $id, $comment, default, examples, additionalProperties
//             (properties outside `properties` are never generated, which every setting allows).
// Anything else (anyOf, oneOf, allOf, $ref, pattern, format, minimum, ...) is refused with an Error naming
// the schema, the keyword and its JSON pointer, e.g. "json schema 's.json': at /properties/age: unsupported
// feature 'minimum'".
#pragma once

#include <string>

#include "verify/constraints/regex.h"

namespace specula {

// `schema_json` is the schema's text; `source` names it in errors. Throws Error on malformed JSON (with
// the byte offset) or an unsupported feature.
std::string json_schema_to_regex(const std::string& schema_json, const std::string& source);

// The schema's automaton: json_schema_to_regex compiled by compile_regex. Its errors name the schema, never the
// generated pattern (which can be thousands of bytes and means nothing to the schema's author).
Nfa compile_json_schema(const std::string& schema_json, const std::string& source);

}  // namespace specula
