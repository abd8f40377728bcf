// Normalizers, pre-tokenizers and decoders of tokenizer.json
// (core/tokenizer/hf_tokenizer_parts.h), each as the Rust `tokenizers` crate runs it.
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <cctype>

#include "core/tokenizer/hf_tokenizer_parts.h"

namespace kvlab {
namespace hf {

namespace {

Status GetBool(const Json& j, const char* key, bool dflt, const Where& w, bool* out) {
  *out = dflt;
  if (!j.contains(key) || j[key].is_null()) return Status::OK();
  if (!j[key].is_boolean()) return w.At(key).Error("is " + QuoteJson(j[key]) + ", not true or false");
  *out = j[key].get<bool>();
  return Status::OK();
}

Status GetString(const Json& j, const char* key, const std::string& dflt, const Where& w, std::string* out) {
  *out = dflt;
  if (!j.contains(key) || j[key].is_null()) return Status::OK();
  if (!j[key].is_string()) return w.At(key).Error("is " + QuoteJson(j[key]) + ", not a string");
  *out = j[key].get<std::string>();
  return Status::OK();
}

Status GetType(const Json& j, const Where& w, std::string* type) {
  if (!j.is_object()) return w.Error("is " + QuoteJson(j, 60) + ", not an object");
  if (!j.contains("type") || !j["type"].is_string()) return w.At("type").Error("is missing");
  *type = j["type"].get<std::string>();
  return Status::OK();
}

Status Unsupported(const Where& w, const std::string& type, const std::string& supported) {
  return w.At("type").Error("\"" + type + "\" is not supported (kvlab reads " + supported + ")");
}

Status GetList(const Json& j, const char* key, const Where& w, const Json** out) {
  if (!j.contains(key) || !j[key].is_array()) return w.At(key).Error("is missing or not a list");
  *out = &j[key];
  return Status::OK();
}

// ---- normalizers ----

class SequenceNormalizer final : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  void Normalize(std::string* t) const override {
    for (const auto& p : parts) p->Normalize(t);
  }
};

std::string ReplaceAll(const std::string& text, const Pattern& pattern, const std::string& content) {
  std::vector<Span> m;
  pattern.FindAll(text, &m);
  if (m.empty()) return text;
  std::string out;
  size_t prev = 0;
  for (const Span& s : m) {
    out.append(text, prev, s.first - prev);
    out += content;
    prev = s.second;
  }
  out.append(text, prev, std::string::npos);
  return out;
}

class ReplaceNormalizer final : public Normalizer {
 public:
  Pattern pattern;
  std::string content;
  void Normalize(std::string* t) const override { *t = ReplaceAll(*t, pattern, content); }
};

class PrependNormalizer final : public Normalizer {
 public:
  std::string prepend;
  void Normalize(std::string* t) const override {
    if (!t->empty()) t->insert(0, prepend);
  }
};

class StripNormalizer final : public Normalizer {
 public:
  bool left = true, right = true;
  void Normalize(std::string* t) const override {
    size_t b = 0, e = t->size();
    while (left && b < e) {
      size_t i = b;
      if (!IsUnicodeWhitespace(NextCodePoint(*t, &i))) break;
      b = i;
    }
    while (right && e > b) {
      size_t s = e - 1;
      while (s > b && (static_cast<unsigned char>((*t)[s]) & 0xC0) == 0x80) --s;
      size_t i = s;
      if (!IsUnicodeWhitespace(NextCodePoint(*t, &i))) break;
      e = s;
    }
    *t = t->substr(b, e - b);
  }
};

// NFC / NFD / NFKC / NFKD through ICU.
class UnicodeNormalizer final : public Normalizer {
 public:
  const UNormalizer2* norm = nullptr;
  void Normalize(std::string* t) const override {
    bool ascii = true;
    for (unsigned char c : *t) ascii = ascii && c < 0x80;
    if (ascii) return;  // every form leaves ASCII alone
    UErrorCode err = U_ZERO_ERROR;
    int32_t n16 = 0;
    u_strFromUTF8(nullptr, 0, &n16, t->data(), static_cast<int32_t>(t->size()), &err);
    std::u16string in(static_cast<size_t>(n16), u'\0');
    err = U_ZERO_ERROR;
    u_strFromUTF8(reinterpret_cast<UChar*>(&in[0]), n16, nullptr, t->data(), static_cast<int32_t>(t->size()), &err);
    err = U_ZERO_ERROR;
    const int32_t cap = unorm2_normalize(norm, reinterpret_cast<const UChar*>(in.data()), n16, nullptr, 0, &err);
    std::u16string outs(static_cast<size_t>(cap), u'\0');
    err = U_ZERO_ERROR;
    unorm2_normalize(norm, reinterpret_cast<const UChar*>(in.data()), n16, reinterpret_cast<UChar*>(&outs[0]), cap,
                     &err);
    int32_t n8 = 0;
    err = U_ZERO_ERROR;
    u_strToUTF8(nullptr, 0, &n8, reinterpret_cast<const UChar*>(outs.data()), cap, &err);
    std::string out(static_cast<size_t>(n8), '\0');
    err = U_ZERO_ERROR;
    u_strToUTF8(&out[0], n8, nullptr, reinterpret_cast<const UChar*>(outs.data()), cap, &err);
    *t = std::move(out);
  }
};

Status NewUnicodeNormalizer(const std::string& type, const Where& w, std::unique_ptr<Normalizer>* out) {
  UErrorCode err = U_ZERO_ERROR;
  auto n = std::make_unique<UnicodeNormalizer>();
  if (type == "NFC")
    n->norm = unorm2_getNFCInstance(&err);
  else if (type == "NFD")
    n->norm = unorm2_getNFDInstance(&err);
  else if (type == "NFKC")
    n->norm = unorm2_getNFKCInstance(&err);
  else
    n->norm = unorm2_getNFKDInstance(&err);
  if (U_FAILURE(err) || n->norm == nullptr) return w.Error(type + ": ICU has no " + type + " normalizer");
  *out = std::move(n);
  return Status::OK();
}

// ---- pre-tokenizers ----

class SequencePreTokenizer final : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void Split(const std::string& piece, bool at_start, std::vector<std::string>* out) const override {
    std::vector<std::string> cur{piece}, next;
    for (const auto& p : parts) {
      next.clear();
      for (size_t i = 0; i < cur.size(); ++i) p->Split(cur[i], at_start && i == 0, &next);
      cur.swap(next);
    }
    out->insert(out->end(), cur.begin(), cur.end());
  }
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  Pattern pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  void Split(const std::string& piece, bool, std::vector<std::string>* out) const override {
    std::vector<Span> m;
    pattern.FindAll(piece, &m);
    for (std::string& s : SplitBy(piece, m, behavior, invert)) out->push_back(std::move(s));
  }
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  bool add_prefix_space = false;
  std::shared_ptr<Regex> regex;  // null: use_regex false
  void Split(const std::string& piece, bool, std::vector<std::string>* out) const override {
    std::string text = piece;
    if (add_prefix_space && (text.empty() || text[0] != ' ')) text.insert(0, " ");
    std::vector<std::string> words;
    if (regex) {
      std::vector<Span> m;
      regex->FindAll(text, &m);
      words = SplitBy(text, m, SplitBehavior::kIsolated, false);
    } else if (!text.empty()) {
      words.push_back(text);
    }
    for (const std::string& w : words) {
      std::string mapped;
      for (unsigned char c : w) mapped += ByteToUnicode(c);
      out->push_back(std::move(mapped));
    }
  }
};

enum class PrependScheme { kAlways, kFirst, kNever };

Status GetPrependScheme(const Json& j, const Where& w, PrependScheme* out) {
  *out = PrependScheme::kAlways;
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = j["prepend_scheme"].is_string() ? j["prepend_scheme"].get<std::string>() : "";
    if (s == "always")
      *out = PrependScheme::kAlways;
    else if (s == "first")
      *out = PrependScheme::kFirst;
    else if (s == "never")
      *out = PrependScheme::kNever;
    else
      return w.At("prepend_scheme").Error("is " + QuoteJson(j["prepend_scheme"]) + ", not always, first or never");
    return Status::OK();
  }
  bool add = true;  // the older files' add_prefix_space
  KVLAB_RETURN_IF_ERROR(GetBool(j, "add_prefix_space", true, w, &add));
  *out = add ? PrependScheme::kAlways : PrependScheme::kNever;
  return Status::OK();
}

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  std::string replacement = "\xE2\x96\x81";  // U+2581
  PrependScheme scheme = PrependScheme::kAlways;
  bool split = true;
  void Split(const std::string& piece, bool at_start, std::vector<std::string>* out) const override {
    Pattern space;
    space.literal = " ";
    std::string t = ReplaceAll(piece, space, replacement);
    const bool starts = t.compare(0, replacement.size(), replacement) == 0;
    if (!starts && (scheme == PrependScheme::kAlways || (scheme == PrependScheme::kFirst && at_start))) {
      t.insert(0, replacement);
    }
    if (!split) {
      if (!t.empty()) out->push_back(t);
      return;
    }
    Pattern rep;
    rep.literal = replacement;
    std::vector<Span> m;
    rep.FindAll(t, &m);
    for (std::string& s : SplitBy(t, m, SplitBehavior::kMergedWithNext, false)) out->push_back(std::move(s));
  }
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  bool individual = false;
  void Split(const std::string& piece, bool, std::vector<std::string>* out) const override {
    std::vector<Span> m;
    for (size_t i = 0; i < piece.size();) {
      const size_t b = i;
      const uint32_t cp = NextCodePoint(piece, &i);
      if ((U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0) m.emplace_back(b, i);  // char::is_numeric
    }
    const SplitBehavior how = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    for (std::string& s : SplitBy(piece, m, how, false)) out->push_back(std::move(s));
  }
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void Split(const std::string& piece, bool, std::vector<std::string>* out) const override {
    std::vector<Span> m;
    for (size_t i = 0; i < piece.size();) {
      const size_t b = i;
      if (IsUnicodeWhitespace(NextCodePoint(piece, &i))) m.emplace_back(b, i);
    }
    for (std::string& s : SplitBy(piece, m, SplitBehavior::kRemoved, false)) out->push_back(std::move(s));
  }
};

