#include "harness/runner/run_inputs.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "harness/io/differing_lines.h"
#include "harness/io/file_checksum.h"
#include "harness/io/input_file.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

namespace specula {
namespace fs = std::filesystem;

namespace {

// Files up to this size are checksummed whole (a bundled target's weights take a fraction of a second); larger ones
// (a multi-gigabyte hf: model) by evenly spaced blocks of kBlock bytes, so a resume stays cheap.
constexpr uint64_t kWholeUpTo = uint64_t{256} << 20;
constexpr uint64_t kBlock = uint64_t{1} << 20;
// The most files one path may contribute (a folder is walked recursively): bounds the work a stray folder can cause.
constexpr int kMaxFilesPerPath = 1000;

// A model folder's notes (its README.md), which no model reads.
bool is_note(const fs::path& path) { return path.extension() == ".md"; }

nlohmann::json fingerprint(const fs::path& path) {
  const FileChecksum c = file_sampled_checksum(path.string(), kWholeUpTo, kBlock);
  return {{"bytes", c.bytes}, {"crc32", crc32_hex(c.crc32)}, {"crc32_of", c.bytes <= kWholeUpTo ? "whole" : "blocks"}};
}

// The files under a path: the file itself, or a folder's files at any depth, each by its path as written below `path`.
// Left out of a folder: hidden entries (.git) and notes (*.md: a model folder's README), which no model reads, so that
// editing them does not stop a resume.
void add_files(const fs::path& path, nlohmann::json& files) {
  if (fs::is_regular_file(path)) {
    files[path.string()] = fingerprint(path);
    return;
  }
  if (!fs::is_directory(path)) return;
  int count = 0;
  for (auto it = fs::recursive_directory_iterator(path); it != fs::recursive_directory_iterator(); ++it) {
    if (it->path().filename().string().rfind('.', 0) == 0) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || is_note(it->path())) continue;
    if (++count > kMaxFilesPerPath)
      fail(path.string(), ": more than ", kMaxFilesPerPath, " files to fingerprint; is this the model's folder?");
    files[it->path().string()] = fingerprint(it->path());
  }
}

// The files a model or drafter spec names: after "kind:", each comma-separated item that names a path, or whose value
// after '=' does (medusa:DIR,tree=FILE,target=DIR). Specs that name no path (synthetic:, prompt-lookup) have none.
nlohmann::json spec_files(const std::string& spec) {
  nlohmann::json files = nlohmann::json::object();
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return files;
  const std::string rest = spec.substr(colon + 1);
  for (size_t from = 0; from <= rest.size();) {
    const size_t comma = std::min(rest.find(',', from), rest.size());
    std::string item = rest.substr(from, comma - from);
    if (item.find('=') != std::string::npos) item = item.substr(item.find('=') + 1);
    std::error_code ec;
    if (!item.empty() && fs::exists(item, ec)) add_files(item, files);
    from = comma + 1;
  }
  return files;
}

}  // namespace

nlohmann::json run_inputs(const ExperimentConfig& config, const std::vector<std::vector<int32_t>>& prompts) {
  nlohmann::json j;
  j["prompts"] = prompts;
  nlohmann::json models = nlohmann::json::object();
  std::vector<std::string> specs = {config.target};
  for (const std::string& drafter : config.axes.at("draft.drafter")) specs.push_back(drafter);
  for (const std::string& spec : specs) {
    try {
      models[spec] = spec_files(spec);
    } catch (const std::exception& e) {
      fail("model '", spec, "': cannot fingerprint its files for inputs.json: ", e.what());
    }
  }
  j["models"] = models;
  // The constraints' files: a schema or token strings edited in place would change what the settings decode.
  nlohmann::json files = nlohmann::json::object();
  for (const char* key : {"sampling.json_schema", "sampling.token_strings"})
    if (config.axes.count(key))
      for (const std::string& value : config.axes.at(key))
        if (value != "none") add_files(value, files);
  j["files"] = files;
  // The configuration as config.resolved.ini writes it: a resume that finds that file edited would mix records of two
  // runs (compared with the file itself, so that a later version writing it otherwise does not refuse the resume).
  j["configuration"] = configuration_compared(config.resolved_ini());
  return j;
}

