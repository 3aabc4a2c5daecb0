// The shared host/device math compiled with FMA instructions enabled (-mfma), to show that the project's
// flags keep the compiler from contracting a * b - c into one fused operation (the device side is built
// with --fmad=false, so a contracted host would round differently from the GPU). Two builds of one probe:
// with the project's flags, and with -ffp-contract=fast forced (the broken build the test must tell apart).
#pragma once

namespace specula::testing {

double block_residual_project_flags(double w, double p, double q);
float frequency_penalty_project_flags(float logit, int count, float frequency);
double block_residual_contracted(double w, double p, double q);
float frequency_penalty_contracted(float logit, int count, float frequency);

}  // namespace specula::testing
