// The SentencePiece tokenizer: tokenizer.model through the SentencePiece
// module (core/tokenizer/sentencepiece_module.h says why SentencePiece is a module),
// opened once per process. Torch-free.
#include <dlfcn.h>

#include <cstdlib>
#include <fstream>

#include "core/tokenizer/sentencepiece_module.h"
#include "core/tokenizer/tokenizer.h"

namespace kvlab {
namespace {

struct SpmModule {
  decltype(&kvlab_spm_load) load = nullptr;
  decltype(&kvlab_spm_unload) unload = nullptr;
  decltype(&kvlab_spm_info) info = nullptr;
  decltype(&kvlab_spm_encode) encode = nullptr;
  decltype(&kvlab_spm_decode) decode = nullptr;
  decltype(&kvlab_spm_free) free = nullptr;
  std::string error;  // why the module is not usable; empty when it is
};

#ifdef KVLAB_SENTENCEPIECE_MODULE
template <typename F>
void Bind(void* lib, const char* name, F* f, std::string* error) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr && error->empty()) *error = std::string("SentencePiece module lacks ") + name;
}
#endif

// Opened on first use; never closed (tokenizers may live until exit).
const SpmModule& Module() {
  static const SpmModule module = [] {
    SpmModule m;
#ifdef KVLAB_SENTENCEPIECE_MODULE
#ifdef KVLAB_SENTENCEPIECE_OWN_NAMESPACE
    // Sanitizer builds (KVLAB_SANITIZE): ASan refuses RTLD_DEEPBIND, so the
    // (uninstrumented) module gets a link-map namespace of its own.
    void* lib = dlmopen(LM_ID_NEWLM, KVLAB_SENTENCEPIECE_MODULE, RTLD_NOW | RTLD_LOCAL);
#else
    void* lib = dlopen(KVLAB_SENTENCEPIECE_MODULE, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
    if (lib == nullptr) {
      const char* e = dlerror();
      m.error = std::string("cannot load the SentencePiece module: ") + (e != nullptr ? e : "unknown error");
      return m;
    }
    Bind(lib, "kvlab_spm_load", &m.load, &m.error);
    Bind(lib, "kvlab_spm_unload", &m.unload, &m.error);
    Bind(lib, "kvlab_spm_info", &m.info, &m.error);
    Bind(lib, "kvlab_spm_encode", &m.encode, &m.error);
    Bind(lib, "kvlab_spm_decode", &m.decode, &m.error);
    Bind(lib, "kvlab_spm_free", &m.free, &m.error);
#else
    m.error = "this kvlab was built without SentencePiece (Debian package libsentencepiece-dev); install it and "
              "rebuild, or give token ids instead of text (--tokens, or a token-id file FILE.ids)";
#endif
    return m;
  }();
  return module;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const SpmModule& m, void* handle, std::string path, int32_t pieces, int32_t bos, int32_t eos)
      : m_(m), handle_(handle), path_(std::move(path)), pieces_(pieces), bos_(bos), eos_(eos) {}
  ~SentencePieceTokenizer() override { m_.unload(handle_); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::string Name() const override { return "sentencepiece (" + path_ + ")"; }

  Status Encode(const std::string& text, bool add_bos, std::vector<int32_t>* ids) const override {
    char err[512] = {0};
    int32_t* buf = nullptr;
    size_t n = 0;
    if (m_.encode(handle_, text.data(), text.size(), &buf, &n, err, sizeof(err)) != 0) {
      return Status::InvalidArgument(path_ + ": cannot encode: " + err);
    }
    ids->clear();
    ids->reserve(n + 1);
    if (add_bos && bos_ >= 0) ids->push_back(bos_);
    ids->insert(ids->end(), buf, buf + n);
    m_.free(buf);
    return Status::OK();
  }

  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override {
    std::vector<int32_t> known;
    known.reserve(ids.size());
    for (int32_t id : ids) {
      if (id >= 0 && id < pieces_ && id != bos_ && id != eos_) known.push_back(id);
    }
    char err[512] = {0};
    char* buf = nullptr;
    size_t n = 0;
    if (m_.decode(handle_, known.data(), known.size(), &buf, &n, err, sizeof(err)) != 0) {
      return Status::InvalidArgument(path_ + ": cannot decode: " + err);
    }
    text->assign(buf, n);
    m_.free(buf);
    return Status::OK();
  }

  int64_t vocab_size() const override { return pieces_; }
  int32_t bos_id() const override { return bos_; }
  int32_t eos_id() const override { return eos_; }

 private:
  const SpmModule& m_;
  void* handle_;
  std::string path_;
  int32_t pieces_, bos_, eos_;
};

}  // namespace

bool HaveSentencePiece() {
#ifdef KVLAB_SENTENCEPIECE_MODULE
  return true;
#else
  return false;
#endif
}

Status NewSentencePieceTokenizer(const std::string& model_path, int64_t bos_id, int64_t eos_id,
                                 std::unique_ptr<Tokenizer>* out) {
  const SpmModule& m = Module();
  if (!m.error.empty()) return Status::InvalidArgument(model_path + ": " + m.error);
  if (!std::ifstream(model_path).good()) return Status::IOError(model_path + ": cannot open SentencePiece model");
  char err[512] = {0};
  void* handle = nullptr;
  if (m.load(model_path.c_str(), &handle, err, sizeof(err)) != 0) {
    return Status::Corruption(model_path + ": not a SentencePiece model: " + err);
  }
  int32_t pieces = 0, bos = -1, eos = -1;
  m.info(handle, &pieces, &bos, &eos);
  if (bos_id >= 0) bos = static_cast<int32_t>(bos_id);
  if (eos_id >= 0) eos = static_cast<int32_t>(eos_id);
  *out = std::make_unique<SentencePieceTokenizer>(m, handle, model_path, pieces, bos, eos);
  return Status::OK();
}

}  // namespace kvlab
