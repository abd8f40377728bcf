// tokenizer.json: loading, the post-processor, Encode and Decode
// (core/tokenizer/hf_tokenizer.h). The pipeline stages are in hf_tokenizer_stages.cpp, the
// added-token splitting and BPE in hf_tokenizer_bpe.cpp, regex and UTF-8 helpers
// in hf_tokenizer_text.cpp.
#include "core/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/tokenizer/hf_tokenizer_parts.h"

namespace kvlab {

namespace {

using hf::AddedToken;
using hf::Bpe;
using hf::Json;
using hf::Piece;
using hf::TokenTrie;
using hf::Where;

class HfTokenizer final : public Tokenizer {
 public:
  std::string path;
  Bpe bpe;
  std::vector<AddedToken> added;
  TokenTrie raw_trie, normalized_trie;
  std::unique_ptr<hf::Normalizer> normalizer;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer;
  std::unique_ptr<hf::Decoder> decoder;
  std::vector<int32_t> template_prefix, template_suffix;
  std::vector<std::string> id_to_token;
  std::vector<char> is_special;
  bool clean_up_spaces = false;
  int32_t bos = -1, eos = -1;

  std::string Name() const override { return "tokenizer.json (" + path + ")"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token.size()); }
  int32_t bos_id() const override { return bos; }
  int32_t eos_id() const override { return eos; }

  Status Encode(const std::string& text, bool add_bos, std::vector<int32_t>* ids) const override {
    ids->clear();
    const size_t bad = hf::FirstInvalidUtf8(text);
    if (bad != std::string::npos) {
      return Status::InvalidArgument("text is not valid UTF-8 (byte " + std::to_string(bad) + "); " + Name() +
                                     " encodes Unicode text");
    }
    if (add_bos) ids->insert(ids->end(), template_prefix.begin(), template_prefix.end());
    for (const Piece& p : hf::SplitAdded(text, raw_trie, added)) {
      if (p.added >= 0) {
        ids->push_back(added[p.added].id);
        continue;
      }
      std::string normalized = p.text;
      if (normalizer) normalizer->Normalize(&normalized);
      if (normalized.empty()) continue;
      for (const Piece& q : hf::SplitAdded(normalized, normalized_trie, added)) {
        if (q.added >= 0) {
          ids->push_back(added[q.added].id);
          continue;
        }
        std::vector<std::string> words;
        if (pre_tokenizer)
          pre_tokenizer->Split(q.text, p.offset == 0 && q.offset == 0, &words);
        else
          words.push_back(q.text);
        for (const std::string& w : words) EncodeWordCached(w, ids);
      }
    }
    if (add_bos) ids->insert(ids->end(), template_suffix.begin(), template_suffix.end());
    return Status::OK();
  }

