// RULER's synthetic tasks: a transcription of NVIDIA/RULER's generators
// (scripts/data/synthetic/niah.py, variable_tracking.py,
// common_words_extraction.py, freq_words_extraction.py); the scoring is in
// ruler_scoring.cpp. Each sample's random choices are made once from its
// seed; the haystack is then sized by bisection to the largest that fits the
// length. One file past the usual size: the four generators share their
// drafting and rendering helpers, and the transcription reads best whole.
#include "datasets/tasks/ruler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "datasets/tasks/ruler_internal.h"
#include "datasets/tasks/tasks.h"

namespace kvlab {

namespace {

// ---- RULER's text (scripts/data/synthetic/constants.py, niah.py, variable_tracking.py) ----

constexpr char kNoise[] = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr char kNeedle[] = "One of the special magic {type_needle_v} for {key} is: {value}.";
// Each template is RULER's task template followed by its answer prefix, as
// scripts/data/prepare.py joins them for the base (no chat) model template.
constexpr char kNiahTemplate[] =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. I will quiz you "
    "about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic {type_needle_v} for {query} "
    "mentioned in the provided text?";
constexpr char kNiahPrefix[] = " The special magic {type_needle_v} for {query} mentioned in the provided text are";
constexpr char kVtTemplate[] =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\nQuestion: Find "
    "all variables that are assigned the value {query} in the text above.";
constexpr char kVtPrefix[] =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables are assigned the "
    "value {query}, they are: ";
constexpr char kCweTemplate[] =
    "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
    "appear most often.\n{context}\nQuestion: What are the 10 most common words in the above list?";
constexpr char kCwePrefix[] = " Answer: The top 10 words that appear most often in the list are:";
constexpr char kFweTemplate[] =
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently appeared "
    "coded words. {context}\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three "
    "most frequently appeared words in the above coded text?";
constexpr char kFwePrefix[] = " Answer: According to the coded text above, the three most frequently appeared words are:";

// RULER's synthetic.yaml: the niah variants.
struct NiahConfig {
  const char* name;
  const char* haystack;  // noise | essay | needle
  const char* type_k;    // words | numbers | uuids
  const char* type_v;
  int num_k, num_v, num_q;
};
constexpr NiahConfig kNiah[] = {
    {"niah_single_1", "noise", "words", "numbers", 1, 1, 1},   {"niah_single_2", "essay", "words", "numbers", 1, 1, 1},
    {"niah_single_3", "essay", "words", "uuids", 1, 1, 1},     {"niah_multikey_1", "essay", "words", "numbers", 4, 1, 1},
    {"niah_multikey_2", "needle", "words", "numbers", 1, 1, 1}, {"niah_multikey_3", "needle", "uuids", "uuids", 1, 1, 1},
    {"niah_multivalue", "essay", "words", "numbers", 1, 4, 1}, {"niah_multiquery", "essay", "words", "numbers", 1, 1, 4},
};

const NiahConfig* FindNiah(const std::string& name) {
  for (const NiahConfig& c : kNiah) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// Python's str.replace: every occurrence, left to right.
std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Python's str.format for named fields: one pass over the template, so a
// value holding "{query}" is not formatted again. *context_at: where {context}
// went (npos if absent).
std::string Format(const std::string& t, const std::map<std::string, std::string>& fields, size_t* context_at = nullptr) {
  std::string out;
  if (context_at != nullptr) *context_at = std::string::npos;
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '{') {
      const size_t close = t.find('}', i);
      const auto it = close == std::string::npos ? fields.end() : fields.find(t.substr(i + 1, close - i - 1));
      if (it != fields.end()) {
        if (it->first == "context" && context_at != nullptr) *context_at = out.size();
        out += it->second;
        i = close + 1;
        continue;
      }
    }
    out += t[i++];
  }
  return out;
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string Join(const std::vector<std::string>& v, const std::string& sep, size_t begin = 0, size_t end = std::string::npos) {
  std::string out;
  end = std::min(end, v.size());
  for (size_t i = begin; i < end; ++i) {
    if (i > begin) out += sep;
    out += v[i];
  }
  return out;
}

const std::vector<std::string>& Adjectives() {
  static const std::vector<std::string> w = SplitWords(ruler_internal::kRulerAdjectives);
  return w;
}
const std::vector<std::string>& Nouns() {
  static const std::vector<std::string> w = SplitWords(ruler_internal::kRulerNouns);
  return w;
}
const std::vector<std::string>& Verbs() {
  static const std::vector<std::string> w = SplitWords(ruler_internal::kRulerVerbs);
  return w;
}

template <typename T>
void Shuffle(std::vector<T>* v, SplitMix* rng) {
  for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[static_cast<size_t>(rng->Below(i))]);
}

// A seed for one purpose of a sample (SplitMix of the sample's seed and a tag).
uint64_t SubSeed(uint64_t seed, uint64_t tag) {
  SplitMix m(seed ^ (tag * 0x9e3779b97f4a7c15ull));
  return m.Next();
}

// ---- RULER's random values ----

std::string RandomNumber(SplitMix* rng) { return std::to_string(1000000 + rng->Below(9000000)); }  // 7 digits

std::string RandomWord(SplitMix* rng) {
  const std::vector<std::string>& adj = Adjectives();
  const std::vector<std::string>& noun = Nouns();
  return adj[static_cast<size_t>(rng->Below(adj.size()))] + "-" + noun[static_cast<size_t>(rng->Below(noun.size()))];
}

// uuid.UUID(int=random.getrandbits(128), version=4): version nibble 4, variant bits 10.
std::string RandomUuid(SplitMix* rng) {
  uint64_t hi = rng->Next(), lo = rng->Next();
  hi = (hi & ~0xf000ull) | 0x4000ull;
  lo = (lo & ~(0xc000ull << 48)) | (0x8000ull << 48);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(hi >> 32),
                static_cast<unsigned long long>((hi >> 16) & 0xffff), static_cast<unsigned long long>(hi & 0xffff),
                static_cast<unsigned long long>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffull));
  return buf;
}

