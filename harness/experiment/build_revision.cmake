# Writes OUTPUT, a C++ source defining specula::kBuildRevision: the short git revision of SOURCE_DIR when the binary
# is built, with "-dirty" where tracked files had changes, or "unknown" outside a checkout. Run at every build
# (harness/CMakeLists.txt), it rewrites OUTPUT only when the text changes, so an unchanged revision rebuilds nothing.
# The revision is the build's, not the checkout's at run time: a binary not rebuilt after a pull or an edit still
# names the sources it was built from.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short HEAD
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR revision STREQUAL "")
  set(revision "unknown")
else()
  # --no-optional-locks: the status never takes the index lock, so it cannot collide with the user's own git commands.
  execute_process(COMMAND git --no-optional-locks -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE status_failed)
  if(status_failed OR NOT changes STREQUAL "")  # a tree that cannot be shown clean is not called clean
    string(APPEND revision "-dirty")
  endif()
endif()
set(text "// Written by harness/experiment/build_revision.cmake at build time.\n#include \"harness/experiment/build_revision.h\"\n\nnamespace specula {\nconst char* const kBuildRevision = \"${revision}\";\n}  // namespace specula\n")
set(old "")
if(EXISTS "${OUTPUT}")
  file(READ "${OUTPUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUTPUT}" "${text}")
endif()
