// The C interface of the SentencePiece module (libkvlab_sentencepiece.so), which
// core/tokenizer/sentencepiece_tokenizer.cpp loads at run time. Only that file and the
// module include this header.
//
// Why a module: Debian's libsentencepiece bundles its own protobuf-lite and
// exports its symbols; linked into kvlab beside libtorch (whose libprotobuf
// has the same symbols, another version), the dynamic linker mixes the two and
// kvlab crashes while loading (libprotobuf's version check aborts: the
// module's sentencepiece_model.pb.cc was compiled against 3.14, libtorch's
// libprotobuf is 3.21). The module is opened with RTLD_LOCAL | RTLD_DEEPBIND,
// so SentencePiece binds to its own protobuf and libtorch never sees it.
//
// Sanitizer builds (KVLAB_SANITIZE, .ci/sanitize.sh): ASan's dlopen refuses
// RTLD_DEEPBIND (a deep-bound library would bypass its malloc), and a plain
// RTLD_LOCAL dlopen is not enough: the clash does bite with Debian's shared
// libprotobuf (libsentencepiece's protobuf calls resolve to libprotobuf.so.32
// through the global scope, and the version check aborts; checked with a
// libtorch program). Linking the module with -Bsymbolic or a version script
// would not help either: the clashing references are inside libsentencepiece.so,
// not in the module. So there the module is opened with dlmopen(LM_ID_NEWLM)
// into a link-map namespace of its own, with its own libsentencepiece,
// libstdc++ and libc and no libprotobuf, and it is built without the
// sanitizers (a second sanitizer runtime cannot live in that namespace). It is
// a thin C wrapper; what crosses the boundary is copied (err) or malloc'ed and
// freed by the module itself (kvlab_spm_free), so the two heaps never mix. The
// tokenizer tests (model_io_test) and cli_test's tokenizer.model case (the
// kvlab binary, beside libtorch) check it under the sanitizers.
#pragma once

#include <cstddef>
#include <cstdint>

#define KVLAB_SPM_EXPORT __attribute__((visibility("default")))

extern "C" {

// Every function returns 0 on success; on failure, non-zero with a message
// (NUL-terminated, truncated to err_size) in `err`. Buffers returned through
// `ids` / `text` are malloc'ed by the module; free them with kvlab_spm_free.
KVLAB_SPM_EXPORT int kvlab_spm_load(const char* path, void** handle, char* err, size_t err_size);
KVLAB_SPM_EXPORT void kvlab_spm_unload(void* handle);
KVLAB_SPM_EXPORT int kvlab_spm_info(const void* handle, int32_t* piece_size, int32_t* bos_id, int32_t* eos_id);
KVLAB_SPM_EXPORT int kvlab_spm_encode(const void* handle, const char* text, size_t text_size, int32_t** ids,
                                      size_t* num_ids, char* err, size_t err_size);
// `ids` must all be in [0, piece_size).
KVLAB_SPM_EXPORT int kvlab_spm_decode(const void* handle, const int32_t* ids, size_t num_ids, char** text,
                                      size_t* text_size, char* err, size_t err_size);
KVLAB_SPM_EXPORT void kvlab_spm_free(void* buffer);

}  // extern "C"
