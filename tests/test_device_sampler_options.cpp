// Every sampler option on the device path: each is either applied by the fused sampler exactly as the CPU
// pipeline applies it, or refused by name when the batch is built; none is silently ignored. The options come from
// add_sampler_options itself (the filter stages' table included), so a new option without a value below fails
// this test until someone decides, here, what it should do on the device.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "harness/config/command_options.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "verify/device/batch_verifier.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

TEST_CASE("every sampler option is applied on the device as on the CPU, or refused by name", "[sampler][device]") {
  // A value that makes each option act on the rows below (V = 64, the history's tokens among them).
  const std::map<std::string, std::string> values = {
      {"temperature", "0.7"},
      {"sampler-order", "top_p,min_p,top_k"},
      {"repetition-penalty", "1.4"},
      {"frequency-penalty", "0.6"},
      {"presence-penalty", "0.5"},
      {"logit-bias", "1:2.5,3:-1.5"},
      {"allowed-tokens", "0,1,2,3,4,5,6,7,8,9,10,11"},
      {"banned-tokens", "2"},
      {"bad-words", "5 6"},
      {"min-tokens", "9"},
      {"stop-tokens", "4"},
      {"dynatemp-range", "0.5"},
      {"dynatemp-exponent", "1.5"},
      {"min-p", "0.02"},
      {"top-k", "12"},
      {"top-p", "0.85"},
      {"typical-p", "0.8"},
      {"tfs-z", "0.8"},
      {"mirostat", "2"},
      {"mirostat-tau", "4"},
      {"mirostat-eta", "0.2"},
  };
  po::options_description desc;
  add_sampler_options(desc);
  const int32_t V = 64;
  TokenHistory history;
  history.prompt = {1, 3, 3, 7};
  history.output = {5, 1, 8};
  int32_t applied = 0, refused = 0;
  for (const auto& option : desc.options()) {
    const std::string name = option->long_name();
    INFO("--" << name);
    REQUIRE(values.count(name));  // a new option: give it a value above, and so decide its device behaviour
    po::variables_map vm;
    po::store(po::command_line_parser(std::vector<std::string>{"--" + name, values.at(name)}).options(desc).run(), vm);
    SamplingParams s;
    read_sampler_options(vm, s);
    if (name == "dynatemp-exponent" || name == "mirostat-tau" || name == "mirostat-eta") {
      // Modifiers of a stage that is off by default: switch the stage on, so the modifier acts.
      s.dynatemp_range = name == "dynatemp-exponent" ? 0.5f : s.dynatemp_range;
      s.mirostat = name == "dynatemp-exponent" ? s.mirostat : 2;
    }
    std::vector<float> logits(V);
    for (int32_t i = 0; i < V; ++i) logits[i] = static_cast<float>(2.0 * std::sin(1.7 * i + 0.3) + 0.01 * i);
    const std::vector<float> cpu = SamplerPipeline(s, V).process(logits, history);
    // What a run checks when it is configured, before any work: refused by the option's name, or run.
    std::string refused_as;
    try {
      check_device_support(std::nullopt, s, 0, Device::cuda_host);
    } catch (const ParameterError& e) {
      refused_as = e.parameter();
    }
    if (!refused_as.empty()) {
      ++refused;
      std::string parameter = name;
      for (char& c : parameter) c = c == '-' ? '_' : c;
      const std::string stage = name == "dynatemp-exponent" ? "dynatemp_range" : "mirostat";  // the modifiers' stage
      INFO("refused as " << refused_as);
      CHECK((refused_as == parameter || refused_as == stage));
      CHECK_THROWS_AS(SamplerBatch(V, {{&s, &history, RandomKey{9, philox_stream(0, RandomRole::sample), 0}}}), Error);
      continue;
    }
    std::vector<float> device(V);
    const SamplerBatch batch(V, {{&s, &history, RandomKey{9, philox_stream(0, RandomRole::sample), 0}}});
    int32_t token = -1, status = -1;
    run_fused_sampler_host(batch.host_params(logits.data(), device.data(), &token, &status));
    ++applied;
    for (int32_t i = 0; i < V; ++i) CHECK(device[i] == Approx(cpu[i]).margin(1e-6));
  }
  CHECK(applied >= 12);  // masks, bias, penalties, temperature, min_p, top_k, top_p, order ...
  CHECK(refused >= 5);   // bad_words, dynatemp, typical_p, tfs_z, mirostat ...
}
