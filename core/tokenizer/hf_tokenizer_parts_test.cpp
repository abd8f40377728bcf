// The tokenizer.json stages that the golden files do not reach (split behaviors,
// Metaspace, Digits, Strip, lstrip/rstrip/single_word added tokens, invalid
// bytes), on the examples of the Rust `tokenizers` crate's own tests and docs.
#include "core/tokenizer/hf_tokenizer_parts.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvlab {
namespace hf {
namespace {

using Strings = std::vector<std::string>;

Strings SplitOn(const std::string& text, const std::string& delim, SplitBehavior b, bool invert = false) {
  Pattern p;
  p.literal = delim;
  std::vector<Span> m;
  p.FindAll(text, &m);
  return SplitBy(text, m, b, invert);
}

TEST(HfParts, SplitBehaviorsAsTheRustDocsShowThem) {
  const std::string t = "the-final--countdown";
  EXPECT_EQ(SplitOn(t, "-", SplitBehavior::kRemoved), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(SplitOn(t, "-", SplitBehavior::kIsolated), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(SplitOn(t, "-", SplitBehavior::kMergedWithPrevious), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(SplitOn(t, "-", SplitBehavior::kMergedWithNext), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(SplitOn(t, "-", SplitBehavior::kContiguous), (Strings{"the", "-", "final", "--", "countdown"}));
  // invert: the pattern names what to keep.
  EXPECT_EQ(SplitOn(t, "-", SplitBehavior::kRemoved, /*invert=*/true), (Strings{"-", "-", "-"}));
}

Strings PreTokenize(const std::string& json_text, const std::string& text) {
  std::unique_ptr<PreTokenizer> p;
  const Status s = NewPreTokenizer(Json::parse(json_text), Where{"t.json", "pre_tokenizer"}, &p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Strings out;
  if (p) p->Split(text, /*at_start=*/true, &out);
  return out;
}

TEST(HfParts, PreTokenizersAsTheRustTestsHaveThem) {
  EXPECT_EQ(PreTokenize(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})", "Hey   friend!"),
            (Strings{"▁Hey", "▁", "▁", "▁friend!"}));
  EXPECT_EQ(PreTokenize(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": false})",
                        "Hey friend!"),
            (Strings{"Hey▁friend!"}));
  EXPECT_EQ(PreTokenize(R"({"type": "Digits", "individual_digits": true})", "Hey 123 friend!"),
            (Strings{"Hey ", "1", "2", "3", " friend!"}));
  EXPECT_EQ(PreTokenize(R"({"type": "Digits", "individual_digits": false})", "Hey 123 friend!"),
            (Strings{"Hey ", "123", " friend!"}));
  EXPECT_EQ(
      PreTokenize(R"({"type": "ByteLevel", "add_prefix_space": true})", "Hello my friend, how is your day going?"),
      (Strings{"ĠHello", "Ġmy", "Ġfriend", ",", "Ġhow", "Ġis", "Ġyour", "Ġday", "Ġgoing", "?"}));
  EXPECT_EQ(PreTokenize(R"({"type": "WhitespaceSplit"})", " a\tb  c\n"), (Strings{"a", "b", "c"}));
}

Strings Decode(const std::string& json_text, Strings tokens) {
  std::unique_ptr<Decoder> d;
  const Status s = NewDecoder(Json::parse(json_text), Where{"t.json", "decoder"}, &d);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (d) d->Decode(&tokens);
  return tokens;
}

TEST(HfParts, DecodersAsTheRustTestsHaveThem) {
  const std::string fallback = R"({"type": "ByteFallback"})";
  EXPECT_EQ(Decode(fallback, {"<0x61>"}), (Strings{"a"}));
  EXPECT_EQ(Decode(fallback, {"<0xE5>"}), (Strings{"\uFFFD"}));
  EXPECT_EQ(Decode(fallback, {"<0xE5>", "<0x8f>"}), (Strings{"\uFFFD", "\uFFFD"}));  // one U+FFFD a byte
  EXPECT_EQ(Decode(fallback, {"<0xE5>", "<0x8f>", "<0xab>"}), (Strings{"叫"}));
  EXPECT_EQ(Decode(fallback, {"<0xE5>", "<0x8f>", "<0xab>", "a"}), (Strings{"叫", "a"}));
  EXPECT_EQ(Decode(fallback, {"<0xE5>", "<0x8f>", "a"}), (Strings{"\uFFFD", "\uFFFD", "a"}));
  EXPECT_EQ(Decode(R"({"type": "Strip", "content": "H", "start": 1, "stop": 0})", {"Hey", " friend!", "HHH"}),
            (Strings{"ey", " friend!", "HH"}));
  EXPECT_EQ(Decode(R"({"type": "Strip", "content": "y", "start": 0, "stop": 1})", {"Hey", " friend!", "HHH"}),
            (Strings{"He", " friend!", "HHH"}));
  EXPECT_EQ(Decode(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})", {"▁Hey", "▁friend!"}),
            (Strings{"Hey", " friend!"}));
  // A byte-level token outside the byte map passes through as its own bytes.
  EXPECT_EQ(Decode(R"({"type": "ByteLevel"})", {"Hello", "Ġmy", "▁x"}), (Strings{"Hello my▁x"}));
}

std::string Normalize(const std::string& json_text, std::string text) {
  std::unique_ptr<Normalizer> n;
  const Status s = NewNormalizer(Json::parse(json_text), Where{"t.json", "normalizer"}, &n);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (n) n->Normalize(&text);
  return text;
}

TEST(HfParts, Normalizers) {
  const std::string llama2 = R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})";
  EXPECT_EQ(Normalize(llama2, "Hey friend"), "▁Hey▁friend");
  EXPECT_EQ(Normalize(llama2, ""), "");  // Prepend leaves an empty text empty
  EXPECT_EQ(Normalize(R"({"type": "NFC"})", "Cafe\u0301"), "Caf\u00e9");
  EXPECT_EQ(Normalize(R"({"type": "NFD"})", "Caf\u00e9"), "Cafe\u0301");
  EXPECT_EQ(Normalize(R"({"type": "NFKC"})", "\ufb01"), "fi");
  EXPECT_EQ(Normalize(R"({"type": "Strip", "strip_left": true, "strip_right": false})", " \u3000 x \n"), "x \n");
  EXPECT_EQ(Normalize(R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "})", "a \t\n b"), "a b");
}

std::vector<std::pair<std::string, int32_t>> Added(const std::vector<AddedToken>& tokens, const std::string& text) {
  TokenTrie trie;
  for (size_t i = 0; i < tokens.size(); ++i) trie.Add(tokens[i].content, static_cast<int32_t>(i));
  std::vector<std::pair<std::string, int32_t>> out;
  for (const Piece& p : SplitAdded(text, trie, tokens)) out.emplace_back(p.text, p.added < 0 ? -1 : tokens[p.added].id);
  return out;
}

TEST(HfParts, AddedTokensStripAndSingleWord) {
  AddedToken mask;
  mask.content = "<mask>";
  mask.id = 7;
  using P = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_EQ(Added({mask}, "Hello <mask> there"), (P{{"Hello ", -1}, {"<mask>", 7}, {" there", -1}}));
  mask.lstrip = true;
  EXPECT_EQ(Added({mask}, "Hello  <mask> there"), (P{{"Hello", -1}, {"  <mask>", 7}, {" there", -1}}));
  mask.lstrip = false;
  mask.rstrip = true;
  EXPECT_EQ(Added({mask}, "Hello <mask>\t there"), (P{{"Hello ", -1}, {"<mask>\t ", 7}, {"there", -1}}));
  AddedToken ab;
  ab.content = "ab";
  ab.id = 3;
  ab.single_word = true;
  EXPECT_EQ(Added({ab}, "ab cab ab_ ab"), (P{{"ab", 3}, {" cab ab_ ", -1}, {"ab", 3}}));
  // Leftmost, then longest.
  AddedToken a{"a", 1}, abc{"abc", 2};
  EXPECT_EQ(Added({a, abc}, "xabcab"), (P{{"x", -1}, {"abc", 2}, {"a", 1}, {"b", -1}}));
}

TEST(HfParts, InvalidBytesBecomeReplacementCharacters) {
  EXPECT_EQ(Utf8Lossy("a\xff"
                      "b"),
            "a\uFFFDb");
  EXPECT_EQ(Utf8Lossy("\xE5\x8F"), "\uFFFD");  // a truncated sequence is one maximal subpart
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98x"), "\uFFFDx");
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\uFFFD\uFFFD\uFFFD");  // a surrogate: three subparts
  EXPECT_EQ(FirstInvalidUtf8("ok \xC3\xA9 \xC3"), 6u);
  EXPECT_EQ(FirstInvalidUtf8("ok"), std::string::npos);
}

TEST(HfParts, WordCharactersAreOnigurumasNotPcre2s) {
  // PCRE2's UCP \w is L, N and _ (10.42: no marks); Oniguruma's takes the combining acute too.
  std::shared_ptr<Regex> r;
  ASSERT_TRUE(Regex::Compile("\\w+|\\W+", Where{"t.json", "k"}, &r).ok());
  std::vector<Span> m;
  const std::string text = "cafe\u0301_2\u00b2 x";
  r->FindAll(text, &m);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(text.substr(m[0].first, m[0].second - m[0].first), "cafe\u0301_2\u00b2");
  // [\S] inside a class works as well.
  ASSERT_TRUE(Regex::Compile("[\\S]+", Where{"t.json", "k"}, &r).ok());
  r->FindAll("ab\u180e c", &m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (Span{0, 5}));
}

TEST(HfParts, WhiteSpaceIsOnigurumasNotPcre2s) {
  // PCRE2's UCP \s also takes U+180E (MONGOLIAN VOWEL SEPARATOR); Oniguruma's does not.
  std::shared_ptr<Regex> r;
  ASSERT_TRUE(Regex::Compile("\\s+|[^\\s]+", Where{"t.json", "k"}, &r).ok());
  std::vector<Span> m;
  const std::string text = "a\u180e\u3000b";
  r->FindAll(text, &m);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(text.substr(m[0].first, m[0].second - m[0].first), "a\u180e");
  EXPECT_EQ(text.substr(m[1].first, m[1].second - m[1].first), "\u3000");
}

}  // namespace
}  // namespace hf
}  // namespace kvlab
