// The switch of the mutation points (kernels/shared/mutation_points.h): test code, linked into the test
// executables only. Switching a mutant on makes its point in the production code take the broken branch.
#pragma once

#include "kernels/shared/mutation_points.h"

namespace specula {

// The mutant switched on for this process (Mutant::none when none is).
Mutant active_mutant();
void set_active_mutant(Mutant m);

// Switches a mutant on for a scope.
class ScopedMutant {
 public:
  explicit ScopedMutant(Mutant m) : previous_(active_mutant()) { set_active_mutant(m); }
  ~ScopedMutant() { set_active_mutant(previous_); }
  ScopedMutant(const ScopedMutant&) = delete;
  ScopedMutant& operator=(const ScopedMutant&) = delete;

 private:
  Mutant previous_;
};

}  // namespace specula