std::string configuration_compared(const std::string& resolved_ini) {
  // Without comments (the first names the file it was read from; a shard's names the shard) and the cost profile's
  // path (a resume reads the folder's copy; the profile predicts, it decodes nothing).
  std::istringstream in(resolved_ini);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#' && line[0] != ';' && line.rfind("cost_profile = ", 0) != 0) out += line + "\n";
  return out;
}

nlohmann::json read_run_inputs(const fs::path& file, const std::string& what) {
  nlohmann::json j;
  try {
    j = parse_bounded_json(read_input_file(file.string(), what));
  } catch (const nlohmann::json::exception& e) {
    fail(file.string(), ": not the JSON a run writes (", e.what(), ")");
  }
  if (!j.is_object() || !j.contains("prompts") || !j.at("prompts").is_array())
    fail(file.string(), ": not the JSON a run writes (no list of prompts)");
  return j;
}

nlohmann::json without_notes(const nlohmann::json& inputs) {
  nlohmann::json out = inputs;
  if (!out.contains("models") || !out["models"].is_object()) return out;
  for (auto& [spec, files] : out["models"].items()) {
    if (!files.is_object()) continue;
    for (auto it = files.begin(); it != files.end();) it = is_note(it.key()) ? files.erase(it) : std::next(it);
  }
  return out;
}

void check_inputs_unchanged(const fs::path& dir, const nlohmann::json& now) {
  const fs::path path = dir / "inputs.json";
  if (!fs::exists(path)) return;
  const std::string where = "run --resume: " + dir.string();
  const std::string advice = ": a resumed run decodes what its records were decoded from; start a new run instead";
  const nlohmann::json was = without_notes(read_run_inputs(path, "run --resume"));
  const nlohmann::json& p0 = was.at("prompts");
  const nlohmann::json& p1 = now.at("prompts");
  if (p0.size() != p1.size())
    fail(where, ": the run began with ", p0.size(), " prompts and its configuration now gives ", p1.size(), advice);
  for (size_t i = 0; i < p0.size(); ++i)
    if (p0[i] != p1[i])
      fail(where, ": prompt ", i + 1, " (prompt_index ", i, ") is not the one the run began with (its file changed)",
           advice);
  // Its configuration (a folder begun before it was kept has none to compare).
  const std::string resolved = (dir / "config.resolved.ini").string();
  const std::string file_now =
      was.contains("configuration") ? configuration_compared(read_input_file(resolved, "run --resume")) : "";
  if (was.contains("configuration") && was.at("configuration").is_string() && was.at("configuration") != file_now) {
    const auto lines = first_differing_lines(was.at("configuration").get<std::string>(), file_now);
    if (!lines) fail(where, ": ", resolved, " was edited since the run began", advice);  // both are whole lines
    fail(where, ": ", resolved, " was edited since the run began ('", lines->second, "' where it began with '",
         lines->first, "')", advice);
  }
  // Each file the run began with must be there unchanged, and no file added where a folder was fingerprinted.
  const auto compare = [&](const std::string& what, const nlohmann::json& before, const nlohmann::json& after) {
    for (const auto& [name, print] : after.items()) {
      if (!before.contains(name)) fail(where, ": ", what, "file '", name, "' is new since the run began", advice);
      if (before.at(name) != print)
        fail(where, ": ", what, "file '", name, "' is not the one the run began with", advice);
    }
    for (const auto& [name, print] : before.items())
      if (!after.contains(name)) fail(where, ": ", what, "file '", name, "' is gone", advice);
  };
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& m0 = was.contains("models") ? was.at("models") : none;
  // Both sides as the rule reads them (a spec may name a .md file itself, which a run fingerprints).
  const nlohmann::json now_read = without_notes(now);
  for (const auto& [spec, files] : now_read.at("models").items())
    if (m0.contains(spec)) compare("model '" + spec + "': ", m0.at(spec), files);
  compare("", was.contains("files") ? was.at("files") : none, now.at("files"));
}

}  // namespace specula
