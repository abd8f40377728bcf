// Regex, pattern, split and UTF-8 helpers of the tokenizer.json pipeline
// (core/tokenizer/hf_tokenizer_parts.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/uchar.h>

#include <algorithm>

#include "core/tokenizer/hf_tokenizer_parts.h"

namespace kvlab {
namespace hf {

namespace {

// Oniguruma's shorthands, which PCRE2's UCP ones differ from: \s is White_Space
// (PCRE2 adds U+180E), \w is Alphabetic, M, Nd and Pc (PCRE2: L, N and _),
// plus, outside classes, the Latin-1 superscripts and fractions, as
// tokenizers.js translates them.
constexpr const char* kWordChars = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
constexpr const char* kLatin1WordChars = "\\x{b2}\\x{b3}\\x{b9}\\x{bc}-\\x{be}";

// Rewrites \s \S \w (and \W outside classes) to Oniguruma's meaning; the rest is copied.
std::string RewriteForPcre2(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's')
        out += "\\p{White_Space}";
      else if (e == 'S')
        out += "\\P{White_Space}";
      else if (e == 'w' && in_class)
        out += kWordChars;
      else if (e == 'w')
        out += "[" + std::string(kWordChars) + kLatin1WordChars + "]";
      else if (e == 'W' && !in_class)
        out += "[^" + std::string(kWordChars) + kLatin1WordChars + "]";
      else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' first in a class (after an optional '^') is literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Status Regex::Compile(const std::string& pattern, const Where& where, std::shared_ptr<Regex>* out) {
  const std::string rewritten = RewriteForPcre2(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return where.Error("regex \"" + pattern +
                       "\" does not compile (PCRE2: " + std::string(reinterpret_cast<char*>(msg)) + ")");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // a speed-up where available; matching works without it
  auto r = std::shared_ptr<Regex>(new Regex());
  r->code_ = code;
  *out = std::move(r);
  return Status::OK();
}

void Regex::FindAll(const std::string& text, std::vector<Span>* out) const {
  out->clear();
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    // A JIT resource limit is retried on the interpreter; past that, the rest of
    // the text is left unsplit (the patterns of real files never get there).
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // empty matches split nothing
      if (ov[0] >= text.size()) break;
      start = ov[0] + Utf8CharLen(static_cast<unsigned char>(text[ov[0]]));
      continue;
    }
    out->emplace_back(ov[0], ov[1]);
    start = ov[1];
  }
  pcre2_match_data_free(md);
}

Status Pattern::Parse(const Json& j, const Where& where, Pattern* out) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    out->literal = j["String"].get<std::string>();
    out->regex.reset();
    if (out->literal.empty()) return where.Error("String is empty");
    return Status::OK();
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    return Regex::Compile(j["Regex"].get<std::string>(), where.At("Regex"), &out->regex);
  }
  return where.Error("is not {\"String\": ...} or {\"Regex\": ...}");
}

void Pattern::FindAll(const std::string& text, std::vector<Span>* out) const {
  if (regex) return regex->FindAll(text, out);
  out->clear();
  for (size_t p = text.find(literal); p != std::string::npos; p = text.find(literal, p + literal.size())) {
    out->emplace_back(p, p + literal.size());
  }
}

Status ParseSplitBehavior(const Json& j, const Where& where, SplitBehavior* out) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed")
    *out = SplitBehavior::kRemoved;
  else if (b == "Isolated")
    *out = SplitBehavior::kIsolated;
  else if (b == "MergedWithPrevious")
    *out = SplitBehavior::kMergedWithPrevious;
  else if (b == "MergedWithNext")
    *out = SplitBehavior::kMergedWithNext;
  else if (b == "Contiguous")
    *out = SplitBehavior::kContiguous;
  else
    return where.Error("is " + QuoteJson(j) +
                       ", not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
  return Status::OK();
}

std::vector<std::string> SplitBy(const std::string& text, const std::vector<Span>& matches, SplitBehavior behavior,
                                 bool invert) {
  // The whole text as (span, is_match), gaps included (Rust: Pattern::find_matches).
  std::vector<std::pair<Span, bool>> parts;
  size_t prev = 0;
  for (const Span& m : matches) {
    if (m.first > prev) parts.push_back({{prev, m.first}, invert});
    parts.push_back({m, !invert});
    prev = m.second;
  }
  if (prev < text.size()) parts.push_back({{prev, text.size()}, invert});

  std::vector<Span> spans;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& p : parts)
        if (!p.second) spans.push_back(p.first);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& p : parts) spans.push_back(p.first);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& p : parts) {
        if (p.second && !previous_match && !spans.empty())
          spans.back().second = p.first.second;
        else
          spans.push_back(p.first);
        previous_match = p.second;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->second && !previous_match && !spans.empty())
          spans.back().first = it->first.first;
        else
          spans.push_back(it->first);
        previous_match = it->second;
      }
      std::reverse(spans.begin(), spans.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].second == previous_match)
          spans.back().second = parts[i].first.second;
        else
          spans.push_back(parts[i].first);
        previous_match = parts[i].second;
      }
      break;
  }
  std::vector<std::string> out;
  for (const Span& s : spans) {
    if (s.second > s.first) out.push_back(text.substr(s.first, s.second - s.first));
  }
  return out;
}

size_t Utf8CharLen(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

namespace {
// The length of the valid UTF-8 character at s[i], or 0 with *bad set to the
// length of its maximal invalid subpart (at least 1), as WHATWG and Rust count it.
size_t ValidCharAt(const std::string& s, size_t i, size_t* bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  *bad = 1;
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    need = 1;
  else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) {
      *bad = k;
      return 0;
    }
    const unsigned char d = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (d < l || d > h) {
      *bad = k;
      return 0;
    }
  }
  return need + 1;
}
}  // namespace

size_t FirstInvalidUtf8(const std::string& s) {
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    const size_t n = ValidCharAt(s, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string::npos;
}

std::string Utf8Lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    const size_t n = ValidCharAt(bytes, i, &bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(bytes, i, n);
      i += n;
    }
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t NextCodePoint(const std::string& s, size_t* i) {
  const auto c = static_cast<unsigned char>(s[*i]);
  const size_t n = Utf8CharLen(c);
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n && *i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += n;
  return cp;
}

bool IsUnicodeWhitespace(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

bool IsUnicodeAlphanumeric(uint32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  return u_isUAlphabetic(c) || (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0;
}

namespace {
struct ByteMap {
  std::string to_unicode[256];
  int to_byte[512];
  ByteMap() {
    for (int& b : to_byte) b = -1;
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const int cp = printable ? b : 256 + n++;
      AppendUtf8(static_cast<uint32_t>(cp), &to_unicode[b]);
      to_byte[cp] = b;
    }
  }
};
const ByteMap& Bytes() {
  static const ByteMap map;
  return map;
}
}  // namespace

const std::string& ByteToUnicode(unsigned char b) { return Bytes().to_unicode[b]; }

int UnicodeToByte(uint32_t cp) { return cp < 512 ? Bytes().to_byte[cp] : -1; }

}  // namespace hf
}  // namespace kvlab
