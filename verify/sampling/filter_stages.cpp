#include "verify/sampling/filter_stages.h"

#include <cmath>

#include "kernels/shared/error.h"

namespace specula {

// One line per stage kept in a file of its own: STAGE(maker), where `FilterStageRow maker()` (defined in that
// file) returns the stage's row. Built-in stages have their rows in the table below.
#define SPECULA_ADDED_FILTER_STAGES(STAGE)

#define SPECULA_DECLARE_STAGE(maker) FilterStageRow maker();
SPECULA_ADDED_FILTER_STAGES(SPECULA_DECLARE_STAGE)
#undef SPECULA_DECLARE_STAGE

namespace {

void check_unit_open_closed(const char* name, float v) {  // (0, 1]
  if (!(v > 0.0f && v <= 1.0f)) fail_parameter(name, " must be in (0, 1], got ", v);
}

double mirostat_mu(const SamplingParams& s, const TokenHistory& h) {
  return std::isnan(h.mirostat_mu) ? 2.0 * s.mirostat_tau : h.mirostat_mu;
}

// A parameter held in a typed field of SamplingParams.
#define SPECULA_FIELD(field, help, integer)                                                                  \
  StageParameter {                                                                                           \
#field, help, integer,                                                                                   \
        [](const SamplingParams&                                                                             \
               s) { return double(s.field); }, [](SamplingParams & s,                                        \
                                                  double v) { s.field = static_cast<decltype(s.field)>(v); } \
  }

std::vector<FilterStageRow>& table() {
  // Rows at FilterStage's values (sampling_params.h), in canonical order. Definitions and citations of each
  // stage's rule are in truncation_filters.cpp.
  static std::vector<FilterStageRow> rows = {
      {"min_p",
       {SPECULA_FIELD(min_p, "keep tokens with p >= M * max p (0 = off)", false)},
       0.0,
       [](const SamplingParams& s) { return s.min_p > 0.0f; },
       [](const SamplingParams& s) {
         if (!(s.min_p >= 0.0f && s.min_p <= 1.0f)) fail_parameter("min_p", " must be in [0, 1], got ", s.min_p);
       },
       [](Candidates& c, const SamplingParams& s, const TokenHistory&) { apply_min_p(c, s.min_p); },
       false,
       true},
      {"top_k",
       {SPECULA_FIELD(top_k, "keep the k most likely tokens, ties kept (0 or -1 = off)", true)},
       0.0,
       [](const SamplingParams& s) { return s.top_k > 0; },
       [](const SamplingParams& s) {
         if (s.top_k < -1) fail_parameter("top_k", " must be >= 1, or 0 / -1 for off, got ", s.top_k);
       },
       [](Candidates& c, const SamplingParams& s, const TokenHistory&) { apply_top_k(c, s.top_k); },
       false,
       true},
      {"top_p",
       {SPECULA_FIELD(top_p, "nucleus: keep tokens until mass P, crossing token kept (1 = off)", false)},
       1.0,
       [](const SamplingParams& s) { return s.top_p < 1.0f; },
       [](const SamplingParams& s) { check_unit_open_closed("top_p", s.top_p); },
       [](Candidates& c, const SamplingParams& s, const TokenHistory&) { apply_top_p(c, s.top_p); },
       false,
       true},
      {"typical_p",
       {SPECULA_FIELD(typical_p, "locally typical sampling mass (1 = off)", false)},
       1.0,
       [](const SamplingParams& s) { return s.typical_p < 1.0f; },
       [](const SamplingParams& s) { check_unit_open_closed("typical_p", s.typical_p); },
       [](Candidates& c, const SamplingParams& s, const TokenHistory&) { apply_typical_p(c, s.typical_p); },
       false,
       false},
      {"tfs_z",
       {SPECULA_FIELD(tfs_z, "tail-free sampling z (1 = off)", false)},
       1.0,
       [](const SamplingParams& s) { return s.tfs_z < 1.0f; },
       [](const SamplingParams& s) { check_unit_open_closed("tfs_z", s.tfs_z); },
       [](Candidates& c, const SamplingParams& s, const TokenHistory&) { apply_tfs_z(c, s.tfs_z); },
       false,
       false},
      {"mirostat",
       {SPECULA_FIELD(mirostat, "0 = off, 2 = mirostat v2", true),
        SPECULA_FIELD(mirostat_tau, "mirostat target surprise in bits (default 5)", false),
        SPECULA_FIELD(mirostat_eta, "mirostat learning rate (default 0.1)", false)},
       0.0,
       [](const SamplingParams& s) { return s.mirostat == 2; },
       [](const SamplingParams& s) {
         if (s.mirostat != 0 && s.mirostat != 2)
           fail_parameter("mirostat", " must be 0 (off) or 2 (mirostat v2), got ", s.mirostat);
         if (!std::isfinite(s.mirostat_tau) || s.mirostat_tau <= 0.0f)
           fail_parameter("mirostat_tau", " must be > 0, got ", s.mirostat_tau);
         if (!std::isfinite(s.mirostat_eta) || s.mirostat_eta < 0.0f)
           fail_parameter("mirostat_eta", " must be >= 0, got ", s.mirostat_eta);
       },
       [](Candidates& c, const SamplingParams& s, const TokenHistory& h) { apply_mirostat_v2(c, mirostat_mu(s, h)); },
       true,
       false},
#define SPECULA_STAGE_ROW(maker) maker(),
      SPECULA_ADDED_FILTER_STAGES(SPECULA_STAGE_ROW)
#undef SPECULA_STAGE_ROW
  };
  return rows;
}

#undef SPECULA_FIELD

}  // namespace

const std::vector<FilterStageRow>& filter_stages() { return table(); }

const FilterStageRow& filter_stage(FilterStage stage) {
  const size_t row = static_cast<size_t>(stage);
  if (row >= table().size()) fail("filter stage ", row, " has no row in verify/sampling/filter_stages.cpp");
  return table()[row];
}

FilterStage add_filter_stage(const FilterStageRow& row) {
  if (!row.name || !row.active || !row.validate || !row.apply || row.parameters.empty())
    fail("add_filter_stage: a stage needs a name, a parameter, and its active, validate and apply functions");
  for (const FilterStageRow& r : table()) {
    if (std::string(r.name) == row.name) fail("add_filter_stage: a stage named '", row.name, "' is in the table");
    for (const StageParameter& p : r.parameters)
      for (const StageParameter& q : row.parameters)
        if (std::string(p.name) == q.name) fail("add_filter_stage: parameter '", q.name, "' is ", r.name, "'s");
  }
  table().push_back(row);
  return static_cast<FilterStage>(table().size() - 1);
}

}  // namespace specula
