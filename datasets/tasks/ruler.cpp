// RULER's synthetic tasks: a transcription of NVIDIA/RULER's generators
// (scripts/data/synthetic/niah.py, variable_tracking.py,
// common_words_extraction.py, freq_words_extraction.py); the scoring is in
// ruler_scoring.cpp. Each sample's random choices are made once from its
// seed; the haystack is then sized by bisection to the largest that fits the
// length. The text helpers (str.format, word lists, random values, the
// haystack streams) are in ruler_text.cpp.
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
#include "datasets/tasks/ruler_text.h"
#include "datasets/tasks/tasks.h"

namespace kvlab {

namespace {

using namespace ruler_internal;  // NOLINT: the generators' own helpers

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

namespace {

// A sample's draft: every random choice but the haystack's size, and how to
// render it at a size (words, and characters of the next word).
struct Draft {
  std::function<Status(int64_t, int64_t, Rendered*)> render;
  bool char_fill = false;  // the haystack can end inside a word (niah, vt)
  int64_t min_fill = 0;
  NiahDraft niah;
  std::unique_ptr<EssayStream> essay;
  std::unique_ptr<UnitStream> units;
  VtChain chain;
  std::vector<double> chain_at;
  std::string example;
  std::vector<std::string> pool, ex_words, vocab;
};

void DraftNiahTask(const NiahConfig* c, const RulerSpec& spec, bool needs_essay, SplitMix* rng, Draft* d) {
  DraftNiah(*c, spec.depth, rng, &d->niah);
  if (needs_essay) d->essay = std::make_unique<EssayStream>(*spec.essay, SubSeed(spec.seed, 2));
  const std::string hay = c->haystack;
  const uint64_t dseed = SubSeed(spec.seed, 3);
  const std::set<std::string> keys(d->niah.keys.begin(), d->niah.keys.end());
  d->units = std::make_unique<UnitStream>([hay, dseed, c, keys](size_t j) -> std::string {
    if (hay == "noise") return kNoise;
    // A distractor needle: a random key (never one of the real keys) and value.
    SplitMix r(SubSeed(dseed, j + 1));
    std::string key;
    do key = RandomOf(c->type_k, &r); while (keys.count(key));
    return Format(kNeedle, {{"type_needle_v", c->type_v}, {"key", key}, {"value", RandomOf(c->type_v, &r)}});
  });
  d->char_fill = true;
  d->render = [d](int64_t fill, int64_t chars, Rendered* r) {
    RenderNiah(d->niah, fill, chars, d->essay.get(), d->units.get(), r);
    return Status::OK();
  };
}

Status DraftVt(const RulerSpec& spec, int fewshot, const TokenCounter& count, SplitMix* rng, Draft* d) {
  d->chain = MakeChain(4, /*icl=*/false, rng);
  d->chain_at.resize(d->chain.lines.size());
  for (double& a : d->chain_at) a = rng->Uniform();
  std::sort(d->chain_at.begin(), d->chain_at.end());
  if (fewshot > 0) KVLAB_RETURN_IF_ERROR(VtExample(4, SubSeed(spec.seed, 4), count, &d->example));
  d->units = std::make_unique<UnitStream>([](size_t) { return std::string(kNoise); });
  d->char_fill = true;
  d->render = [d](int64_t fill, int64_t chars, Rendered* r) {
    size_t first = 0, ctx = 0;
    const std::string context = VtContext(d->chain, d->units->Take(fill, chars), d->chain_at, &first);
    const std::string main = VtPrompt(d->chain, context, 4, &ctx);
    // RULER puts the example (which ends in a newline) and a newline before the task.
    const size_t shift = d->example.empty() ? 0 : d->example.size() + 1;
    r->prompt = d->example.empty() ? main : d->example + "\n" + main;
    r->context_begin = static_cast<int64_t>(shift + ctx);
    r->context_end = r->context_begin + static_cast<int64_t>(context.size());
    r->needle_offset = r->context_begin + static_cast<int64_t>(first);
    r->needle = d->chain.lines[0];
    r->outputs = d->chain.vars;
    r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kVtPrefix).substr(0, 10)));
    return Status::OK();
  };
  return Status::OK();
}

