#include "core/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#ifdef KVLAB_HAVE_SENTENCEPIECE_TRAIN
#include <sentencepiece_trainer.h>
#endif

#include "core/base/temp_dir_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::path(ProcessTempDir()) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

ModelConfig ConfigWithVocab(int64_t vocab) {
  ModelConfig c;
  EXPECT_TRUE(PresetConfig("small", &c).ok());
  c.vocab_size = vocab;
  return c;
}

TEST(TokenizerTest, BytesRoundTripWithBos) {
  const std::string text = "KV caché\n";
  auto ids = ByteTokenizer::Encode(text);
  ASSERT_EQ(ids.size(), text.size() + 1);
  EXPECT_EQ(ids[0], ByteTokenizer::kBos);
  EXPECT_EQ(ids[1], 'K');
  EXPECT_EQ(ByteTokenizer::Decode(ids), text);
  EXPECT_EQ(ByteTokenizer::Decode({ByteTokenizer::kEos, 'a', ByteTokenizer::kPad}), "a");
}

TEST(TokenizerTest, ByteTokenizerThroughTheInterface) {
  ModelConfig small;
  ASSERT_TRUE(PresetConfig("small", &small).ok());
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(LoadTokenizer("small", small, &t).ok());
  EXPECT_EQ(t->Name(), "byte");
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->bos_id(), 256);
  EXPECT_EQ(t->eos_id(), 257);
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode("hé", true, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'h', 0xC3, 0xA9}));
  ASSERT_TRUE(t->Encode("hé", false, &ids).ok());
  EXPECT_EQ(ids.size(), 3u);
  std::string text;
  ASSERT_TRUE(t->Decode({256, 'o', 'k', 257, 258}, &text).ok());
  EXPECT_EQ(text, "ok");
}

TEST(TokenizerTest, ParsesTokenIds) {
  std::vector<int32_t> ids;
  ASSERT_TRUE(ParseTokenIds("5,17, 42\n3", 100, "--tokens", &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{5, 17, 42, 3}));
  Status s = ParseTokenIds("5,x7", 100, "--tokens", &ids);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'x7'"), std::string::npos);
  EXPECT_FALSE(ParseTokenIds("5,100", 100, "--tokens", &ids).ok());
  EXPECT_FALSE(ParseTokenIds("-1", 100, "--tokens", &ids).ok());
  EXPECT_FALSE(ParseTokenIds(" , ", 100, "--tokens", &ids).ok());
}