  Status Decode(const std::vector<int32_t>& ids, std::string* text) const override {
    std::vector<std::string> tokens;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size() || is_special[id] || id_to_token[id].empty()) continue;
      tokens.push_back(id_to_token[id]);
    }
    text->clear();
    if (decoder) {
      decoder->Decode(&tokens);
      for (const std::string& t : tokens) *text += t;
    } else {
      for (size_t i = 0; i < tokens.size(); ++i) *text += (i ? " " : "") + tokens[i];
    }
    if (clean_up_spaces) CleanUpTokenization(text);
    return Status::OK();
  }

 private:
  // transformers' clean_up_tokenization, applied when tokenizer_config.json asks for it.
  static void CleanUpTokenization(std::string* t) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
        {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) {
      hf::Pattern p;
      p.literal = from;
      std::vector<hf::Span> m;
      p.FindAll(*t, &m);
      if (m.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& s : m) {
        out.append(*t, prev, s.first - prev);
        out += to;
        prev = s.second;
      }
      out.append(*t, prev, std::string::npos);
      *t = std::move(out);
    }
  }

  void EncodeWordCached(const std::string& word, std::vector<int32_t>* ids) const {
    constexpr size_t kMaxCachedBytes = 256, kMaxEntries = 1 << 16;
    if (word.size() >= kMaxCachedBytes) return bpe.EncodeWord(word, ids);
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        ids->insert(ids->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> w;
    bpe.EncodeWord(word, &w);
    ids->insert(ids->end(), w.begin(), w.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxEntries) cache_.clear();
    cache_.emplace(word, std::move(w));
  }

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// tokenizer.json or tokenizer_config.json, bounded in size and depth (untrusted.h).
Status ReadJsonFile(const std::string& path, Json* out) {
  std::string text;
  const Status read = ReadFileBounded(path, kMaxTokenizerBytes, &text);
  if (read.code() == Status::Code::kNotFound) return Status::IOError(path + ": cannot open");
  KVLAB_RETURN_IF_ERROR(read);
  KVLAB_RETURN_IF_ERROR(CheckJsonText(text, path, kMaxTokenizerBytes));
  *out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) return Status::InvalidArgument(path + ": not valid JSON");
  if (!out->is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  return Status::OK();
}

Status GetFlag(const Json& j, const char* key, bool dflt, const Where& w, bool* out) {
  *out = dflt;
  if (!j.contains(key) || j[key].is_null()) return Status::OK();
  if (!j[key].is_boolean()) return w.At(key).Error("is " + QuoteJson(j[key]) + ", not true or false");
  *out = j[key].get<bool>();
  return Status::OK();
}

Status LoadMerges(const Json& merges, const Where& w, Bpe* bpe) {
  if (!merges.is_array()) return w.Error("is missing or not a list");
  bpe->merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return w.Index(i).Error("is \"" + s + "\", not two tokens separated by one space");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return w.Index(i).Error("is " + QuoteJson(m) + ", not \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = bpe->vocab.find(a), ib = bpe->vocab.find(b), iab = bpe->vocab.find(a + b);
    for (const auto& [it, tok] : {std::make_pair(ia, a), std::make_pair(ib, b)}) {
      if (it == bpe->vocab.end()) return w.Index(i).Error("names \"" + tok + "\", which is not in model.vocab");
    }
    if (iab == bpe->vocab.end()) return w.Index(i).Error("makes \"" + a + b + "\", which is not in model.vocab");
    // A repeated merge takes its later rank, as in the Rust crate and tokenizers.js (both fill a map in order).
    bpe->merges[Bpe::Key(ia->second, ib->second)] = {static_cast<int32_t>(i), iab->second};
  }
  return Status::OK();
}

// A token id: an integer in [0, kMaxVocabSize), the bound config.json's
// vocab_size has too (the Rust crate's ids are u32; kvlab sizes its tables by them).
Status GetTokenId(const Json& id, const std::string& token, const Where& w, int32_t* out) {
  if (!id.is_number_integer()) return w.Error("\"" + token + "\" has id " + QuoteJson(id) + ", not an integer");
  const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(kMaxVocabSize)
                                                : id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxVocabSize;
  if (!in_range) {
    return w.Error("\"" + token + "\" has id " + QuoteJson(id) + ", outside the accepted range [0, " +
                   std::to_string(kMaxVocabSize - 1) + "]");
  }
  *out = static_cast<int32_t>(id.get<int64_t>());
  return Status::OK();
}

Status LoadModel(const Json& j, const Where& w, Bpe* bpe) {
  if (!j.is_object()) return w.Error("is missing or not an object");
  std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  // Files older than the "type" key: a vocabulary object with merges is BPE (as the Rust crate infers).
  if (!j.contains("type") && hf::Field(j, "vocab").is_object() && hf::Field(j, "merges").is_array()) type = "BPE";
  if (type != "BPE") {
    return w.At("type").Error((type.empty() ? std::string("is missing") : "\"" + type + "\" is not supported") +
                              " (kvlab reads BPE models)");
  }
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      !(j["dropout"].is_number() && j["dropout"].get<double>() == 0)) {
    return w.At("dropout").Error("is " + QuoteJson(j["dropout"]) + "; kvlab encodes deterministically (null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_string() && j[key].get<std::string>().empty())) {
      return w.At(key).Error("is " + QuoteJson(j[key]) + "; kvlab reads BPE models without one");
    }
  }
  if (!j.contains("vocab") || !j["vocab"].is_object()) return w.At("vocab").Error("is missing or not an object");
  bpe->vocab.reserve(j["vocab"].size());
  // Each id names one token. The Rust crate's id-to-token map would keep one of
  // two tokens sharing an id, so encoding and decoding would disagree.
  std::unordered_map<int32_t, const std::string*> token_of;
  token_of.reserve(j["vocab"].size());
  for (const auto& item : j["vocab"].items()) {
    const std::string& tok = item.key();
    int32_t id = 0;
    KVLAB_RETURN_IF_ERROR(GetTokenId(item.value(), tok, w.At("vocab"), &id));
    const auto [other, fresh] = token_of.emplace(id, &tok);
    if (!fresh) {
      return w.At("vocab").Error("tokens \"" + *other->second + "\" and \"" + tok + "\" both have id " +
                                 std::to_string(id) + " (each id names one token)");
    }
    bpe->vocab[tok] = id;
  }
  KVLAB_RETURN_IF_ERROR(GetFlag(j, "byte_fallback", false, w, &bpe->byte_fallback));
  KVLAB_RETURN_IF_ERROR(GetFlag(j, "fuse_unk", false, w, &bpe->fuse_unk));
  KVLAB_RETURN_IF_ERROR(GetFlag(j, "ignore_merges", false, w, &bpe->ignore_merges));
  if (j.contains("unk_token") && !j["unk_token"].is_null()) {
    const Json& u = j["unk_token"];
    auto it = u.is_string() ? bpe->vocab.find(u.get<std::string>()) : bpe->vocab.end();
    if (it == bpe->vocab.end()) return w.At("unk_token").Error("is " + QuoteJson(u) + ", which is not in model.vocab");
    bpe->unk_id = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = bpe->vocab.find(name);
    bpe->byte_ids[b] = it == bpe->vocab.end() ? -1 : it->second;
  }
  return LoadMerges(hf::Field(j, "merges"), w.At("merges"), bpe);
}

