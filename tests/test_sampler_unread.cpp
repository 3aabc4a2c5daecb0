// SamplingParams::unread_because, which generate and sample use to note options that change nothing: each parameter it
// calls unread leaves the processed distribution bit for bit as it was, whatever its value, and the parameters it calls
// read are named case by case (so that "unread" is never said of one that matters, nor missed where it holds).
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "verify/sampling/filter_stages.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/sampling/token_history.h"

using namespace specula;
using Catch::Contains;

namespace {

const std::vector<float> kLogits = {0.5f, 1.0f, -0.25f, 2.0f, 1.75f, -1.0f, 0.0f, 1.5f};

// A valid value other than each parameter's default, which the stage would act on if it read it.
const std::map<std::string, double> kOtherValue = {
    {"min_p", 0.3},  {"top_k", 2},          {"top_p", 0.5},        {"typical_p", 0.4},      {"tfs_z", 0.3},
    {"mirostat", 2}, {"mirostat_tau", 0.7}, {"mirostat_eta", 0.9}, {"dynatemp_range", 0.6}, {"dynatemp_exponent", 3.0}};

void set_parameter(SamplingParams& s, const std::string& name, double value) {
  if (name == "dynatemp_range") s.dynatemp_range = static_cast<float>(value);
  if (name == "dynatemp_exponent") s.dynatemp_exponent = static_cast<float>(value);
  for (const FilterStageRow& row : filter_stages())
    for (const StageParameter& p : row.parameters)
      if (name == p.name) p.set(s, value);
}

std::vector<float> law(const SamplingParams& s) {
  TokenHistory history;
  history.output = {3, 1};
  return SamplerPipeline(s, static_cast<int32_t>(kLogits.size())).process(kLogits, history);
}

}  // namespace

TEST_CASE("a sampler parameter said to be unread changes no processed distribution", "[sampler]") {
  std::vector<std::pair<std::string, SamplingParams>> bases;
  SamplingParams s;
  bases.push_back({"default", s});
  s.temperature = 0.0f;
  s.top_p = 0.9f;
  bases.push_back({"greedy with top_p", s});
  s = SamplingParams{};
  s.temperature = 0.8f;
  s.mirostat = 2;
  bases.push_back({"mirostat", s});
  s = SamplingParams{};
  s.dynatemp_range = 0.5f;
  s.top_k = 5;
  bases.push_back({"dynatemp and top_k", s});
  int unread = 0;
  for (const auto& [base_name, base] : bases)
    for (const auto& [name, value] : kOtherValue) {
      const std::string why = base.unread_because(name);
      if (why.empty()) continue;
      ++unread;
      INFO(base_name << ": " << name << " = " << value << " (" << why << ")");
      SamplingParams changed = base;
      set_parameter(changed, name, value);
      changed.validate(static_cast<int32_t>(kLogits.size()));
      CHECK(law(changed) == law(base));
    }
  CHECK(unread >= 10);  // the loop above checked something
}

TEST_CASE("unread_because: greedy reads no temperature or filter, a stage's further parameters only while it is on",
          "[sampler]") {
  SamplingParams s;
  for (const char* read : {"top_p", "top_k", "min_p", "typical_p", "tfs_z", "mirostat", "dynatemp_range",
                           "sampler_order", "temperature", "repetition_penalty", "logit_bias", "stop_tokens"})
    CHECK(s.unread_because(read).empty());
  CHECK_THAT(s.unread_because("mirostat_tau"), Contains("mirostat is off (mirostat = 0)"));
  CHECK_THAT(s.unread_because("mirostat_eta"), Contains("mirostat is off"));
  CHECK_THAT(s.unread_because("dynatemp_exponent"), Contains("dynamic temperature is off"));
  s.mirostat = 2;
  s.dynatemp_range = 0.5f;
  CHECK(s.unread_because("mirostat_tau").empty());
  CHECK(s.unread_because("mirostat_eta").empty());
  CHECK(s.unread_because("dynatemp_exponent").empty());
  s.temperature = 0.0f;
  for (const char* unread :
       {"top_p", "top_k", "min_p", "mirostat", "mirostat_tau", "dynatemp_range", "dynatemp_exponent", "sampler_order"})
    CHECK_THAT(s.unread_because(unread), Contains("greedy decoding (temperature 0)"));
  // What greedy decoding takes its argmax over is still read.
  for (const char* read : {"temperature", "repetition_penalty", "logit_bias", "banned_tokens", "min_tokens"})
    CHECK(s.unread_because(read).empty());
}