std::string RandomOf(const std::string& type, SplitMix* rng) {
  if (type == "numbers") return RandomNumber(rng);
  if (type == "uuids") return RandomUuid(rng);
  return RandomWord(rng);
}

std::string RandomUpper(size_t k, SplitMix* rng) {
  std::string s;
  for (size_t i = 0; i < k; ++i) s += static_cast<char>('A' + rng->Below(26));
  return s;
}

double DrawnDepth(SplitMix* rng, std::vector<int>* pool) {
  if (pool->empty()) *pool = ruler_internal::RulerDepths();
  const size_t i = static_cast<size_t>(rng->Below(pool->size()));
  const int d = (*pool)[i];
  pool->erase(pool->begin() + static_cast<std::ptrdiff_t>(i));  // random.sample: distinct depths
  return d / 100.0;
}

// ---- haystacks sized in words ----

// The first `chars` bytes of `word` (at most all of it), not cutting a UTF-8 sequence.
std::string Prefix(const std::string& word, int64_t chars) {
  size_t n = std::min(word.size(), static_cast<size_t>(std::max<int64_t>(0, chars)));
  while (n > 0 && n < word.size() && (static_cast<unsigned char>(word[n]) & 0xc0) == 0x80) --n;
  return word.substr(0, n);
}

// An endless stream of units (noise blocks, or distractor needles) cut to
// `fill` words and `chars` characters of the next: whole units, then the
// next one's first words.
class UnitStream {
 public:
  explicit UnitStream(std::function<std::string(size_t)> unit) : unit_(std::move(unit)) {}
  std::vector<std::string> Take(int64_t fill, int64_t chars) {
    std::vector<std::string> out;
    int64_t left = fill;
    for (size_t j = 0;; ++j) {
      const std::vector<std::string>& w = WordsOf(j);
      if (static_cast<int64_t>(w.size()) <= left) {
        if (left == 0 && chars <= 0) break;
        if (static_cast<int64_t>(w.size()) < left || chars <= 0) {
          out.push_back(Join(w, " "));
          left -= static_cast<int64_t>(w.size());
          if (left == 0 && chars <= 0) break;
          continue;
        }
      }
      // The last unit: `left` words, then part of the next word.
      std::string last = Join(w, " ", 0, static_cast<size_t>(left));
      const std::string part = static_cast<size_t>(left) < w.size() ? Prefix(w[static_cast<size_t>(left)], chars) : "";
      if (!part.empty()) last += (last.empty() ? "" : " ") + part;
      if (!last.empty()) out.push_back(last);
      break;
    }
    return out;
  }

