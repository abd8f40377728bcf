// The parts of a Hugging Face tokenizer.json pipeline (normalizers,
// pre-tokenizers, decoders, added-token splitting, the BPE model, and the regex
// and Unicode helpers they share), as the Rust `tokenizers` crate defines them.
// Internal to core/tokenizer/hf_tokenizer*.cpp; everyone else uses
// NewHfTokenizer (core/tokenizer/hf_tokenizer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/untrusted_json.h"

namespace kvlab {
namespace hf {

using Json = nlohmann::json;
using Span = std::pair<size_t, size_t>;  // [begin, end) in bytes

// j[key], or null when j is not an object or has no such key (no copy, unlike json::value).
inline const Json& Field(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// Where a component sits, for errors: "DIR/tokenizer.json: pre_tokenizer.pretokenizers[1]".
struct Where {
  std::string file, key;
  Where At(const std::string& sub) const { return {file, key.empty() ? sub : key + "." + sub}; }
  Where Index(size_t i) const { return {file, key + "[" + std::to_string(i) + "]"}; }
  // The key path and `what` may carry tokenizer.json's text (token strings): quoted to one line of UTF-8.
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(file + ": " + QuoteBytes(key + " " + what, 400));
  }
};

// A PCRE2 pattern (UTF + UCP). The Rust crate compiles patterns with
// Oniguruma; where the two differ on syntax these files use (\s: PCRE2 adds
// U+180E to White_Space), the pattern is rewritten to Oniguruma's meaning.
class Regex {
 public:
  ~Regex();
  static Status Compile(const std::string& pattern, const Where& where, std::shared_ptr<Regex>* out);
  // Non-overlapping matches, left to right (an empty match advances one character).
  // REQUIRES: text is valid UTF-8.
  void FindAll(const std::string& text, std::vector<Span>* out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
};

// A tokenizer.json "pattern": {"String": s} or {"Regex": r}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;  // null: literal
  static Status Parse(const Json& j, const Where& where, Pattern* out);
  void FindAll(const std::string& text, std::vector<Span>* out) const;
};

// How a split keeps the pattern's matches (Rust: SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
Status ParseSplitBehavior(const Json& j, const Where& where, SplitBehavior* out);
// The non-empty pieces of `text` when `matches` (sorted, disjoint) are split off as `behavior` says.
std::vector<std::string> SplitBy(const std::string& text, const std::vector<Span>& matches, SplitBehavior behavior,
                                 bool invert);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* text) const = 0;
};
// null `j` (JSON null) gives a null normalizer.
Status NewNormalizer(const Json& j, const Where& where, std::unique_ptr<Normalizer>* out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the pieces of `piece` to `out`. `at_start`: the piece begins the
  // text (Metaspace's prepend_scheme "first").
  virtual void Split(const std::string& piece, bool at_start, std::vector<std::string>* out) const = 0;
};
Status NewPreTokenizer(const Json& j, const Where& where, std::unique_ptr<PreTokenizer>* out);

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Decode(std::vector<std::string>* tokens) const = 0;
};
Status NewDecoder(const Json& j, const Where& where, std::unique_ptr<Decoder>* out);

// UTF-8 helpers. Validity: the byte offset of the first invalid sequence, or npos.
size_t FirstInvalidUtf8(const std::string& s);
// Bytes to text, each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string Utf8Lossy(const std::string& bytes);
// Length in bytes of the UTF-8 character starting with lead byte c (1 for invalid leads).
size_t Utf8CharLen(unsigned char c);
void AppendUtf8(uint32_t cp, std::string* out);
// Decodes the character at s[i] (REQUIRES: valid UTF-8), advancing i.
uint32_t NextCodePoint(const std::string& s, size_t* i);
bool IsUnicodeWhitespace(uint32_t cp);    // White_Space (Rust char::is_whitespace)
bool IsUnicodeAlphanumeric(uint32_t cp);  // Rust char::is_alphanumeric
// GPT-2's byte <-> printable character map (ByteLevel): the UTF-8 of byte b's character.
const std::string& ByteToUnicode(unsigned char b);
// The byte of a ByteLevel character, or -1.
int UnicodeToByte(uint32_t cp);

// ---- the model side (core/tokenizer/hf_tokenizer_bpe.cpp) ----

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, normalized = true, lstrip = false, rstrip = false, single_word = false;
};

// Added-token contents in a byte trie, matched leftmost-longest (Rust: aho-corasick).
class TokenTrie {
 public:
  void Add(const std::string& s, int32_t token_index);
  bool empty() const { return terminal_.size() == 1; }
  // Length of the longest token at text[pos], 0 if none; *token_index its index.
  size_t LongestAt(const std::string& text, size_t pos, int32_t* token_index) const;

 private:
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<int32_t> terminal_{-1};            // node -> token index; node 0 is the root
};

struct Piece {
  std::string text;
  int32_t added = -1;  // index into the added tokens, or -1: text for the model
  size_t offset = 0;   // in the text split
};

// The text cut at added tokens, honouring single_word / lstrip / rstrip
// (Rust: AddedVocabulary::find_matches and split_with_indices).
std::vector<Piece> SplitAdded(const std::string& text, const TokenTrie& trie, const std::vector<AddedToken>& added);

// The BPE model: a word's characters (or their byte tokens) merged lowest rank
// first, leftmost among equals (Rust: Word::merge_all).
struct Bpe {
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // Key(left, right) -> (rank, merged id)
  int32_t unk_id = -1;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  int32_t byte_ids[256];  // the ids of "<0xXX>", or -1

  static uint64_t Key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void EncodeWord(const std::string& word, std::vector<int32_t>* out) const;
};

}  // namespace hf
}  // namespace kvlab
