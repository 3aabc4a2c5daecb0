// Reading the fields of JSON config files (checkpoint, head and Hugging Face configs) with errors that name
// where (the file, or file: section), the field and the value found.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace specula {

// The JSON document in `path`; throws "path: <missing>" when it cannot be opened, "path: malformed JSON: ..."
// when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& missing);

// j[key]; throws "where: missing field 'key'" when j has no such key.
const nlohmann::json& json_field(const nlohmann::json& j, const std::string& key, const std::string& where);
// j[key], or nullptr when it is absent or null (configs that write null for "not set").
const nlohmann::json* json_field_if_set(const nlohmann::json& j, const std::string& key);

// The value `v` of field `key` as each type; throws "where: field 'key' must be ..., got VALUE" otherwise.
int64_t json_integer(const nlohmann::json& v, const std::string& key, const std::string& where);
double json_number(const nlohmann::json& v, const std::string& key, const std::string& where);
std::string json_string(const nlohmann::json& v, const std::string& key, const std::string& where);
bool json_bool(const nlohmann::json& v, const std::string& key, const std::string& where);

// Throws "where: unknown field 'k'" for the first field of j not in `known`.
void reject_unknown_json_fields(const nlohmann::json& j, const std::set<std::string>& known, const std::string& where);

}  // namespace specula