// ---- decoders ----

class SequenceDecoder final : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> parts;
  void Decode(std::vector<std::string>* t) const override {
    for (const auto& p : parts) p->Decode(t);
  }
};

class ByteLevelDecoder final : public Decoder {
 public:
  void Decode(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& t : *tokens) {
      std::string mapped;
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        const int b = UnicodeToByte(NextCodePoint(t, &i));
        if (b < 0)
          all = false;
        else
          mapped.push_back(static_cast<char>(b));
      }
      bytes += all ? mapped : t;  // a token outside the byte map passes as it is
    }
    *tokens = {Utf8Lossy(bytes)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  Pattern pattern;
  std::string content;
  void Decode(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) t = ReplaceAll(t, pattern, content);
  }
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void Decode(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t num_bytes = 0;
    const auto flush = [&]() {
      if (num_bytes == 0) return;
      if (FirstInvalidUtf8(bytes) == std::string::npos)
        out.push_back(bytes);
      else
        for (size_t i = 0; i < num_bytes; ++i) out.push_back("\xEF\xBF\xBD");  // Rust: one U+FFFD a byte
      bytes.clear();
      num_bytes = 0;
    };
    for (std::string& t : *tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
        byte = std::stoi(t.substr(3, 2), nullptr, 16);
      }
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
        ++num_bytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void Decode(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    *tokens = {all};
  }
};

