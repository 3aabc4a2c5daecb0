// Host side of the law-values gather: its parameter check and the cuda-host backend.
#include "kernels/law_values.h"

#include "kernels/shared/error.h"

namespace specula {

void LawValuesParams::check() const {
  if (n < 1) fail("law values: n must be >= 1, got ", n);
  if (rows < 1) fail("law values: rows must be >= 1, got ", rows);
  if (vocab < 1 || vocab > (1 << 30)) fail("law values: vocab must be in [1, 2^30], got ", vocab);
  if (!laws) fail("law values: laws [rows, V] is null");
  if (!ids) fail("law values: ids is null");
  if (!entries) fail("law values: entries [n, 2] is null");
  if (!values) fail("law values: values [n] is null");
}

void read_law_values_host(const LawValuesParams& p) {
  p.check();
  for (int32_t e = 0; e < p.n; ++e) p.values[e] = law_value(p, e);
}

}  // namespace specula