 private:
  const std::vector<std::string>& WordsOf(size_t j) {
    while (words_.size() <= j) words_.push_back(SplitWords(unit_(words_.size())));
    return words_[j];
  }
  std::function<std::string(size_t)> unit_;
  std::vector<std::vector<std::string>> words_;
};

// The essay's words from a seeded sentence start, wrapping around (RULER
// starts at the essays' first word, and repeats them when a length needs more).
class EssayStream {
 public:
  EssayStream(const std::string& text, uint64_t seed) : text_(text) {
    SplitMix rng(seed);
    pos_ = text_.empty() ? 0 : static_cast<size_t>(rng.Below(text_.size()));
    // To the start of a sentence: past the next newline or ". ", "? ", "! " before a capital.
    for (size_t i = pos_; i + 1 < text_.size(); ++i) {
      const bool end = text_[i] == '\n' || ((text_[i] == '.' || text_[i] == '?' || text_[i] == '!') && text_[i + 1] == ' ');
      if (!end) continue;
      size_t j = i + 1;
      while (j < text_.size() && std::isspace(static_cast<unsigned char>(text_[j]))) ++j;
      if (j < text_.size() && std::isupper(static_cast<unsigned char>(text_[j]))) {
        pos_ = j;
        break;
      }
    }
  }
  std::string Take(int64_t fill, int64_t chars) {
    while (static_cast<int64_t>(words_.size()) < fill + 1) Next();
    std::string out = Join(words_, " ", 0, static_cast<size_t>(fill));
    const std::string part = Prefix(words_[static_cast<size_t>(fill)], chars);
    if (!part.empty()) out += (out.empty() ? "" : " ") + part;
    return out;
  }

 private:
  void Next() {
    for (int wraps = 0; wraps < 2; ++wraps) {
      while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ < text_.size()) break;
      pos_ = 0;
    }
    size_t j = pos_;
    while (j < text_.size() && !std::isspace(static_cast<unsigned char>(text_[j]))) ++j;
    words_.push_back(text_.substr(pos_, j - pos_));
    pos_ = j;
  }
  const std::string& text_;
  size_t pos_ = 0;
  std::vector<std::string> words_;
};

// One rendering of a sample at a haystack size.
struct Rendered {
  std::string prompt, answer_prefix, needle;
  std::vector<std::string> outputs;
  int64_t needle_offset = -1, context_begin = 0, context_end = 0;
};

// Appends items joined by `sep`; returns where item `mark` started (npos if none).
size_t JoinMarked(const std::vector<std::string>& items, const std::string& sep, size_t mark, std::string* out) {
  size_t at = std::string::npos;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) *out += sep;
    if (i == mark) at = out->size();
    *out += items[i];
  }
  return at;
}

// ---- niah ----

struct NiahDraft {
  const NiahConfig* c = nullptr;
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;
  std::vector<std::string> needles;  // in RULER's shuffled order
  std::vector<double> depths;        // per needle
  size_t target = 0;                 // the needle whose depth was asked for
  std::string query;
  std::vector<std::string> answers;
  std::string type_v;                // as the template reads it (singular for one answer)
};

void DraftNiah(const NiahConfig& c, double depth, SplitMix* rng, NiahDraft* d) {
  d->c = &c;
  const int num_k = std::max(c.num_k, c.num_q);
  std::set<std::string> seen;
  std::vector<std::pair<std::string, std::pair<int, int>>> needles;  // text, (key, value index)
  for (int k = 0; k < num_k; ++k) {
    std::string key;
    do key = RandomOf(c.type_k, rng); while (!seen.insert(key).second);
    d->keys.push_back(key);
    d->values.emplace_back();
    for (int v = 0; v < c.num_v; ++v) {
      d->values.back().push_back(RandomOf(c.type_v, rng));
      needles.push_back({Format(kNeedle, {{"type_needle_v", c.type_v}, {"key", key}, {"value", d->values.back().back()}}),
                         {k, v}});
    }
  }
  Shuffle(&needles, rng);
  // The keys asked (random.sample), their values the answers.
  std::vector<int> idx(static_cast<size_t>(num_k));
  for (int i = 0; i < num_k; ++i) idx[static_cast<size_t>(i)] = i;
  Shuffle(&idx, rng);
  idx.resize(static_cast<size_t>(c.num_q));
  std::vector<std::string> queries;
  for (int i : idx) {
    queries.push_back(d->keys[static_cast<size_t>(i)]);
    for (const std::string& v : d->values[static_cast<size_t>(i)]) d->answers.push_back(v);
  }
  d->query = queries.size() > 1 ? Join(queries, ", ", 0, queries.size() - 1) + ", and " + queries.back() : queries[0];
  std::vector<int> pool = ruler_internal::RulerDepths();
  for (size_t i = 0; i < needles.size(); ++i) {
    d->needles.push_back(needles[i].first);
    const bool is_target = needles[i].second.first == idx[0] && needles[i].second.second == 0;
    if (is_target) d->target = i;
    d->depths.push_back(is_target && depth >= 0 ? depth : DrawnDepth(rng, &pool));
  }
  d->type_v = c.type_v;
  if (c.num_q * c.num_v == 1) d->type_v.pop_back();  // "numbers" -> "number"
}

