// Row scans shared by the stages, the selectors and the verifiers. The passes over whole rows are the only
// O(V) work of the pipeline, so they are written as plain loops the compiler vectorises (integer tests on
// the float bits, no branches) and built twice, for AVX2 and the baseline, with the CPU picking at load.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/shared/error.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"

namespace specula {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr uint32_t kPosInfBits = 0x7f800000u;
constexpr uint32_t kNegInfBits = 0xff800000u;
constexpr int32_t kChunk = RowSummary::kChunk;

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// NaN or +inf: the values a logits row must not hold.
uint32_t nan_or_pos_inf(float x) {
  const uint32_t u = bits_of(x);
  return static_cast<uint32_t>((u & 0x7fffffffu) > kPosInfBits) | static_cast<uint32_t>(u == kPosInfBits);
}

SPECULA_ROW_SCAN uint32_t copy_and_flag(const float* __restrict in, int32_t size, float* __restrict out) {
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int32_t i = 0; i < size; ++i) {
    out[i] = in[i];
    bad |= nan_or_pos_inf(in[i]);
  }
  return bad;
}

// The largest of x[0, n) (NaN ignored; -inf when empty) and whether any NaN or +inf occurs. Inlined with a
// constant n for full chunks, so the compiler unrolls it into whole vectors.
inline float chunk_max_and_flag(const float* __restrict x, int32_t n, uint32_t& unusual) {
  float m = kNegInf;
  uint32_t flag = 0;
#pragma omp simd reduction(max : m) reduction(| : flag)
  for (int32_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    flag |= nan_or_pos_inf(x[i]);
  }
  unusual |= flag;
  return m;
}

// Chunk maxima (NaN ignored) and whether any NaN or +inf occurs.
SPECULA_ROW_SCAN uint32_t chunk_maxima(const float* __restrict x, int32_t size, float* __restrict chunk_max) {
  uint32_t unusual = 0;
  const int32_t full = size / kChunk;
  for (int32_t c = 0; c < full; ++c) chunk_max[c] = chunk_max_and_flag(x + c * kChunk, kChunk, unusual);
  if (full * kChunk < size) chunk_max[full] = chunk_max_and_flag(x + full * kChunk, size - full * kChunk, unusual);
  return unusual;
}

// Is any of x[base, end) nonzero (-0 counts as zero, NaN as nonzero)? N, when given, is end - base known at
// compile time (a full block), so the loop unrolls into whole vectors.
template <int32_t N = 0, typename T>
bool any_nonzero(const T* __restrict x, int32_t base, int32_t end) {
  const int32_t n = N > 0 ? N : end - base;
  x += base;
  uint32_t any = 0;
#pragma omp simd reduction(| : any)
  for (int32_t i = 0; i < n; ++i) any |= static_cast<uint32_t>(x[i] != T(0));
  return any != 0;
}

// Is any of x[base, end) >= cut? (N as in any_nonzero.)
template <int32_t N = 0>
bool any_at_least(const float* __restrict x, int32_t base, int32_t end, float cut) {
  const int32_t n = N > 0 ? N : end - base;
  x += base;
  uint32_t any = 0;
#pragma omp simd reduction(| : any)
  for (int32_t i = 0; i < n; ++i) any |= static_cast<uint32_t>(x[i] >= cut);
  return any != 0;
}

// Blocks of 512 tested at once, then blocks of 32, then single entries: a support of a few dozen tokens
// costs one vectorised read of the row and a few short scans.
SPECULA_ROW_SCAN void nonzero_ids_float(const float* __restrict row, int32_t size, std::vector<int32_t>& ids) {
  constexpr int32_t kOuter = 512, kInner = 32;
  for (int32_t outer = 0; outer < size; outer += kOuter) {
    const int32_t outer_end = std::min(size, outer + kOuter);
    if (!(outer_end - outer == kOuter ? any_nonzero<kOuter>(row, outer, outer_end)
                                      : any_nonzero(row, outer, outer_end)))
      continue;
    for (int32_t base = outer; base < outer_end; base += kInner) {
      const int32_t end = std::min(outer_end, base + kInner);
      if (!(end - base == kInner ? any_nonzero<kInner>(row, base, end) : any_nonzero(row, base, end))) continue;
      for (int32_t i = base; i < end; ++i)
        if (row[i] != 0.0f) ids.push_back(i);
    }
  }
}