Status LoadAddedTokens(const Json& j, const Where& w, std::vector<AddedToken>* out) {
  if (j.is_null()) return Status::OK();
  if (!j.is_array()) return w.Error("is not a list");
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& a = j[i];
    const Where wi = w.Index(i);
    AddedToken t;
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty()) {
      return wi.At("content").Error("is missing or empty");
    }
    t.content = a["content"].get<std::string>();
    if (!a.contains("id")) return wi.At("id").Error("is missing");
    KVLAB_RETURN_IF_ERROR(GetTokenId(a["id"], t.content, wi, &t.id));
    KVLAB_RETURN_IF_ERROR(GetFlag(a, "special", false, wi, &t.special));
    KVLAB_RETURN_IF_ERROR(GetFlag(a, "normalized", !t.special, wi, &t.normalized));
    KVLAB_RETURN_IF_ERROR(GetFlag(a, "lstrip", false, wi, &t.lstrip));
    KVLAB_RETURN_IF_ERROR(GetFlag(a, "rstrip", false, wi, &t.rstrip));
    KVLAB_RETURN_IF_ERROR(GetFlag(a, "single_word", false, wi, &t.single_word));
    out->push_back(std::move(t));
  }
  return Status::OK();
}

// Each id names one token and each token has one id. An added token may
// repeat a model.vocab entry, content and id both (Gemma 3 lists 6,414 such),
// or another added token. The Rust crate gives an added token whose content
// has another id, or whose id is taken, an id of its own (with a warning):
// kvlab would encode it differently, so such a file is refused.
Status CheckAddedIds(const Bpe& bpe, const std::vector<AddedToken>& added, const Where& w) {
  std::unordered_map<int32_t, const std::string*> vocab_token;
  vocab_token.reserve(bpe.vocab.size());
  for (const auto& [tok, id] : bpe.vocab) vocab_token.emplace(id, &tok);
  std::unordered_map<int32_t, size_t> added_with_id;
  std::unordered_map<std::string, size_t> added_with_content;
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    const std::string token = "\"" + a.content + "\" has id " + std::to_string(a.id);
    const auto in_vocab = bpe.vocab.find(a.content);
    if (in_vocab != bpe.vocab.end() && in_vocab->second != a.id) {
      return w.Index(i).Error(token + ", but model.vocab gives it id " + std::to_string(in_vocab->second) +
                              " (each token has one id)");
    }
    const auto taken = vocab_token.find(a.id);
    if (taken != vocab_token.end() && *taken->second != a.content) {
      return w.Index(i).Error(token + ", which model.vocab gives to \"" + *taken->second +
                              "\" (each id names one token)");
    }
    const auto [by_id, new_id] = added_with_id.emplace(a.id, i);
    if (!new_id && added[by_id->second].content != a.content) {
      return w.Index(i).Error(token + ", which added_tokens[" + std::to_string(by_id->second) + "] \"" +
                              added[by_id->second].content + "\" has too (each id names one token)");
    }
    const auto [by_content, new_content] = added_with_content.emplace(a.content, i);
    if (!new_content && added[by_content->second].id != a.id) {
      return w.Index(i).Error(token + ", but added_tokens[" + std::to_string(by_content->second) + "] gives it id " +
                              std::to_string(added[by_content->second].id) + " (each token has one id)");
    }
  }
  return Status::OK();
}

