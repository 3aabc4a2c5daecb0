#include "harness/runner/run_inputs.h"

#include <nlohmann/json.hpp>

#include "harness/io/file_checksum.h"
#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {
namespace fs = std::filesystem;

namespace {

// A file's fingerprint: its size and the CRC-32 of its first and last MiB. Retraining a model rewrites its weights from
// the first bytes to the last, so it changes the fingerprint; reading 2 MiB keeps a resume of a multi-gigabyte model
// cheap. The modification time is left out, so a folder copied or checked out again still resumes.
nlohmann::json file_fingerprint(const fs::path& path) {
  const FileChecksum c = file_edges_checksum(path.string(), uint64_t{1} << 20);
  return {{"bytes", c.bytes}, {"edges_crc32", crc32_hex(c.crc32)}};
}

// The files a model or drafter spec names: the path after "kind:" (up to a ',' of options), a file or the files
// directly in a folder. Specs that name no path (synthetic:, prompt-lookup) have none.
nlohmann::json spec_files(const std::string& spec) {
  nlohmann::json files = nlohmann::json::object();
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return files;
  const std::string rest = spec.substr(colon + 1);
  const fs::path path = rest.substr(0, rest.find(','));
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    files[path.filename().string()] = file_fingerprint(path);
  } else if (fs::is_directory(path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path))
      if (e.is_regular_file()) files[e.path().filename().string()] = file_fingerprint(e.path());
  }
  return files;
}

}  // namespace

std::string run_inputs_json(const ExperimentConfig& config, const std::vector<std::vector<int32_t>>& prompts) {
  nlohmann::json j;
  j["prompts"] = prompts;
  nlohmann::json models = nlohmann::json::object();
  models[config.target] = spec_files(config.target);
  for (const std::string& drafter : config.axes.at("draft.drafter")) models[drafter] = spec_files(drafter);
  j["models"] = models;
  return j.dump() + "\n";
}

void check_inputs_unchanged(const fs::path& dir, const std::string& inputs_json) {
  const fs::path path = dir / "inputs.json";
  if (!fs::exists(path)) return;
  const std::string where = "run --resume: " + dir.string();
  const std::string advice = ": a resumed run decodes what its records were decoded from; start a new run instead";
  nlohmann::json was;
  try {
    was = nlohmann::json::parse(read_input_file(path.string(), "run --resume"));
  } catch (const nlohmann::json::exception& e) {
    fail(path.string(), ": not the JSON a run writes (", e.what(), ")");
  }
  const nlohmann::json now = nlohmann::json::parse(inputs_json);
  const nlohmann::json& p0 = was.value("prompts", nlohmann::json::array());
  const nlohmann::json& p1 = now.at("prompts");
  if (p0.size() != p1.size())
    fail(where, ": the run began with ", p0.size(), " prompts and its configuration now gives ", p1.size(), advice);
  for (size_t i = 0; i < p0.size(); ++i)
    if (p0[i] != p1[i]) fail(where, ": prompt ", i, " is not the one the run began with (its file changed)", advice);
  const nlohmann::json& m0 = was.value("models", nlohmann::json::object());
  for (const auto& [spec, files] : now.at("models").items()) {
    if (!m0.contains(spec)) continue;
    for (const auto& [name, fingerprint] : files.items())
      if (!m0.at(spec).contains(name) || m0.at(spec).at(name) != fingerprint)
        fail(where, ": model '", spec, "': file '", name, "' is not the one the run began with", advice);
    for (const auto& [name, fingerprint] : m0.at(spec).items())
      if (!files.contains(name)) fail(where, ": model '", spec, "': file '", name, "' is gone", advice);
  }
}

}  // namespace specula
