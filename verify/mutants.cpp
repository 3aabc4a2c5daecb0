#include "verify/mutants.h"

namespace specula {
Mutant g_active_mutant = Mutant::none;
}