// A post-processor as the special tokens it puts before and after the text.
Status LoadPostProcessor(const Json& j, const Where& w, std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (j.is_null()) return Status::OK();
  const std::string type =
      j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (type == "ByteLevel") return Status::OK();  // offsets only
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array())
      return w.At("processors").Error("is missing or not a list");
    for (size_t i = 0; i < j["processors"].size(); ++i) {  // each wraps what the ones before produced
      std::vector<int32_t> pre, post;
      KVLAB_RETURN_IF_ERROR(LoadPostProcessor(j["processors"][i], w.At("processors").Index(i), &pre, &post));
      prefix->insert(prefix->begin(), pre.begin(), pre.end());
      suffix->insert(suffix->end(), post.begin(), post.end());
    }
    return Status::OK();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {  // cls A sep
    for (const char* key : {"cls", "sep"}) {
      const Json& p = j.value(key, Json());
      if (!p.is_array() || p.size() != 2 || !p[1].is_number_integer()) return w.At(key).Error("is not [token, id]");
      (std::string(key) == "cls" ? prefix : suffix)->push_back(p[1].get<int32_t>());
    }
    return Status::OK();
  }
  if (type != "TemplateProcessing") {
    return w.At("type").Error("\"" + type +
                              "\" is not supported (kvlab reads TemplateProcessing, ByteLevel, Sequence, "
                              "BertProcessing, RobertaProcessing)");
  }
  const Json& single = hf::Field(j, "single");
  const Json& specials = hf::Field(j, "special_tokens");
  if (!single.is_array()) return w.At("single").Error("is missing or not a list");
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const Json& item = single[i];
    const Where wi = w.At("single").Index(i);
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "") != "A" || seen_a) return wi.Error("is not the one sequence A");
      seen_a = true;
    } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id")) {
      const Json& name = item["SpecialToken"]["id"];
      if (!name.is_string() || !specials.contains(name.get<std::string>()) ||
          !specials[name.get<std::string>()].contains("ids") || !specials[name.get<std::string>()]["ids"].is_array()) {
        return wi.Error("names " + QuoteJson(name) + ", which post_processor.special_tokens does not give ids for");
      }
      for (const Json& id : specials[name.get<std::string>()]["ids"]) {
        if (!id.is_number_integer()) return w.At("special_tokens").Error("has a non-integer id " + QuoteJson(id));
        (seen_a ? suffix : prefix)->push_back(id.get<int32_t>());
      }
    } else {
      return wi.Error("is neither a SpecialToken nor a Sequence");
    }
  }
  if (!seen_a) return w.At("single").Error("has no Sequence A");
  return Status::OK();
}

// The id of a token named in tokenizer_config.json ("<s>" or {"content": "<s>"}); -1 for null.
Status ConfigTokenId(const Json& cfg, const char* key, const std::string& file, const HfTokenizer& t,
                     const std::unordered_map<std::string, int32_t>& added_ids, int32_t* out) {
  *out = -1;
  if (!cfg.contains(key) || cfg[key].is_null()) return Status::OK();
  const Json& v = cfg[key];
  const Json& content = v.is_object() ? hf::Field(v, "content") : v;
  if (!content.is_string()) return Status::InvalidArgument(file + ": " + key + " is " + QuoteJson(v) + ", not a token");
  const std::string s = content.get<std::string>();
  auto a = added_ids.find(s);
  if (a != added_ids.end())
    *out = a->second;
  else if (t.bpe.vocab.count(s))
    *out = t.bpe.vocab.at(s);
  else
    return Status::InvalidArgument(file + ": " + key + " \"" + QuoteBytes(s) + "\" is not a token of " + t.path);
  return Status::OK();
}

Status LoadTokenizerConfig(const std::string& file, HfTokenizer* t) {
  Json cfg;
  KVLAB_RETURN_IF_ERROR(ReadJsonFile(file, &cfg));
  std::unordered_map<std::string, int32_t> added_ids;
  for (const AddedToken& a : t->added) added_ids.emplace(a.content, a.id);
  int32_t bos = -1, eos = -1;
  KVLAB_RETURN_IF_ERROR(ConfigTokenId(cfg, "bos_token", file, *t, added_ids, &bos));
  KVLAB_RETURN_IF_ERROR(ConfigTokenId(cfg, "eos_token", file, *t, added_ids, &eos));
  if (t->bos < 0) t->bos = bos;
  if (t->eos < 0) t->eos = eos;
  KVLAB_RETURN_IF_ERROR(GetFlag(cfg, "clean_up_tokenization_spaces", false, Where{file, ""}, &t->clean_up_spaces));
  // Decode skips these too (transformers' all_special_ids).
  for (const Json& s : hf::Field(cfg, "additional_special_tokens")) {
    const Json& c = s.is_object() ? hf::Field(s, "content") : s;
    if (!c.is_string()) continue;
    auto a = added_ids.find(c.get<std::string>());
    if (a != added_ids.end() && a->second < t->vocab_size()) t->is_special[a->second] = 1;
  }
  return Status::OK();
}