class StripDecoder final : public Decoder {
 public:
  uint32_t content = ' ';
  size_t start = 0, stop = 0;
  void Decode(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      std::vector<Span> chars;
      std::vector<uint32_t> cps;
      for (size_t i = 0; i < t.size();) {
        const size_t b = i;
        cps.push_back(NextCodePoint(t, &i));
        chars.emplace_back(b, i);
      }
      size_t cut_l = 0, cut_r = 0;
      while (cut_l < start && cut_l < cps.size() && cps[cut_l] == content) ++cut_l;
      while (cut_r < stop && cut_r < cps.size() && cps[cps.size() - 1 - cut_r] == content) ++cut_r;
      if (cut_l + cut_r >= cps.size()) {
        t.clear();
        continue;
      }
      t = t.substr(chars[cut_l].first, chars[cps.size() - 1 - cut_r].second - chars[cut_l].first);
    }
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  std::string replacement = "\xE2\x96\x81";
  PrependScheme scheme = PrependScheme::kAlways;
  // Rust: in the first token the replacement is dropped (unless the scheme is never); elsewhere it is a space.
  void Decode(std::vector<std::string>* tokens) const override {
    Pattern rep;
    rep.literal = replacement;
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = ReplaceAll((*tokens)[i], rep, i == 0 && scheme != PrependScheme::kNever ? "" : " ");
    }
  }
};

