// Host side of the pending-counts kernel: its parameter check and the cuda-host backend.
#include "kernels/pending_counts.h"

#include "kernels/shared/error.h"

namespace specula {

void PendingCountsParams::check() const {
  if (n < 1) fail("pending counts: n must be >= 1, got ", n);
  if (rows < 1) fail("pending counts: rows must be >= 1, got ", rows);
  if (vocab < 1 || vocab > (1 << 30)) fail("pending counts: vocab must be in [1, 2^30], got ", vocab);
  if (!counts) fail("pending counts: counts [rows, V] is null");
  if (!ids) fail("pending counts: ids is null");
  if (!entries) fail("pending counts: entries [n, 2] is null");
}

void add_pending_counts_host(const PendingCountsParams& p) {
  p.check();
  for (int32_t e = 0; e < p.n; ++e) {
    const int64_t at = pending_count_offset(p, e, p.ids[p.entries[2 * e + 1]]);
    if (at >= 0) ++p.counts[at];
  }
}

}  // namespace specula
