// `specula sample`: the sampler pipeline from the shell. Draws N independent tokens from the processed
// distribution of one logits row (with the given history), one token id per line on stdout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/io/logits_file.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "verify/device/batch_verifier.h"
#include "verify/device/device_sampler.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula::cli {
namespace {

void print_tokens(const int32_t* tokens, int64_t n) {
  std::string out;
  char buf[16];
  for (int64_t i = 0; i < n; ++i) {
    const int len = std::snprintf(buf, sizeof buf, "%d\n", tokens[i]);
    out.append(buf, static_cast<size_t>(len));
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// The fused sampler draws one token per row: N samples are N rows sharing the one row's inputs (uploaded once),
// in chunks; row i uses the same key (seed, stream 0, offset i) as the CPU path, hence the same token.
int sample_on_device(Device device, const SamplerPipeline& pipeline, const TokenHistory& history,
                     const std::vector<float>& logits, const po::variables_map& vm) {
  const int32_t V = pipeline.vocab_size();
  RowSampler sampler(device, pipeline.params(), history, logits);
  if (vm["print-distribution"].as<bool>()) {
    for (float p : sampler.distribution()) std::printf("%.9g\n", static_cast<double>(p));
    return 0;
  }
  const int64_t n = vm["num-samples"].as<int64_t>();
  if (n < 0) fail("--num-samples must be >= 0, got ", n);
  const uint64_t seed = vm["seed"].as<uint64_t>();
  // Each draw's block needs a row of scratch: chunks of at most 256 MiB of it.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(65536, (int64_t{1} << 26) / V));
  for (int64_t start = 0; start < n; start += chunk) {
    const int32_t rows = static_cast<int32_t>(std::min(chunk, n - start));
    const std::vector<int32_t> tokens =
        sampler.draw(seed, philox_stream(0, RandomRole::sample), static_cast<uint64_t>(start), rows);
    print_tokens(tokens.data(), rows);
  }
  return 0;
}

}  // namespace

int sample_command(const Args& args) {
  po::options_description desc(
      "specula sample --logits FILE --num-samples N --seed S [sampler options]\n\n"
      "Samples N tokens from the processed distribution of one logits row.\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("logits", po::value<std::string>(), "file with one row of logits (whitespace or comma separated)")
    ("num-samples", po::value<int64_t>(), "number of tokens to draw")
    ("seed", po::value<uint64_t>(), "Philox seed (draw i uses stream 0, offset i)")
    ("prompt-tokens", po::value<std::string>(), "history: prompt token ids (repetition penalty)")
    ("output-tokens", po::value<std::string>(), "history: generated token ids (all penalties, bad words, min tokens)")
    ("mirostat-mu", po::value<double>(), "history: mirostat state mu (default 2 * tau)")
    ("print-distribution", po::bool_switch(), "print the processed probabilities (one per line, token order) instead of samples")
    ("print-chain", po::bool_switch(), "print the sampler chain to stderr")
    ("device", po::value<std::string>()->default_value("cpu"), "cpu | cuda | cuda-host (the fused CUDA sampler, or its code emulated on the CPU; the same keys, so the same draws but where README says they can differ)")
    ("config", po::value<std::string>(), "INI file with any of these options (the command line wins)");
  // clang-format on
  add_sampler_options(desc);
  const po::variables_map vm = parse_options(args, desc, "sample");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!vm.count("logits")) fail("--logits FILE is required");
  const bool print_distribution = vm["print-distribution"].as<bool>();
  if (!print_distribution && !vm.count("num-samples")) fail("--num-samples N is required");
  if (!print_distribution && !vm.count("seed")) fail("--seed S is required");

  const Device device = parse_device(vm["device"].as<std::string>());
  require_device(device);  // "no CUDA device: ..." before any work
  SamplingParams params;
  read_sampler_options(vm, params);
  check_sampler_options(params, INT32_MAX);  // before the logits are read
  note_unread_sampler_options(vm, params, nullptr);
  const std::vector<float> logits = read_logits_file(vm["logits"].as<std::string>());
  const SamplerPipeline pipeline(params, static_cast<int32_t>(logits.size()));
  TokenHistory history;
  if (vm.count("prompt-tokens"))
    history.prompt = parse_token_list(vm["prompt-tokens"].as<std::string>(), "prompt-tokens");
  if (vm.count("output-tokens"))
    history.output = parse_token_list(vm["output-tokens"].as<std::string>(), "output-tokens");
  for (Token t : history.prompt)
    if (t >= pipeline.vocab_size())
      fail("--prompt-tokens: token id ", t, " is outside the vocabulary [0, ", pipeline.vocab_size(), ")");
  for (Token t : history.output)
    if (t >= pipeline.vocab_size())
      fail("--output-tokens: token id ", t, " is outside the vocabulary [0, ", pipeline.vocab_size(), ")");
  if (vm.count("mirostat-mu")) {
    history.mirostat_mu = vm["mirostat-mu"].as<double>();
    if (!std::isfinite(history.mirostat_mu)) fail("--mirostat-mu must be a finite number, got ", history.mirostat_mu);
    const std::string why = params.unread_because("mirostat_tau");  // mu is mirostat's state, read where tau is
    if (!why.empty()) std::cerr << "note: --mirostat-mu is left unread: " << why << "\n";
  }
  if (vm["print-chain"].as<bool>()) std::cerr << pipeline.describe() << "\n";

  if (device != Device::cpu) {
    // Named by the flag and the device, as generate and run name them.
    check_device_support(std::nullopt, pipeline.params(), 0, device);
    return sample_on_device(device, pipeline, history, logits, vm);
  }
  const std::vector<float> probs = pipeline.process(logits, history);
  if (print_distribution) {
    for (float p : probs) std::printf("%.9g\n", static_cast<double>(p));
    return 0;
  }
  const int64_t n = vm["num-samples"].as<int64_t>();
  if (n < 0) fail("--num-samples must be >= 0, got ", n);
  const uint64_t seed = vm["seed"].as<uint64_t>();
  const uint64_t stream = philox_stream(0, RandomRole::sample);
  // Streamed in blocks: memory stays bounded whatever --num-samples is, and output starts at once.
  constexpr int64_t kBlock = 1 << 16;
  std::vector<int32_t> tokens(static_cast<size_t>(std::min(n, kBlock)));
  for (int64_t first = 0; first < n; first += kBlock) {
    const int64_t count = std::min(kBlock, n - first);
    for (int64_t i = 0; i < count; ++i)
      tokens[i] = sample_categorical(probs.data(), pipeline.vocab_size(),
                                     RandomKey{seed, stream, static_cast<uint64_t>(first + i)});
    print_tokens(tokens.data(), count);
    if (std::ferror(stdout)) fail("writing standard output failed after ", first, " samples");
  }
  return 0;
}

}  // namespace specula::cli
