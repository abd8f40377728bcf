// Byte-level tokenizer of kvlab's small models: ids 0..255 are the bytes,
// then BOS (256), EOS (257) and PAD (258). Also parses token-id lists
// ("5,17,42"), accepted everywhere text is. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvlab {

class ByteTokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258, kVocabSize = 259;
  // Bytes of `text`, preceded by BOS when add_bos.
  static std::vector<int32_t> Encode(const std::string& text, bool add_bos = true);
  // Bytes back to text; special ids are skipped.
  static std::string Decode(const std::vector<int32_t>& ids);
};

// Parses "5,17,42" (commas and/or whitespace). Every id must be in [0, vocab).
// `what` names the source in the error ("--tokens", a file name).
Status ParseTokenIds(const std::string& text, int64_t vocab, const std::string& what, std::vector<int32_t>* out);

}  // namespace kvlab
