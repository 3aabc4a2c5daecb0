// The verification kernels' sibling schemes (kernels/verify_kernels.h, TreeSiblingScheme) are the
// verifiers' (verify/verifiers/token_tree.h, SiblingScheme) by value: the kernels layer cannot include the
// verifiers, so the correspondence is checked here, where both are visible.
#pragma once

#include <cstdint>

#include "kernels/verify_kernels.h"
#include "verify/verifiers/token_tree.h"

namespace specula {

static_assert(static_cast<int>(TreeSiblingScheme::iid) == static_cast<int>(SiblingScheme::iid) &&
                  static_cast<int>(TreeSiblingScheme::without_replacement) ==
                      static_cast<int>(SiblingScheme::without_replacement) &&
                  static_cast<int>(TreeSiblingScheme::deterministic) == static_cast<int>(SiblingScheme::deterministic),
              "TreeSiblingScheme must keep SiblingScheme's values");

// A tree's sibling scheme as the verification kernels' rows carry it.
inline int32_t kernel_sibling_scheme(SiblingScheme scheme) { return static_cast<int32_t>(scheme); }

}  // namespace specula
