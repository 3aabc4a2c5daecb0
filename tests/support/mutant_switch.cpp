#include "tests/support/mutant_switch.h"

#ifdef SPECULA_NO_MUTATION_POINTS
#error "the test suite needs the mutation points: configure with -DSPECULA_MUTATION_POINTS=ON"
#endif

namespace specula {

// The one definition of the weak reference the mutation points read.
int g_active_mutant_number = 0;

Mutant active_mutant() { return static_cast<Mutant>(g_active_mutant_number); }
void set_active_mutant(Mutant m) { g_active_mutant_number = static_cast<int>(m); }

}  // namespace specula
