// The source revision the binary was built from (harness/experiment/build_revision.cmake writes its definition at
// every build): the short git revision, "-dirty" where tracked files had changes, "unknown" outside a checkout.
#pragma once

namespace specula {

extern const char* const kBuildRevision;

}  // namespace specula
