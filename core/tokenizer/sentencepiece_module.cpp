// libkvlab_sentencepiece.so: Debian's libsentencepiece behind a C interface
// (core/tokenizer/sentencepiece_module.h says why it is a module). Built only when
// CMake finds sentencepiece_processor.h and libsentencepiece. Torch-free.
#include "core/tokenizer/sentencepiece_module.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using sentencepiece::SentencePieceProcessor;

int Fail(std::string msg, char* err, size_t err_size) {
  while (!msg.empty() && (msg.back() == ' ' || msg.back() == '\n')) msg.pop_back();
  if (err != nullptr && err_size > 0) std::snprintf(err, err_size, "%s", msg.c_str());
  return 1;
}

const SentencePieceProcessor* Sp(const void* handle) { return static_cast<const SentencePieceProcessor*>(handle); }

}  // namespace

extern "C" {

int kvlab_spm_load(const char* path, void** handle, char* err,
                                                          size_t err_size) {
  auto* sp = new SentencePieceProcessor;
  const auto s = sp->Load(path);
  if (!s.ok()) {
    delete sp;
    return Fail(s.ToString(), err, err_size);
  }
  *handle = sp;
  return 0;
}

void kvlab_spm_unload(void* handle) {
  delete static_cast<SentencePieceProcessor*>(handle);
}

int kvlab_spm_info(const void* handle, int32_t* piece_size, int32_t* bos_id,
                                                          int32_t* eos_id) {
  *piece_size = Sp(handle)->GetPieceSize();
  *bos_id = Sp(handle)->bos_id();
  *eos_id = Sp(handle)->eos_id();
  return 0;
}

int kvlab_spm_encode(const void* handle, const char* text, size_t text_size,
                                                            int32_t** ids, size_t* num_ids, char* err,
                                                            size_t err_size) {
  std::vector<int> out;
  const auto s = Sp(handle)->Encode(std::string_view(text, text_size), &out);
  if (!s.ok()) return Fail(s.ToString(), err, err_size);
  *ids = static_cast<int32_t*>(std::malloc(std::max<size_t>(1, out.size()) * sizeof(int32_t)));
  if (*ids == nullptr) return Fail("out of memory", err, err_size);
  for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = static_cast<int32_t>(out[i]);
  *num_ids = out.size();
  return 0;
}

int kvlab_spm_decode(const void* handle, const int32_t* ids, size_t num_ids,
                                                            char** text, size_t* text_size, char* err,
                                                            size_t err_size) {
  const std::vector<int> in(ids, ids + num_ids);
  std::string out;
  const auto s = Sp(handle)->Decode(in, &out);
  if (!s.ok()) return Fail(s.ToString(), err, err_size);
  *text = static_cast<char*>(std::malloc(out.size() + 1));
  if (*text == nullptr) return Fail("out of memory", err, err_size);
  std::memcpy(*text, out.data(), out.size());
  (*text)[out.size()] = '\0';
  *text_size = out.size();
  return 0;
}

void kvlab_spm_free(void* buffer) { std::free(buffer); }

}  // extern "C"