Status GetChar(const Json& j, const char* key, const std::string& dflt, const Where& w, std::string* out) {
  KVLAB_RETURN_IF_ERROR(GetString(j, key, dflt, w, out));
  if (out->empty() || Utf8CharLen(static_cast<unsigned char>((*out)[0])) != out->size()) {
    return w.At(key).Error("is \"" + *out + "\", not one character");
  }
  return Status::OK();
}

// A "Sequence" stage: its `key` list parsed by `make` (the list's own parser),
// the null entries dropped.
template <typename Seq, typename Stage>
Status ParseSequence(const Json& j, const char* key, const Where& w,
                     Status (*make)(const Json&, const Where&, std::unique_ptr<Stage>*), std::unique_ptr<Stage>* out) {
  const Json* list = nullptr;
  KVLAB_RETURN_IF_ERROR(GetList(j, key, w, &list));
  auto seq = std::make_unique<Seq>();
  for (size_t i = 0; i < list->size(); ++i) {
    std::unique_ptr<Stage> p;
    KVLAB_RETURN_IF_ERROR(make((*list)[i], w.At(key).Index(i), &p));
    if (p) seq->parts.push_back(std::move(p));
  }
  *out = std::move(seq);
  return Status::OK();
}

}  // namespace

Status NewNormalizer(const Json& j, const Where& w, std::unique_ptr<Normalizer>* out) {
  out->reset();
  if (j.is_null()) return Status::OK();
  std::string type;
  KVLAB_RETURN_IF_ERROR(GetType(j, w, &type));
  if (type == "Sequence") {
    return ParseSequence<SequenceNormalizer>(j, "normalizers", w, &NewNormalizer, out);
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceNormalizer>();
    KVLAB_RETURN_IF_ERROR(Pattern::Parse(Field(j, "pattern"), w.At("pattern"), &r->pattern));
    KVLAB_RETURN_IF_ERROR(GetString(j, "content", "", w, &r->content));
    *out = std::move(r);
  } else if (type == "Prepend") {
    auto p = std::make_unique<PrependNormalizer>();
    KVLAB_RETURN_IF_ERROR(GetString(j, "prepend", "", w, &p->prepend));
    *out = std::move(p);
  } else if (type == "Strip") {
    auto s = std::make_unique<StripNormalizer>();
    KVLAB_RETURN_IF_ERROR(GetBool(j, "strip_left", true, w, &s->left));
    KVLAB_RETURN_IF_ERROR(GetBool(j, "strip_right", true, w, &s->right));
    *out = std::move(s);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return NewUnicodeNormalizer(type, w, out);
  } else {
    return Unsupported(w, type, "Sequence, Replace, Prepend, Strip, NFC, NFD, NFKC, NFKD");
  }
  return Status::OK();
}