Status LoadHfTokenizer(const std::string& path, HfTokenizer* t) {
  Json j;
  KVLAB_RETURN_IF_ERROR(ReadJsonFile(path, &j));
  t->path = path;
  const Where root{path, ""};
  if (!j.contains("model")) return root.At("model").Error("is missing");
  KVLAB_RETURN_IF_ERROR(LoadModel(j["model"], root.At("model"), &t->bpe));
  KVLAB_RETURN_IF_ERROR(LoadAddedTokens(hf::Field(j, "added_tokens"), root.At("added_tokens"), &t->added));
  KVLAB_RETURN_IF_ERROR(CheckAddedIds(t->bpe, t->added, root.At("added_tokens")));
  if (j.contains("truncation") && !j["truncation"].is_null()) {
    return root.At("truncation").Error("is set; kvlab does not truncate (set it to null)");
  }
  if (j.contains("padding") && j["padding"].is_object() && hf::Field(j["padding"], "strategy").is_object()) {
    return root.At("padding.strategy").Error("is a fixed length; kvlab does not pad (set padding to null)");
  }
  KVLAB_RETURN_IF_ERROR(hf::NewNormalizer(hf::Field(j, "normalizer"), root.At("normalizer"), &t->normalizer));
  KVLAB_RETURN_IF_ERROR(
      hf::NewPreTokenizer(hf::Field(j, "pre_tokenizer"), root.At("pre_tokenizer"), &t->pre_tokenizer));
  KVLAB_RETURN_IF_ERROR(hf::NewDecoder(hf::Field(j, "decoder"), root.At("decoder"), &t->decoder));
  KVLAB_RETURN_IF_ERROR(LoadPostProcessor(hf::Field(j, "post_processor"), root.At("post_processor"),
                                          &t->template_prefix, &t->template_suffix));

  int32_t size = 0;
  for (const auto& [tok, id] : t->bpe.vocab) size = std::max(size, id + 1);
  for (const AddedToken& a : t->added) size = std::max(size, a.id + 1);
  t->id_to_token.assign(size, "");
  t->is_special.assign(size, 0);
  for (const auto& [tok, id] : t->bpe.vocab) t->id_to_token[id] = tok;
  for (size_t i = 0; i < t->added.size(); ++i) {
    AddedToken& a = t->added[i];
    t->id_to_token[a.id] = a.content;
    if (a.special) t->is_special[a.id] = 1;
    if (!a.normalized || !t->normalizer) {
      t->raw_trie.Add(a.content, static_cast<int32_t>(i));
    } else {  // matched in the normalized text, as its normalized form
      std::string n = a.content;
      t->normalizer->Normalize(&n);
      if (!n.empty()) t->normalized_trie.Add(n, static_cast<int32_t>(i));
    }
  }
  for (const auto* ids : {&t->template_prefix, &t->template_suffix}) {
    for (int32_t id : *ids) {
      if (id < 0 || id >= size) {
        return root.At("post_processor").Error("names id " + std::to_string(id) + ", outside the vocabulary");
      }
    }
  }

  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  const std::string config = dir + "/tokenizer_config.json";
  if (std::ifstream(config).good()) KVLAB_RETURN_IF_ERROR(LoadTokenizerConfig(config, t));
  return Status::OK();
}
}  // namespace

Status NewHfTokenizer(const std::string& tokenizer_json, int64_t bos_id, int64_t eos_id,
                      std::unique_ptr<Tokenizer>* out) {
  auto t = std::make_unique<HfTokenizer>();
  t->bos = static_cast<int32_t>(bos_id);
  t->eos = static_cast<int32_t>(eos_id);
  try {
    KVLAB_RETURN_IF_ERROR(LoadHfTokenizer(tokenizer_json, t.get()));
  } catch (const nlohmann::json::exception& e) {  // a value of a type the checks above did not foresee
    return Status::InvalidArgument(tokenizer_json + ": " + QuoteBytes(e.what(), 240));
  }
  *out = std::move(t);
  return Status::OK();
}
}  // namespace kvlab