void DraftCwe(const RulerSpec& spec, int fewshot, SplitMix* rng, Draft* d) {
  d->pool = CweWords();
  Shuffle(&d->pool, rng);
  d->ex_words = d->pool;
  Shuffle(&d->ex_words, rng);
  const bool long_form = spec.length >= 4096;  // RULER: max_seq_length < 4096 uses the short form
  const int cr = long_form ? 30 : 6, ur = long_form ? 3 : 1;
  const size_t ex_n = long_form ? 40 : 20;
  const int ex_cr = long_form ? 10 : 3, ex_ur = long_form ? 3 : 1;
  d->ex_words.resize(ex_n);
  const std::string tmpl = std::string(kCweTemplate) + kCwePrefix;
  if (fewshot > 0) {
    d->example = Format(tmpl, {{"context", CweList(d->ex_words, ex_cr, ex_ur, SubSeed(spec.seed, 5))}, {"query", ""}}) +
                 " " + Numbered(std::vector<std::string>(d->ex_words.begin(), d->ex_words.begin() + 10));
  }
  const uint64_t shuffle_seed = SubSeed(spec.seed, 6);
  d->min_fill = 10;
  d->render = [d, cr, ur, tmpl, shuffle_seed](int64_t fill, int64_t, Rendered* r) {
    // More words than the lists hold: adjective-noun compounds (RULER falls back to a larger dictionary).
    SplitMix extra(SubSeed(shuffle_seed, 1));
    std::set<std::string> have(d->pool.begin(), d->pool.end());
    while (static_cast<int64_t>(d->pool.size()) < fill) {
      const std::string w = RandomWord(&extra);
      if (have.insert(w).second) d->pool.push_back(w);
    }
    const std::vector<std::string> words(d->pool.begin(), d->pool.begin() + fill);
    size_t ctx = 0;
    const std::string context = CweList(words, cr, ur, SubSeed(shuffle_seed, static_cast<uint64_t>(fill) + 2));
    const std::string main = Format(tmpl, {{"context", context}, {"query", ""}}, &ctx);
    const size_t shift = d->example.empty() ? 0 : d->example.size() + 1;
    r->prompt = d->example.empty() ? main : d->example + "\n" + main;
    r->context_begin = static_cast<int64_t>(shift + ctx);
    r->context_end = r->context_begin + static_cast<int64_t>(context.size());
    r->outputs.assign(words.begin(), words.begin() + 10);
    r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kCwePrefix).substr(0, 10)));
    return Status::OK();
  };
}

Status DraftFwe(const RulerSpec& spec, int64_t budget, const std::string& where, SplitMix* rng, Draft* d) {
  const int64_t vocab_size = budget / 50;  // RULER: (max_seq_length - tokens_to_generate) // 50
  if (vocab_size < 5) return Status::InvalidArgument(where + ": too short (fwe needs a vocabulary of 5 coded words)");
  std::set<std::string> seen;
  while (static_cast<int64_t>(d->vocab.size()) < vocab_size) {
    std::string w;
    for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + rng->Below(26));
    if (seen.insert(w).second) d->vocab.push_back(w);
  }
  std::sort(d->vocab.begin(), d->vocab.end());
  Shuffle(&d->vocab, rng);
  d->vocab[0] = "...";  // the most frequent "word" is noise
  const uint64_t shuffle_seed = SubSeed(spec.seed, 7);
  const double zeta2 = 3.14159265358979323846 * 3.14159265358979323846 / 6;  // zeta(alpha), RULER's alpha = 2
  d->min_fill = static_cast<int64_t>(std::ceil(16 * zeta2));  // the 4th rank (the last answer) appears once
  d->render = [d, shuffle_seed, zeta2](int64_t fill, int64_t, Rendered* r) {
    std::vector<std::string> words;
    for (size_t k = 0; k < d->vocab.size(); ++k) {
      const double kk = static_cast<double>(k + 1);
      const int64_t cnt = static_cast<int64_t>(static_cast<double>(fill) / (kk * kk) / zeta2);
      for (int64_t i = 0; i < cnt; ++i) words.push_back(d->vocab[k]);
    }
    SplitMix sh(SubSeed(shuffle_seed, static_cast<uint64_t>(fill)));
    Shuffle(&words, &sh);
    size_t ctx = 0;
    const std::string context = Join(words, " ");
    r->prompt = Format(std::string(kFweTemplate) + kFwePrefix, {{"context", context}, {"query", ""}}, &ctx);
    r->context_begin = static_cast<int64_t>(ctx);
    r->context_end = r->context_begin + static_cast<int64_t>(context.size());
    r->outputs.assign(d->vocab.begin() + 1, d->vocab.begin() + 4);
    r->answer_prefix = r->prompt.substr(r->prompt.rfind(std::string(kFwePrefix).substr(0, 10)));
    return Status::OK();
  };
  return Status::OK();
}