Status NewPreTokenizer(const Json& j, const Where& w, std::unique_ptr<PreTokenizer>* out) {
  out->reset();
  if (j.is_null()) return Status::OK();
  std::string type;
  KVLAB_RETURN_IF_ERROR(GetType(j, w, &type));
  if (type == "Sequence") {
    return ParseSequence<SequencePreTokenizer>(j, "pretokenizers", w, &NewPreTokenizer, out);
  } else if (type == "Split") {
    auto s = std::make_unique<SplitPreTokenizer>();
    KVLAB_RETURN_IF_ERROR(Pattern::Parse(Field(j, "pattern"), w.At("pattern"), &s->pattern));
    KVLAB_RETURN_IF_ERROR(ParseSplitBehavior(Field(j, "behavior"), w.At("behavior"), &s->behavior));
    KVLAB_RETURN_IF_ERROR(GetBool(j, "invert", false, w, &s->invert));
    *out = std::move(s);
  } else if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelPreTokenizer>();
    bool use_regex = true;
    KVLAB_RETURN_IF_ERROR(GetBool(j, "add_prefix_space", true, w, &b->add_prefix_space));
    KVLAB_RETURN_IF_ERROR(GetBool(j, "use_regex", true, w, &use_regex));
    if (use_regex) {  // GPT-2's pattern, as the Rust crate has it
      KVLAB_RETURN_IF_ERROR(Regex::Compile(
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", w, &b->regex));
    }
    *out = std::move(b);
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspacePreTokenizer>();
    KVLAB_RETURN_IF_ERROR(GetChar(j, "replacement", m->replacement, w, &m->replacement));
    KVLAB_RETURN_IF_ERROR(GetPrependScheme(j, w, &m->scheme));
    KVLAB_RETURN_IF_ERROR(GetBool(j, "split", true, w, &m->split));
    *out = std::move(m);
  } else if (type == "Digits") {
    auto d = std::make_unique<DigitsPreTokenizer>();
    KVLAB_RETURN_IF_ERROR(GetBool(j, "individual_digits", false, w, &d->individual));
    *out = std::move(d);
  } else if (type == "WhitespaceSplit") {
    *out = std::make_unique<WhitespaceSplitPreTokenizer>();
  } else {
    return Unsupported(w, type, "Sequence, Split, ByteLevel, Metaspace, Digits, WhitespaceSplit");
  }
  return Status::OK();
}

Status NewDecoder(const Json& j, const Where& w, std::unique_ptr<Decoder>* out) {
  out->reset();
  if (j.is_null()) return Status::OK();
  std::string type;
  KVLAB_RETURN_IF_ERROR(GetType(j, w, &type));
  if (type == "Sequence") {
    return ParseSequence<SequenceDecoder>(j, "decoders", w, &NewDecoder, out);
  } else if (type == "ByteLevel") {
    *out = std::make_unique<ByteLevelDecoder>();
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceDecoder>();
    KVLAB_RETURN_IF_ERROR(Pattern::Parse(Field(j, "pattern"), w.At("pattern"), &r->pattern));
    KVLAB_RETURN_IF_ERROR(GetString(j, "content", "", w, &r->content));
    *out = std::move(r);
  } else if (type == "ByteFallback") {
    *out = std::make_unique<ByteFallbackDecoder>();
  } else if (type == "Fuse") {
    *out = std::make_unique<FuseDecoder>();
  } else if (type == "Strip") {
    auto s = std::make_unique<StripDecoder>();
    std::string c;
    KVLAB_RETURN_IF_ERROR(GetChar(j, "content", " ", w, &c));
    size_t i = 0;
    s->content = NextCodePoint(c, &i);
    for (const char* key : {"start", "stop"}) {
      if (j.contains(key) && !j[key].is_number_unsigned()) return w.At(key).Error("is not a count");
    }
    s->start = j.value("start", size_t{0});
    s->stop = j.value("stop", size_t{0});
    *out = std::move(s);
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceDecoder>();
    KVLAB_RETURN_IF_ERROR(GetChar(j, "replacement", m->replacement, w, &m->replacement));
    KVLAB_RETURN_IF_ERROR(GetPrependScheme(j, w, &m->scheme));
    *out = std::move(m);
  } else {
    return Unsupported(w, type, "Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace");
  }
  return Status::OK();
}

}  // namespace hf
}  // namespace kvlab
