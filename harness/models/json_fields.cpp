#include "harness/models/json_fields.h"

#include <filesystem>
#include <fstream>

#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

namespace specula {

using nlohmann::json;

json read_json_file(const std::string& path, const std::string& missing) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a folder, not a file");
  std::ifstream in(path);
  if (!in) fail(path, ": ", missing);
  try {
    return parse_bounded_json(in);
  } catch (const json::exception& e) {
    fail(path, ": malformed JSON: ", e.what());
  }
}

const json& json_field(const json& j, const std::string& key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) fail(where, ": missing field '", key, "'");
  return *it;
}

const json* json_field_if_set(const json& j, const std::string& key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t json_integer(const json& v, const std::string& key, const std::string& where) {
  if (!v.is_number_integer()) fail(where, ": field '", key, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

double json_number(const json& v, const std::string& key, const std::string& where) {
  if (!v.is_number()) fail(where, ": field '", key, "' must be a number, got ", v.dump());
  return v.get<double>();
}

std::string json_string(const json& v, const std::string& key, const std::string& where) {
  if (!v.is_string()) fail(where, ": field '", key, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

bool json_bool(const json& v, const std::string& key, const std::string& where) {
  if (!v.is_boolean()) fail(where, ": field '", key, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}

void reject_unknown_json_fields(const json& j, const std::set<std::string>& known, const std::string& where) {
  for (const auto& item : j.items())
    if (!known.count(item.key())) fail(where, ": unknown field '", item.key(), "'");
}

}  // namespace specula