// The chunks whose maximum reaches the cut, in blocks of 16 tested at once.
SPECULA_ROW_SCAN void collect_at_least(const float* __restrict x, int32_t size, const float* chunk_max, float cut,
                                       Candidates& out) {
  constexpr int32_t kInner = 16;
  for (int32_t chunk = 0; chunk * kChunk < size; ++chunk) {
    if (!(chunk_max[chunk] >= cut)) continue;
    const int32_t chunk_end = std::min(size, (chunk + 1) * kChunk);
    for (int32_t base = chunk * kChunk; base < chunk_end; base += kInner) {
      const int32_t end = std::min(chunk_end, base + kInner);
      if (!(end - base == kInner ? any_at_least<kInner>(x, base, end, cut) : any_at_least(x, base, end, cut))) continue;
      for (int32_t i = base; i < end; ++i) {
        if (x[i] >= cut) {
          out.ids.push_back(i);
          out.logits.push_back(x[i]);
        }
      }
    }
  }
}

// Bit i of a 32-bit word, a constant a lane: testing `bits & kLane[i]` needs no variable shift, so the loops over a
// word's tokens vectorise on the baseline x86-64 too (a variable shift a lane needs AVX2).
constexpr std::array<uint32_t, 32> kLane = [] {
  std::array<uint32_t, 32> lanes{};
  for (int32_t i = 0; i < 32; ++i) lanes[i] = uint32_t{1} << i;
  return lanes;
}();

// x[i] = bit i of word i / 64 ? x[i] : -inf, in place. A word of all ones (a run of allowed tokens) is skipped, one
// of all zeros written without reading the row; the rest select 64 floats by their bits, 32 at a time.
SPECULA_ROW_SCAN void mask_by_bits(float* __restrict x, const uint64_t* __restrict words, int32_t size) {
  const int32_t full = size / 64;
  for (int32_t w = 0; w < full; ++w) {
    const uint64_t bits = words[w];
    float* __restrict xs = x + static_cast<size_t>(w) * 64;
    if (bits == ~uint64_t{0}) continue;
    if (bits == 0) {
#pragma omp simd
      for (int32_t i = 0; i < 64; ++i) xs[i] = kNegInf;
      continue;
    }
    for (int32_t half = 0; half < 2; ++half) {
      const uint32_t b = static_cast<uint32_t>(bits >> (32 * half));
      float* __restrict ys = xs + 32 * half;
#pragma omp simd
      for (int32_t i = 0; i < 32; ++i) ys[i] = (b & kLane[i]) != 0 ? ys[i] : kNegInf;
    }
  }
  for (int32_t i = full * 64; i < size; ++i)
    if (((words[i >> 6] >> (i & 63)) & 1u) == 0) x[i] = kNegInf;
}

// Does any token of the 64 from x (n <= 64 of them, `bits` saying which are kept) have a logit above -inf?
SPECULA_ROW_SCAN bool word_keeps_one(const float* __restrict x, uint64_t bits, int32_t n) {
  uint32_t any = 0;
  for (int32_t half = 0; half < 2 && 32 * half < n; ++half) {
    const uint32_t b = static_cast<uint32_t>(bits >> (32 * half));
    const float* __restrict ys = x + 32 * half;
    const int32_t m = std::min<int32_t>(32, n - 32 * half);
#pragma omp simd reduction(| : any)
    for (int32_t i = 0; i < m; ++i)
      any |= static_cast<uint32_t>((b & kLane[i]) != 0) & static_cast<uint32_t>(bits_of(ys[i]) != kNegInfBits);
  }
  return any != 0;
}

}  // namespace

int32_t count_finite(LogitsRow row) {
  int32_t n = 0;
  for (int32_t i = 0; i < row.size; ++i) n += std::isfinite(row.logits[i]) ? 1 : 0;
  return n;
}

