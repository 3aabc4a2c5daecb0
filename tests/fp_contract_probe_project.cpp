#define SPECULA_PROBE(name) name##_project_flags
#include "tests/fp_contract_probe.inc"
