// Room core/tokenizer/: tokenizers, token-id files, the Jinja subset and chat templates.
// Called by datasets, evals and python; includes core/model and below.
//
// Tokenizers: text <-> token ids for the CLI and the sweeps. The byte-level
// tokenizer of kvlab's small models (ids 0..255 are the bytes, then BOS 256,
// EOS 257, PAD 258), a SentencePiece one for checkpoints that ship
// tokenizer.model and a Hugging Face one for tokenizer.json (core/tokenizer/hf_tokenizer.h),
// behind one interface; LoadTokenizer picks one for a model.
// Also token-id lists and token-id files (FILE.ids), accepted everywhere text
// is. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "core/base/status.h"

namespace kvlab {

// Thread-safety: Encode and Decode are const and may be called concurrently.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "sentencepiece (DIR/tokenizer.model)" or "tokenizer.json (DIR/tokenizer.json)": what the CLI prints.
  virtual std::string Name() const = 0;
  // Token ids of `text`, preceded by BOS when add_bos and the tokenizer has one
  // (tokenizer.json: its post-processor's special tokens, whatever they are).
  virtual Status Encode(const std::string& text, bool add_bos, std::vector<int32_t>* ids) const = 0;
  // Text of `ids`; BOS, EOS, PAD and ids the tokenizer does not know are skipped.
  virtual Status Decode(const std::vector<int32_t>& ids, std::string* text) const = 0;
  // Ids the tokenizer produces are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1: none
  virtual int32_t eos_id() const = 0;  // -1: none
};

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocabSize = 259;
  // The byte functions themselves, for code that is byte-level by construction
  // (the trainer, the synthetic retrieval tasks).
  // Bytes of `text`, preceded by BOS when add_bos.
  static std::vector<int32_t> Encode(const std::string& text, bool add_bos = true);
  // Bytes back to text; special ids are skipped.
  static std::string Decode(const std::vector<int32_t>& ids);

  // The Tokenizer interface (never fails).
  std::string Name() const override { return "byte"; }
  Status Encode(const std::string& text, bool add_bos, std::vector<int32_t>* ids) const override;
  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  int32_t bos_id() const override { return kBos; }
  int32_t eos_id() const override { return kEos; }
};

// A SentencePiece model file (tokenizer.model). bos_id / eos_id >= 0 replace
// the model's own (checkpoints' config.json are the authority on them).
// SentencePiece is loaded at run time from a module built beside kvlab (see
// core/tokenizer/sentencepiece_module.cpp for why); a kvlab built without
// libsentencepiece-dev returns an error saying so.
Status NewSentencePieceTokenizer(const std::string& model_path, int64_t bos_id, int64_t eos_id,
                                 std::unique_ptr<Tokenizer>* out);
// Whether this build has SentencePiece support.
bool HaveSentencePiece();

// The tokenizer of a model: `model_dir_or_preset` is what --model takes (a
// preset, a model directory, or a config.json path), `config` its config.
//   DIR/tokenizer.json exists       -> Hugging Face tokenizers (core/tokenizer/hf_tokenizer.h;
//                                      BOS/EOS from the config)
//   else DIR/tokenizer.model exists -> SentencePiece (BOS/EOS from the config)
//   else vocab_size is 259          -> the byte tokenizer
//   else                            -> InvalidArgument: pass token ids
// A tokenizer with more ids than the config's vocab_size is an error.
Status LoadTokenizer(const std::string& model_dir_or_preset, const ModelConfig& config,
                     std::unique_ptr<Tokenizer>* out);

// The tokenizer of a directory that need not hold a model (`kvlab tokenize`):
// DIR/tokenizer.json, else DIR/tokenizer.model, else (DIR/config.json with
// vocab_size 259) the byte tokenizer; BOS/EOS from DIR/config.json where it
// states them (any model_type), else from tokenizer_config.json. `dir` may also
// be a tokenizer.json / tokenizer.model file, or a preset name (its byte
// tokenizer, when it has a 259-id vocabulary). NotFound names the directory
// and the files looked for.
Status LoadTokenizerFromDir(const std::string& dir, std::unique_ptr<Tokenizer>* out);

// Parses "5,17,42" (commas and/or whitespace). Every id must be in [0, vocab).
// `what` names the source in the error ("--tokens", a file name).
Status ParseTokenIds(const std::string& text, int64_t vocab, const std::string& what, std::vector<int32_t>* out);

// A token-id file is a text file of ids separated by commas and/or whitespace,
// recognised by its name ending in ".ids".
bool IsTokenIdFile(const std::string& path);
// Reads a token-id file; every id must be in [0, vocab). Errors name the file.
Status ReadTokenIdFile(const std::string& path, int64_t vocab, std::vector<int32_t>* out);

// A prompt from a file: a token-id file's ids as they are, or a text file's
// text encoded by `tokenizer` with BOS (tokenizer may be null for .ids files;
// for a text file it must not be, else the error says to pass token ids).
Status ReadPromptFile(const std::string& path, const Tokenizer* tokenizer, int64_t vocab, std::vector<int32_t>* out);

}  // namespace kvlab