std::string NiahTemplate(const NiahConfig& c) {
  std::string t = std::string(kNiahTemplate) + kNiahPrefix;
  if (c.num_q * c.num_v == 1) {  // RULER's edits for a single answer, in its order
    t = ReplaceAll(t, "Some", "A");
    t = ReplaceAll(t, "are all", "is");
    t = ReplaceAll(t, "are", "is");
    t = ReplaceAll(t, "answers", "answer");
  }
  return t;
}

void RenderNiah(const NiahDraft& d, int64_t fill, int64_t chars, EssayStream* essay, UnitStream* units, Rendered* r) {
  const size_t n_needles = d.needles.size();
  std::vector<size_t> order(n_needles);
  for (size_t i = 0; i < n_needles; ++i) order[i] = i;
  std::string context;
  size_t target_at = std::string::npos;
  if (std::string(d.c->haystack) == "essay") {
    const std::vector<std::string> sents = ruler_internal::SplitSentences(essay->Take(fill, chars));
    const size_t n = sents.size();
    std::vector<size_t> pos(n_needles);
    for (size_t i = 0; i < n_needles; ++i) pos[i] = std::min(n, static_cast<size_t>(static_cast<double>(n) * d.depths[i]));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pos[a] < pos[b]; });
    // RULER: [" ".join(sents[last:next]), needle, ...] joined by " ".
    std::vector<std::string> pieces;
    size_t last = 0, mark = std::string::npos;
    for (size_t k = 0; k <= n_needles; ++k) {
      const size_t next = k < n_needles ? pos[order[k]] : n;
      pieces.push_back(Join(sents, " ", last, next));
      last = next;
      if (k < n_needles) {
        if (order[k] == d.target) mark = pieces.size();
        pieces.push_back(d.needles[order[k]]);
      }
    }
    target_at = JoinMarked(pieces, " ", mark, &context);
  } else {
    const std::vector<std::string> hay = units->Take(fill, chars);
    const size_t n = hay.size();
    std::vector<size_t> pos(n_needles);
    for (size_t i = 0; i < n_needles; ++i) pos[i] = std::min(n, static_cast<size_t>(static_cast<double>(n) * d.depths[i]));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pos[a] < pos[b]; });
    std::vector<std::string> lines;
    size_t k = 0, mark = std::string::npos;
    for (size_t u = 0; u <= n; ++u) {
      while (k < n_needles && pos[order[k]] == u) {
        if (order[k] == d.target) mark = lines.size();
        lines.push_back(d.needles[order[k++]]);
      }
      if (u < n) lines.push_back(hay[u]);
    }
    target_at = JoinMarked(lines, "\n", mark, &context);
  }
  size_t ctx = 0;
  r->prompt = Format(NiahTemplate(*d.c), {{"type_needle_v", d.type_v}, {"context", context}, {"query", d.query}}, &ctx);
  r->context_begin = static_cast<int64_t>(ctx);
  r->context_end = static_cast<int64_t>(ctx + context.size());
  r->needle_offset = static_cast<int64_t>(ctx + target_at);
  r->needle = d.needles[d.target];
  r->outputs = d.answers;
  r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kNiahPrefix).substr(0, 10)));
}

// ---- vt ----

struct VtChain {
  std::vector<std::string> vars, lines;
  std::string value;
};

