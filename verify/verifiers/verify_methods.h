// The verification methods' table: one row per method with its name, its verifier and the traits the rest of the
// code reads instead of naming methods (verification.h). The CLI's help and --method parsing, the experiment
// runner, the verification benchmark and the device path all read it; no list of methods is written elsewhere.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "verify/verifiers/verification.h"

namespace specula {

// One method. `run` verifies one step's tree (a chain for methods without `trees`) on the processed target rows.
struct VerifyMethodRow {
  const char* name;
  VerifyOutcome (*run)(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng);
  bool lossy;           // does not preserve the target law (labelled so in every report)
  bool trees;           // verifies a tree with branching
  bool greedy;          // compares the draft with the target's argmax (lossless against greedy decoding only)
  VerifyKernel device;  // the CUDA kernel that runs it (none: CPU only, refused on a device by name)
};

// Adds a method to the table, after the built-in rows (verify_methods.cpp), and returns it: a method kept in a
// file of its own registers itself at start-up, e.g.
//   const VerifyMethod kRejectAll = add_verify_method({"reject-all", verify_reject_all, false, false, false,
//                                                      VerifyKernel::none});
// A name already in the table is an Error.
VerifyMethod add_verify_method(const VerifyMethodRow& row);

// "greedy, chain, tree, block, typical": every method parse_verify_method knows, in table order; with
// `separator` "|" for a usage line.
std::string verify_method_names(const std::string& separator = ", ");

// Every method of the table, in table order.
std::vector<VerifyMethod> verify_methods();

// The method named `text`, or nullopt (parse_verify_method throws instead).
std::optional<VerifyMethod> find_verify_method(const std::string& text);

}  // namespace specula