void keep_only(LogitsRow row, const TokenSet& keep) {
  if (keep.size() != row.size) fail("keep_only: a set of ", keep.size(), " tokens for a row of ", row.size);
  mask_by_bits(row.logits, keep.words().data(), row.size);
}

bool any_kept(LogitsRow row, const TokenSet& keep) {
  if (keep.size() != row.size) fail("any_kept: a set of ", keep.size(), " tokens for a row of ", row.size);
  // Word by word, stopping at the first that keeps a token: most rows' first kept token is in their first word with
  // any, and a row with none (a draft's row whose constraint yields, or the error) costs one vectorised pass.
  const std::vector<uint64_t>& words = keep.words();
  for (size_t w = 0; w < words.size(); ++w)
    if (words[w] != 0 &&
        word_keeps_one(row.logits + w * 64, words[w], std::min<int32_t>(64, row.size - static_cast<int32_t>(w) * 64)))
      return true;
  return false;
}

void copy_checked_logits(const float* logits, int32_t size, float* row) {
  if (!copy_and_flag(logits, size, row)) return;
  for (int32_t i = 0; i < size; ++i) {
    if (std::isnan(logits[i])) fail("logits: token ", i, " is NaN");
    if (logits[i] == std::numeric_limits<float>::infinity()) fail("logits: token ", i, " is +inf");
  }
}

void summarise_row(LogitsRow row, RowSummary& summary) {
  summary.chunk_max.resize((static_cast<size_t>(row.size) + kChunk - 1) / kChunk);
  summary.unusual = chunk_maxima(row.logits, row.size, summary.chunk_max.data()) != 0;
  float m = kNegInf;
  for (float v : summary.chunk_max) m = v > m ? v : m;
  summary.max = m;
}

void collect_candidates(LogitsRow row, const RowSummary& summary, float cut, Candidates& out) {
  out.clear();
  out.vocab_size = row.size;
  if (cut != kNegInf) {
    collect_at_least(row.logits, row.size, summary.chunk_max.data(), cut, out);
    return;
  }
  for (int32_t i = 0; i < row.size; ++i) {
    if (bits_of(row.logits[i]) != kNegInfBits) {
      out.ids.push_back(i);
      out.logits.push_back(row.logits[i]);
    }
  }
}

float max_logit(const Candidates& c) {
  float m = kNegInf;
  for (float x : c.logits) m = x > m ? x : m;
  return m;
}

int32_t count_finite(const Candidates& c) {
  int32_t n = 0;
  for (float x : c.logits) n += std::isfinite(x) ? 1 : 0;
  return n;
}

// As over the whole row: exp(x - max) in float64 for every logit that is not -inf, normalised by their sum
// taken in id order.
void candidate_probabilities(const Candidates& c, std::vector<double>& p) {
  const double m = max_logit(c);
  p.assign(c.ids.size(), 0.0);
  double z = 0.0;
  for (size_t j = 0; j < p.size(); ++j) {
    if (c.logits[j] == kNegInf) continue;
    p[j] = std::exp(static_cast<double>(c.logits[j]) - m);
    z += p[j];
  }
  for (double& v : p) v /= z;
}

void softmax_candidates(const Candidates& c, float* probs) {
  double m = -std::numeric_limits<double>::infinity();
  for (float x : c.logits) m = x > m ? x : m;
  if (m == -std::numeric_limits<double>::infinity()) fail("sampler pipeline: no token left to sample from");
  thread_local std::vector<double> e;
  e.resize(c.ids.size());
  double z = 0.0;
  for (size_t j = 0; j < e.size(); ++j) z += e[j] = std::exp(static_cast<double>(c.logits[j]) - m);
  const double inv = 1.0 / z;
  std::memset(probs, 0, static_cast<size_t>(c.vocab_size) * sizeof(float));  // +0.0f is all zero bits
  for (size_t j = 0; j < e.size(); ++j) probs[c.ids[j]] = static_cast<float>(e[j] * inv);
}

void nonzero_ids(const float* row, int32_t size, std::vector<int32_t>& ids) {
  ids.clear();
  nonzero_ids_float(row, size, ids);
}

}  // namespace specula