VtChain MakeChain(int num_hops, bool icl, SplitMix* rng) {
  VtChain c;
  const size_t k = icl ? 3 : 5;
  std::set<std::string> seen;
  while (static_cast<int>(c.vars.size()) < num_hops + 1) {
    const std::string v = RandomUpper(k, rng);
    if (v != "VAR" && seen.insert(v).second) c.vars.push_back(v);  // "VAR" would collide with RULER's own word
  }
  c.value = icl ? "12345" : std::to_string(10000 + rng->Below(89999));  // np.random.randint(10000, 99999)
  c.lines.push_back("VAR " + c.vars[0] + " = " + c.value);
  for (int j = 0; j < num_hops; ++j) c.lines.push_back("VAR " + c.vars[static_cast<size_t>(j + 1)] + " = VAR " + c.vars[static_cast<size_t>(j)] + " ");
  return c;
}

// The noise with the chain inserted at the positions (fractions, sorted): RULER's sentences.insert(pi + j, chain[j]).
std::string VtContext(const VtChain& c, const std::vector<std::string>& noise, const std::vector<double>& at, size_t* first) {
  std::vector<std::string> s = noise;
  const size_t n = noise.size();
  size_t first_at = 0;
  for (size_t j = 0; j < c.lines.size(); ++j) {
    const size_t p = std::min(n, static_cast<size_t>(static_cast<double>(n) * at[j])) + j;
    s.insert(s.begin() + static_cast<std::ptrdiff_t>(std::min(p, s.size())), c.lines[j]);
    if (j == 0) first_at = std::min(p, s.size() - 1);
  }
  std::string out;
  const size_t mark = JoinMarked(s, "\n", first_at, &out);
  *first = mark;
  // RULER's context.replace(". \n", ".\n"): for an essay haystack; noise lines and chain lines
  // never end in ". ", so the offsets above stand.
  return ReplaceAll(out, ". \n", ".\n");
}

std::string VtPrompt(const VtChain& c, const std::string& context, int num_hops, size_t* ctx) {
  return Format(std::string(kVtTemplate) + kVtPrefix,
                {{"context", context}, {"query", c.value}, {"num_v", std::to_string(num_hops + 1)}}, ctx);
}

// RULER's one worked example: a chain of 3-letter variables and value 12345
// in whole noise blocks (at least 5; as many as fit 500 tokens), answered,
// then its variables and value replaced by random ones (randomize_icl).
Status VtExample(int num_hops, uint64_t seed, const TokenCounter& count, std::string* out) {
  SplitMix rng(seed);
  const VtChain c = MakeChain(num_hops, /*icl=*/true, &rng);
  std::vector<double> at(c.lines.size());
  for (double& a : at) a = rng.Uniform();
  std::sort(at.begin(), at.end());
  auto build = [&](size_t blocks) {
    size_t first = 0, ctx = 0;
    const std::string context = VtContext(c, std::vector<std::string>(blocks, kNoise), at, &first);
    return VtPrompt(c, context, num_hops, &ctx) + " " + Join(c.vars, " ") + "\n";
  };
  size_t blocks = 5;
  for (size_t b = 6; b < 4096; ++b) {  // RULER's search over whole blocks, 500 tokens, no generation budget
    int64_t n = 0;
    KVLAB_RETURN_IF_ERROR(count(build(b), &n));
    if (n > 500) break;
    blocks = b;
  }
  std::string ex = build(blocks);
  for (const std::string& v : c.vars) ex = ReplaceAll(ex, v, RandomUpper(v.size(), &rng));
  *out = ReplaceAll(ex, "12345", std::to_string(10000 + rng.Below(89999)));
  return Status::OK();
}

// ---- cwe ----

// The words cwe draws from: RULER's nouns + adjectives + verbs (here the
// built-in lists), sorted, without repeats.
const std::vector<std::string>& CweWords() {
  static const std::vector<std::string> words = [] {
    std::set<std::string> all;
    for (const auto* l : {&Nouns(), &Adjectives(), &Verbs()}) all.insert(l->begin(), l->end());
    return std::vector<std::string>(all.begin(), all.end());
  }();
  return words;
}

std::string Numbered(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + std::to_string(i + 1) + ". " + words[i];
  return out;
}

// get_example: `num_words` words, the first 10 repeated `cr` times, the rest `ur` times, shuffled.
std::string CweList(const std::vector<std::string>& words, int cr, int ur, uint64_t seed) {
  std::vector<std::string> list;
  const size_t num_cw = std::min<size_t>(10, words.size());
  for (int r = 0; r < cr; ++r) list.insert(list.end(), words.begin(), words.begin() + static_cast<std::ptrdiff_t>(num_cw));
  for (int r = 0; r < ur; ++r) list.insert(list.end(), words.begin() + static_cast<std::ptrdiff_t>(num_cw), words.end());
  SplitMix rng(seed);
  Shuffle(&list, &rng);
  return Numbered(list);
}

}  // namespace


