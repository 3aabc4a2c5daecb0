// The C interface of specula_sentencepiece, a small shared module around Debian's libsentencepiece.
//
// Why a module loaded at run time: libsentencepiece exports the symbols of the protobuf (and abseil) it
// bundles. Linked into a process with LibTorch, whose libprotobuf.so.32 has the same symbol names, the two
// interpose each other and the process crashes in protobuf's static initialisation. sentencepiece_tokenizer.cpp
// therefore dlopen()s this module with RTLD_LOCAL | RTLD_DEEPBIND: the module and libsentencepiece resolve
// their symbols among themselves first, and nothing of theirs enters the global namespace.
//
// Memory returned through `*ids` / `*text` is malloc()ed here and released with specula_spm_free_buffer.
// Errors: functions returning int give 0 on success and -1 on failure, with a message in `error`.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void* specula_spm_load(const char* path, char* error, size_t error_size);  // NULL on failure
void specula_spm_free(void* processor);
int specula_spm_piece_size(const void* processor);
int specula_spm_bos_id(const void* processor);  // -1 when the model has none
int specula_spm_eos_id(const void* processor);
int specula_spm_encode(const void* processor, const char* text, size_t size, int** ids, size_t* count, char* error,
                       size_t error_size);
int specula_spm_decode(const void* processor, const int* ids, size_t count, char** text, size_t* size, char* error,
                       size_t error_size);
void specula_spm_free_buffer(void* buffer);

#ifdef __cplusplus
}
#endif
