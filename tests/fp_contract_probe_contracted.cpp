#define SPECULA_PROBE(name) name##_contracted
#include "tests/fp_contract_probe.inc"