// The largest haystack whose prompt fits the budget: RULER's binary search
// over the haystack's size, to a word; then, for the niah and vt haystacks,
// to a character of the next word, so that the prompt reaches the length
// even where one word is many tokens (a UUID at one token a byte).
struct Fitted {
  Rendered best;
  int64_t tokens = 0, fill_words = 0, fill_chars = 0;
};

Status FitHaystack(const Draft& d, const TokenCounter& count, int64_t budget, int64_t length, int64_t ttg,
                   const std::string& where, Fitted* out) {
  Fitted& f = *out;
  auto fits = [&](int64_t fill, int64_t chars, Rendered* r, int64_t* tokens, bool* ok) -> Status {
    *r = Rendered();
    KVLAB_RETURN_IF_ERROR(d.render(fill, chars, r));
    KVLAB_RETURN_IF_ERROR(count(r->prompt, tokens));
    *ok = *tokens <= budget;
    return Status::OK();
  };
  bool ok = false;
  KVLAB_RETURN_IF_ERROR(fits(d.min_fill, 0, &f.best, &f.tokens, &ok));
  if (!ok) {
    return Status::InvalidArgument(where + ": too short: the prompt takes " + std::to_string(f.tokens) +
                                   " tokens before any haystack" +
                                   (d.example.empty() ? "" : " (with its worked example; fewshot = 0 drops it)") +
                                   ", and the answer " + std::to_string(ttg) + " more");
  }
  Rendered r;
  int64_t tokens = 0;
  f.fill_words = d.min_fill;
  auto bisect = [&](int64_t lo, int64_t hi, bool chars_axis, int64_t words) -> Status {
    // lo fits, hi does not: narrow to adjacent values, keeping the best that fits.
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      KVLAB_RETURN_IF_ERROR(chars_axis ? fits(words, mid, &r, &tokens, &ok) : fits(mid, 0, &r, &tokens, &ok));
      if (ok) {
        lo = mid;
        f.best = r;
        f.tokens = tokens;
      } else {
        hi = mid;
      }
    }
    if (!chars_axis) f.fill_words = lo;
    else f.fill_chars = lo;
    return Status::OK();
  };
  int64_t lo = d.min_fill, hi = d.min_fill + 16;
  const int64_t cap = 16 * length + 1024;  // no tokenizer takes 16 words a token
  for (;;) {
    KVLAB_RETURN_IF_ERROR(fits(hi, 0, &r, &tokens, &ok));
    if (!ok) break;
    lo = hi;
    f.best = r;
    f.tokens = tokens;
    if (hi >= cap) return Status::InvalidArgument(where + ": the haystack never reaches the length");
    hi = std::min(cap, hi * 2);
  }
  KVLAB_RETURN_IF_ERROR(bisect(lo, hi, /*chars_axis=*/false, 0));
  // Then a prefix of the next word: up to 4 KiB of it, since an essay's
  // "word" can be a long run without spaces (a CSV header, a line of CJK
  // text) worth hundreds of tokens; a prefix past the word's end is the
  // whole word, which did not fit.
  if (d.char_fill) KVLAB_RETURN_IF_ERROR(bisect(0, 4097, /*chars_axis=*/true, f.fill_words));
  return Status::OK();
}

}  // namespace

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

  Draft d;
  if (const NiahConfig* c = FindNiah(spec.task)) {
    DraftNiahTask(c, spec, info.needs_essay, &rng, &d);
  } else if (spec.task == "vt") {
    KVLAB_RETURN_IF_ERROR(DraftVt(spec, fewshot, count, &rng, &d));
  } else if (spec.task == "cwe") {
    DraftCwe(spec, fewshot, &rng, &d);
  } else {
    KVLAB_RETURN_IF_ERROR(DraftFwe(spec, budget, where, &rng, &d));
  }
  Fitted f;
  KVLAB_RETURN_IF_ERROR(FitHaystack(d, count, budget, spec.length, ttg, where, &f));
  RulerSample s;
  s.prompt = std::move(f.best.prompt);
  s.answer_prefix = std::move(f.best.answer_prefix);
  s.outputs = std::move(f.best.outputs);
  s.metric = info.metric;
  s.tokens_to_generate = ttg;
  s.prompt_tokens = f.tokens;
  s.depth = info.has_depth ? d.niah.depths[d.niah.target] : -1;
  s.needle_offset = f.best.needle_offset;
  s.needle = std::move(f.best.needle);
  s.context_begin = f.best.context_begin;
  s.context_end = f.best.context_end;
  s.fill = f.fill_words;
  s.fill_chars = f.fill_chars;
  *out = std::move(s);
  return Status::OK();
}

}  // namespace kvlab
