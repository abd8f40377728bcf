// Added-token splitting and the BPE model of tokenizer.json (core/tokenizer/hf_tokenizer_parts.h).
#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>

#include "core/tokenizer/hf_tokenizer_parts.h"

namespace kvlab {
namespace hf {

void TokenTrie::Add(const std::string& s, int32_t token_index) {
  int32_t node = 0;
  for (unsigned char c : s) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
      terminal_.push_back(-1);
    }
    node = it->second;
  }
  if (terminal_[node] < 0) terminal_[node] = token_index;  // the first token of a content wins
}

size_t TokenTrie::LongestAt(const std::string& text, size_t pos, int32_t* token_index) const {
  int32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = i + 1 - pos;
      *token_index = terminal_[node];
    }
  }
  return best;
}

namespace {

bool IsWordChar(uint32_t cp) { return cp == '_' || IsUnicodeAlphanumeric(cp); }

// The character ending at s[end - 1] and where it starts.
uint32_t CodePointBefore(const std::string& s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  return NextCodePoint(s, &b);
}

}  // namespace

std::vector<Piece> SplitAdded(const std::string& text, const TokenTrie& trie, const std::vector<AddedToken>& added) {
  std::vector<Piece> out;
  if (trie.empty()) {
    out.push_back({text, -1, 0});
    return out;
  }
  size_t start_offset = 0, pos = 0;
  while (pos < text.size()) {
    int32_t idx = -1;
    const size_t len = trie.LongestAt(text, pos, &idx);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = added[idx];
    size_t start = pos, stop = pos + len, before = 0;
    pos = stop;
    if (t.single_word) {
      size_t after = stop;
      const bool word_before = start > 0 && IsWordChar(CodePointBefore(text, start, &before));
      const bool word_after = stop < text.size() && IsWordChar(NextCodePoint(text, &after));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {  // the whitespace before joins the token (not past the previous match)
      while (start > start_offset && IsUnicodeWhitespace(CodePointBefore(text, start, &before))) start = before;
      start = std::max(start, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!IsUnicodeWhitespace(NextCodePoint(text, &next))) break;
        stop = next;
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), -1, start_offset});
    out.push_back({text.substr(start, stop - start), idx, start});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({text.substr(start_offset), -1, start_offset});
  return out;
}

void Bpe::EncodeWord(const std::string& word, std::vector<int32_t>* out) const {
  if (ignore_merges) {  // Llama 3: a word in the vocabulary is one token, whatever the merges say
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // Symbols: the word's characters; byte tokens (byte_fallback) or unk for those not in the vocabulary.
  std::vector<int32_t> s;
  bool last_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(Utf8CharLen(static_cast<unsigned char>(word[i])), word.size() - i);
    auto it = vocab.find(word.substr(i, n));
    if (it != vocab.end()) {
      s.push_back(it->second);
      last_unk = false;
    } else if (byte_fallback && std::all_of(word.begin() + i, word.begin() + i + n,
                                            [&](char c) { return byte_ids[static_cast<unsigned char>(c)] >= 0; })) {
      for (size_t k = i; k < i + n; ++k) s.push_back(byte_ids[static_cast<unsigned char>(word[k])]);
      last_unk = false;
    } else if (unk_id >= 0) {
      if (!(fuse_unk && last_unk)) s.push_back(unk_id);
      last_unk = true;
    }  // no unk token: the character is dropped, as the Rust crate does
    i += n;
  }
  const int n = static_cast<int>(s.size());
  if (n < 2) {
    out->insert(out->end(), s.begin(), s.end());
    return;
  }
  std::vector<int> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  using Entry = std::tuple<int32_t, int, int32_t>;  // rank, position, merged id
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  const auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges.find(Key(s[pos], s[next[pos]]));
    if (it != merges.end()) queue.emplace(it->second.first, pos, it->second.second);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, pos, new_id] = queue.top();
    queue.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    const int right = next[pos];
    auto it = merges.find(Key(s[pos], s[right]));
    if (it == merges.end() || it->second.second != new_id) continue;  // a stale entry
    s[pos] = new_id;
    alive[right] = 0;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = pos;
    push(prev[pos]);
    push(pos);
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back(s[i]);
}

}  // namespace hf
}  // namespace kvlab
