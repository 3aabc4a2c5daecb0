// ForwardBenchOptions' checks, apart from the benchmark's LibTorch code: the command line runs them before it
// loads the LibTorch module, so a bad option costs no start-up.
#include <algorithm>
#include <cmath>

#include "harness/bench/forward_benchmark.h"
#include "kernels/shared/error.h"
#include "verify/verifiers/token_tree.h"

namespace specula::bench {

void ForwardBenchOptions::validate(const std::vector<std::string>& models) const {
  if (models.empty()) fail_parameter("model", " is required, e.g. transformer:results/models/target");
  for (const std::string& spec : models)
    if (spec.rfind("transformer:", 0) != 0 || spec.size() == std::string("transformer:").size())
      fail_parameter("model", ": '", spec, "' is not transformer:DIR");
  if (device != "cpu" && device != "cuda" && device != "libtorch")
    fail_parameter("device", " must be cpu, cuda or libtorch, got '", device, "'");
  for (int64_t b : batches)
    if (b < 2 || b > 1024) fail_parameter("batches", ": sizes must be in [2, 1024], got ", b);
  if (!batches.empty() && device == "cpu")
    fail_parameter("batches", " time pooled steps, LibTorch's path: give --device cuda or libtorch");
  if (threads < 1) fail_parameter("threads", " must be >= 1, got ", threads);
  if (min_iterations < 1) fail_parameter("min_iterations", " must be >= 1, got ", min_iterations);
  if (!(min_time_s >= 0.0 && std::isfinite(min_time_s)))
    fail_parameter("min_time", " must be a finite number of seconds >= 0, got ", min_time_s);
  for (const std::string& tree : trees) parse_tree_shape(tree, "trees");  // as the benchmark reads them, up front
  if (chunk_sizes.empty()) fail_parameter("chunks", ": empty list");
  for (int64_t k : chunk_sizes)
    if (k < 1) fail_parameter("chunks", ": sizes must be >= 1, got ", k);
  if (std::find(chunk_sizes.begin(), chunk_sizes.end(), 1) == chunk_sizes.end())
    fail_parameter("chunks", " must include 1: every ratio is against the 1-token forward");
}

}  // namespace specula::bench