TEST(TokenizerTest, TokenIdFileRoundTripAndErrorsNameTheFile) {
  const std::string dir = TempDir("ids");
  EXPECT_TRUE(IsTokenIdFile(dir + "/p.ids"));
  EXPECT_FALSE(IsTokenIdFile(dir + "/p.txt"));
  EXPECT_FALSE(IsTokenIdFile(".ids"));
  const std::vector<int32_t> want = {256, 72, 105, 0, 258};
  std::string text;
  for (int32_t id : want) text += std::to_string(id) + (text.size() % 3 == 0 ? ",\n" : " , ");
  WriteFile(dir + "/p.ids", text);
  std::vector<int32_t> ids;
  ASSERT_TRUE(ReadTokenIdFile(dir + "/p.ids", 259, &ids).ok());
  EXPECT_EQ(ids, want);

  // An id past the vocabulary: the error names the file and the line.
  WriteFile(dir + "/bad.ids", "1, 2, 3\n4, 259\n");
  Status s = ReadTokenIdFile(dir + "/bad.ids", 259, &ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/bad.ids:2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'259'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[0, 259)"), std::string::npos) << s.message();
  s = ReadTokenIdFile(dir + "/missing.ids", 259, &ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing.ids"), std::string::npos);
  WriteFile(dir + "/empty.ids", " \n");
  s = ReadTokenIdFile(dir + "/empty.ids", 259, &ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty.ids: no token ids"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

TEST(TokenizerTest, PromptFileIsTextOrIds) {
  const std::string dir = TempDir("prompt");
  ByteTokenizer bytes;
  WriteFile(dir + "/p.txt", "Hi");
  WriteFile(dir + "/p.ids", "256 7 8");
  std::vector<int32_t> ids;
  ASSERT_TRUE(ReadPromptFile(dir + "/p.txt", &bytes, 259, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'H', 'i'}));
  ASSERT_TRUE(ReadPromptFile(dir + "/p.ids", nullptr, 259, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 7, 8}));
  Status s = ReadPromptFile(dir + "/p.txt", nullptr, 32000, &ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("p.txt"), std::string::npos);
  EXPECT_NE(s.message().find("token ids"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TokenizerTest, NoTokenizerForANonByteVocabularyWithoutTokenizerModel) {
  std::unique_ptr<Tokenizer> t;
  ModelConfig llama;
  ASSERT_TRUE(PresetConfig("llama-2-7b", &llama).ok());
  Status s = LoadTokenizer("llama-2-7b", llama, &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("32000"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("token ids"), std::string::npos) << s.message();

  const std::string dir = TempDir("novocab");
  s = LoadTokenizer(dir, ConfigWithVocab(1000), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/tokenizer.model"), std::string::npos) << s.message();
  // A byte-sized vocabulary in a directory without tokenizer.model: bytes.
  ASSERT_TRUE(LoadTokenizer(dir, ConfigWithVocab(259), &t).ok());
  EXPECT_EQ(t->Name(), "byte");
  ASSERT_TRUE(LoadTokenizer(dir + "/config.json", ConfigWithVocab(259), &t).ok());
  fs::remove_all(dir);
}

// A tokenizer.model that is not one: an error naming the file, with or without
// SentencePiece in this build.
TEST(TokenizerTest, BrokenTokenizerModelIsAnErrorNamingTheFile) {
  const std::string dir = TempDir("broken");
  WriteFile(dir + "/tokenizer.model", "not a sentencepiece model");
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizer(dir, ConfigWithVocab(259), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + "/tokenizer.model"), std::string::npos) << s.message();
  if (!HaveSentencePiece()) {
    EXPECT_NE(s.message().find("libsentencepiece-dev"), std::string::npos) << s.message();
  }
  fs::remove_all(dir);
}

#ifdef KVLAB_HAVE_SENTENCEPIECE_TRAIN
// Trains a tiny SentencePiece model (unigram, ~100 pieces) on a few KB of text.
std::string TrainTinyModel(const std::string& dir) {
  const char* words[] = {"the", "cache", "key", "value", "attention", "head", "token", "layer",
                         "memory", "block", "page", "policy", "window", "sink", "query", "group"};
  std::string corpus;
  for (int line = 0; line < 300; ++line) {
    for (int w = 0; w < 8; ++w) corpus += std::string(w ? " " : "") + words[(line * 7 + w * 5 + line / 3) % 16];
    corpus += ".\n";
  }
  WriteFile(dir + "/corpus.txt", corpus);
  const auto s = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir + "/corpus.txt --model_prefix=" + dir + "/tokenizer --vocab_size=100 --hard_vocab_limit=false "
      "--normalization_rule_name=identity --minloglevel=2");
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir + "/tokenizer.model";
}
#endif

TEST(TokenizerTest, SentencePieceRoundTripThroughLoadTokenizer) {
#ifndef KVLAB_HAVE_SENTENCEPIECE_TRAIN
  GTEST_SKIP() << "built without libsentencepiece-dev (SentencePiece and its trainer)";
#else
  const std::string dir = TempDir("spm");
  TrainTinyModel(dir);
  ModelConfig c = ConfigWithVocab(300);
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  std::unique_ptr<Tokenizer> t;
  Status s = LoadTokenizer(dir, c, &t);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(t->Name().find("sentencepiece"), std::string::npos);
  EXPECT_GT(t->vocab_size(), 20);
  EXPECT_LE(t->vocab_size(), 100);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  const std::string text = "the key value cache in the attention head.";
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode(text, true, &ids).ok());
  ASSERT_GT(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_LT(ids.size(), text.size());  // pieces, not bytes
  for (int32_t id : ids) EXPECT_LT(id, t->vocab_size());
  std::string back;
  ASSERT_TRUE(t->Decode(ids, &back).ok());
  EXPECT_EQ(back, text);
  // EOS and ids past the pieces (a padded vocabulary) are skipped.
  ids.push_back(2);
  ids.push_back(299);
  ASSERT_TRUE(t->Decode(ids, &back).ok());
  EXPECT_EQ(back, text);
  // The config's BOS wins over the model's own.
  c.bos_token_id = 3;
  ASSERT_TRUE(LoadTokenizer(dir + "/config.json", c, &t).ok());
  ASSERT_TRUE(t->Encode("the", true, &ids).ok());
  EXPECT_EQ(ids[0], 3);
  // A text prompt file goes through it too.
  WriteFile(dir + "/p.txt", "the sink window");
  ASSERT_TRUE(ReadPromptFile(dir + "/p.txt", t.get(), c.vocab_size, &ids).ok());
  ASSERT_TRUE(t->Decode(ids, &back).ok());
  EXPECT_EQ(back, "the sink window");
  // More pieces than the model's vocabulary: refused.
  s = LoadTokenizer(dir, ConfigWithVocab(10), &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("more than the model's vocabulary (10)"), std::string::npos) << s.message();
  fs::remove_all(dir);
#endif
}

}  // namespace
}  // namespace kvlab