Status GetRulerTask(const std::string& name, RulerTaskInfo* out) {
  RulerTaskInfo t;
  t.name = name;
  if (const NiahConfig* c = FindNiah(name)) {
    t.tokens_to_generate = 128;
    t.needs_essay = std::string(c->haystack) == "essay";
    t.has_depth = true;
  } else if (name == "vt") {
    t.tokens_to_generate = 30;
    t.default_fewshot = 1;
  } else if (name == "cwe") {
    t.tokens_to_generate = 120;
    t.default_fewshot = 1;
  } else if (name == "fwe") {
    t.tokens_to_generate = 50;
  } else {
    std::string all;
    for (const std::string& n : RulerTaskNames()) all += (all.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("unknown RULER task '" + name + "'; valid: " + all);
  }
  *out = t;
  return Status::OK();
}

Status MakeRulerSample(const RulerSpec& spec, const TokenCounter& count, RulerSample* out) {
  RulerTaskInfo info;
  KVLAB_RETURN_IF_ERROR(GetRulerTask(spec.task, &info));
  const std::string where = "RULER task '" + spec.task + "' at length " + std::to_string(spec.length);
  if (info.needs_essay && (spec.essay == nullptr || SplitWords(spec.essay->substr(0, 65536)).size() < 2)) {
    return Status::InvalidArgument(where + ": needs an essay text for its haystack (a text file of prose)");
  }
  if (spec.depth > 1 || (spec.depth >= 0 && !std::isfinite(spec.depth))) {
    return Status::InvalidArgument(where + ": depth must be in [0, 1], got " + std::to_string(spec.depth));
  }
  const int fewshot = spec.fewshot < 0 ? info.default_fewshot : spec.fewshot;
  if (fewshot > 1) return Status::InvalidArgument(where + ": fewshot must be 0 or 1");
  const int64_t ttg = spec.tokens_to_generate > 0 ? spec.tokens_to_generate : info.tokens_to_generate;
  const int64_t budget = spec.length - ttg;  // prompt tokens allowed
  SplitMix rng(SubSeed(spec.seed, 1));

  // The sample's draft (every random choice but the haystack's size) and how to render it at a size.
  std::function<Status(int64_t, int64_t, Rendered*)> render;  // (words, characters of the next word)
  bool char_fill = false;
  int64_t min_fill = 0;
  NiahDraft niah;
  std::unique_ptr<EssayStream> essay;
  std::unique_ptr<UnitStream> units;
  VtChain chain;
  std::vector<double> chain_at;
  std::string example;
  std::vector<std::string> pool, ex_words, vocab;
  if (const NiahConfig* c = FindNiah(spec.task)) {
    DraftNiah(*c, spec.depth, &rng, &niah);
    if (info.needs_essay) essay = std::make_unique<EssayStream>(*spec.essay, SubSeed(spec.seed, 2));
    const std::string hay = c->haystack;
    const uint64_t dseed = SubSeed(spec.seed, 3);
    const std::set<std::string> keys(niah.keys.begin(), niah.keys.end());
    units = std::make_unique<UnitStream>([hay, dseed, c, keys](size_t j) -> std::string {
      if (hay == "noise") return kNoise;
      // A distractor needle: a random key (never one of the real keys) and value.
      SplitMix r(SubSeed(dseed, j + 1));
      std::string key;
      do key = RandomOf(c->type_k, &r); while (keys.count(key));
      return Format(kNeedle, {{"type_needle_v", c->type_v}, {"key", key}, {"value", RandomOf(c->type_v, &r)}});
    });
    char_fill = true;
    render = [&](int64_t fill, int64_t chars, Rendered* r) {
      RenderNiah(niah, fill, chars, essay.get(), units.get(), r);
      return Status::OK();
    };
  } else if (spec.task == "vt") {
    chain = MakeChain(4, /*icl=*/false, &rng);
    chain_at.resize(chain.lines.size());
    for (double& a : chain_at) a = rng.Uniform();
    std::sort(chain_at.begin(), chain_at.end());
    if (fewshot > 0) KVLAB_RETURN_IF_ERROR(VtExample(4, SubSeed(spec.seed, 4), count, &example));
    units = std::make_unique<UnitStream>([](size_t) { return std::string(kNoise); });
    char_fill = true;
    render = [&](int64_t fill, int64_t chars, Rendered* r) {
      size_t first = 0, ctx = 0;
      const std::string context = VtContext(chain, units->Take(fill, chars), chain_at, &first);
      const std::string main = VtPrompt(chain, context, 4, &ctx);
      // RULER puts the example (which ends in a newline) and a newline before the task.
      const size_t shift = example.empty() ? 0 : example.size() + 1;
      r->prompt = example.empty() ? main : example + "\n" + main;
      r->context_begin = static_cast<int64_t>(shift + ctx);
      r->context_end = r->context_begin + static_cast<int64_t>(context.size());
      r->needle_offset = r->context_begin + static_cast<int64_t>(first);
      r->needle = chain.lines[0];
      r->outputs = chain.vars;
      r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kVtPrefix).substr(0, 10)));
      return Status::OK();
    };
  } else if (spec.task == "cwe") {
    pool = CweWords();
    Shuffle(&pool, &rng);
    ex_words = pool;
    Shuffle(&ex_words, &rng);
    const bool long_form = spec.length >= 4096;  // RULER: max_seq_length < 4096 uses the short form
    const int cr = long_form ? 30 : 6, ur = long_form ? 3 : 1;
    const size_t ex_n = long_form ? 40 : 20;
    const int ex_cr = long_form ? 10 : 3, ex_ur = long_form ? 3 : 1;
    ex_words.resize(ex_n);
    const std::string tmpl = std::string(kCweTemplate) + kCwePrefix;
    if (fewshot > 0) {
      example = Format(tmpl, {{"context", CweList(ex_words, ex_cr, ex_ur, SubSeed(spec.seed, 5))}, {"query", ""}}) + " " +
                Numbered(std::vector<std::string>(ex_words.begin(), ex_words.begin() + 10));
    }
    const uint64_t shuffle_seed = SubSeed(spec.seed, 6);
    min_fill = 10;
    render = [&, cr, ur, tmpl, shuffle_seed](int64_t fill, int64_t, Rendered* r) {
      // More words than the lists hold: adjective-noun compounds (RULER falls back to a larger dictionary).
      SplitMix extra(SubSeed(shuffle_seed, 1));
      std::set<std::string> have(pool.begin(), pool.end());
      while (static_cast<int64_t>(pool.size()) < fill) {
        const std::string w = RandomWord(&extra);
        if (have.insert(w).second) pool.push_back(w);
      }
      const std::vector<std::string> words(pool.begin(), pool.begin() + fill);
      size_t ctx = 0;
      const std::string context = CweList(words, cr, ur, SubSeed(shuffle_seed, static_cast<uint64_t>(fill) + 2));
      const std::string main = Format(tmpl, {{"context", context}, {"query", ""}}, &ctx);
      const size_t shift = example.empty() ? 0 : example.size() + 1;
      r->prompt = example.empty() ? main : example + "\n" + main;
      r->context_begin = static_cast<int64_t>(shift + ctx);
      r->context_end = r->context_begin + static_cast<int64_t>(context.size());
      r->outputs.assign(words.begin(), words.begin() + 10);
      r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kCwePrefix).substr(0, 10)));
      return Status::OK();
    };
  } else {  // fwe
    const int64_t vocab_size = budget / 50;  // RULER: (max_seq_length - tokens_to_generate) // 50
    if (vocab_size < 5) return Status::InvalidArgument(where + ": too short (fwe needs a vocabulary of 5 coded words)");
    std::set<std::string> seen;
    while (static_cast<int64_t>(vocab.size()) < vocab_size) {
      std::string w;
      for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + rng.Below(26));
      if (seen.insert(w).second) vocab.push_back(w);
    }
    std::sort(vocab.begin(), vocab.end());
    Shuffle(&vocab, &rng);
    vocab[0] = "...";  // the most frequent "word" is noise
    const uint64_t shuffle_seed = SubSeed(spec.seed, 7);
    const double zeta2 = 3.14159265358979323846 * 3.14159265358979323846 / 6;  // zeta(alpha), RULER's alpha = 2
    min_fill = static_cast<int64_t>(std::ceil(16 * zeta2));  // the 4th rank (the last answer) appears once
    render = [&, shuffle_seed, zeta2](int64_t fill, int64_t, Rendered* r) {
      std::vector<std::string> words;
      for (size_t k = 0; k < vocab.size(); ++k) {
        const double kk = static_cast<double>(k + 1);
        const int64_t cnt = static_cast<int64_t>(static_cast<double>(fill) / (kk * kk) / zeta2);
        for (int64_t i = 0; i < cnt; ++i) words.push_back(vocab[k]);
      }
      SplitMix sh(SubSeed(shuffle_seed, static_cast<uint64_t>(fill)));
      Shuffle(&words, &sh);
      size_t ctx = 0;
      const std::string context = Join(words, " ");
      r->prompt = Format(std::string(kFweTemplate) + kFwePrefix, {{"context", context}, {"query", ""}}, &ctx);
      r->context_begin = static_cast<int64_t>(ctx);
      r->context_end = r->context_begin + static_cast<int64_t>(context.size());
      r->outputs.assign(vocab.begin() + 1, vocab.begin() + 4);
      r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kFwePrefix).substr(0, 10)));
      return Status::OK();
    };
  }

  // The largest haystack whose prompt fits the budget: RULER's binary search
  // over the haystack's size, to a word; then, for the niah and vt haystacks,
  // to a character of the next word, so that the prompt reaches the length
  // even where one word is many tokens (a UUID at one token a byte).
  Rendered best;
  int64_t best_tokens = 0;
  auto fits = [&](int64_t fill, int64_t chars, Rendered* r, int64_t* tokens, bool* ok) -> Status {
    *r = Rendered();
    KVLAB_RETURN_IF_ERROR(render(fill, chars, r));
    KVLAB_RETURN_IF_ERROR(count(r->prompt, tokens));
    *ok = *tokens <= budget;
    return Status::OK();
  };
  bool ok = false;
  KVLAB_RETURN_IF_ERROR(fits(min_fill, 0, &best, &best_tokens, &ok));
  if (!ok) {
    return Status::InvalidArgument(where + ": too short: the prompt takes " + std::to_string(best_tokens) +
                                   " tokens before any haystack" +
                                   (example.empty() ? "" : " (with its worked example; fewshot = 0 drops it)") +
                                   ", and the answer " + std::to_string(ttg) + " more");
  }
  Rendered r;
  int64_t tokens = 0, fill_words = min_fill, fill_chars = 0;
  auto bisect = [&](int64_t lo, int64_t hi, bool chars_axis, int64_t words) -> Status {
    // lo fits, hi does not: narrow to adjacent values, keeping the best that fits.
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      KVLAB_RETURN_IF_ERROR(chars_axis ? fits(words, mid, &r, &tokens, &ok) : fits(mid, 0, &r, &tokens, &ok));
      if (ok) {
        lo = mid;
        best = r;
        best_tokens = tokens;
      } else {
        hi = mid;
      }
    }
    if (!chars_axis) fill_words = lo;
    else fill_chars = lo;
    return Status::OK();
  };
  int64_t lo = min_fill, hi = min_fill + 16;
  const int64_t cap = 16 * spec.length + 1024;  // no tokenizer takes 16 words a token
  for (;;) {
    KVLAB_RETURN_IF_ERROR(fits(hi, 0, &r, &tokens, &ok));
    if (!ok) break;
    lo = hi;
    best = r;
    best_tokens = tokens;
    if (hi >= cap) return Status::InvalidArgument(where + ": the haystack never reaches the length");
    hi = std::min(cap, hi * 2);
  }
  KVLAB_RETURN_IF_ERROR(bisect(lo, hi, /*chars_axis=*/false, 0));
  if (char_fill) KVLAB_RETURN_IF_ERROR(bisect(0, 65, /*chars_axis=*/true, fill_words));
  RulerSample s;
  s.prompt = std::move(best.prompt);
  s.answer_prefix = std::move(best.answer_prefix);
  s.outputs = std::move(best.outputs);
  s.metric = info.metric;
  s.tokens_to_generate = ttg;
  s.prompt_tokens = best_tokens;
  s.depth = info.has_depth ? niah.depths[niah.target] : -1;
  s.needle_offset = best.needle_offset;
  s.needle = std::move(best.needle);
  s.context_begin = best.context_begin;
  s.context_end = best.context_end;
  s.fill = fill_words;
  s.fill_chars = fill_chars;
  *out = std::move(s);
  return Status::OK();
}

}  // namespace kvlab
