// Checkpoints and config.json from an untrusted source: shapes that crash a
// recursive reader (100,000 nested brackets, 200 KB; nlohmann's copy and dump()
// recurse per level) and bytes that are not text are each one clean error.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/base/temp_dir_test_util.h"
#include "core/model/model_config.h"
#include "core/model/safetensors.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

std::string FreshDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(ProcessTempDir()) / ("kvlab_untrusted_" + std::string(info->name()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string Deep(const char* open, const char* close, int n, const std::string& inner = "1") {
  std::string s;
  for (int i = 0; i < n; ++i) s += open;
  s += inner;
  for (int i = 0; i < n; ++i) s += close;
  return s;
}
std::string DeepArray(int n = 100000) { return Deep("[", "]", n); }
std::string DeepObject(int n = 100000) { return Deep("{\"a\":", "}", n); }

// A message a tool can read as text: valid UTF-8 (checked loosely: no byte
// >= 0x80 outside a well-formed sequence) and one line.
bool IsOneLineOfText(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n' || c == '\r') return false;
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

void WriteSafetensorsHeader(const std::string& path, const std::string& header) {
  std::ofstream o(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) o.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  o << header << std::string(16, '\0');
}

Status OpenHeader(const std::string& header, std::string* path) {
  *path = FreshDir() + "/model.safetensors";
  WriteSafetensorsHeader(*path, header);
  std::unique_ptr<SafetensorsFile> f;
  return SafetensorsFile::Open(*path, &f);
}

void ExpectTooDeep(const Status& s, const std::string& path) {
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ":1: JSON nested deeper than 128 levels"), std::string::npos) << s.message();
  EXPECT_LT(s.message().size(), 400u);
}

TEST(UntrustedInputTest, DeepShapeInSafetensorsHeader) {
  std::string path;
  const Status s = OpenHeader("{\"w\":{\"dtype\":\"F32\",\"shape\":" + DeepArray() + ",\"data_offsets\":[0,4]}}", &path);
  ExpectTooDeep(s, path);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
}

TEST(UntrustedInputTest, DeepMetadataAndEntriesInSafetensorsHeader) {
  std::string path;
  ExpectTooDeep(OpenHeader("{\"__metadata__\":{\"format\":" + DeepObject() + "}}", &path), path);
  ExpectTooDeep(OpenHeader("{\"w\":" + DeepArray() + "}", &path), path);
  ExpectTooDeep(OpenHeader(DeepObject(), &path), path);
  // 128 levels are fine for the parser; the entry is then refused for its type.
  const Status ok_depth = OpenHeader("{\"w\":" + Deep("[", "]", 120) + "}", &path);
  EXPECT_NE(ok_depth.message().find("header entry must be a JSON object"), std::string::npos) << ok_depth.message();
}

TEST(UntrustedInputTest, DeepShardedIndex) {
  const std::string dir = FreshDir();
  std::ofstream(dir + "/model.safetensors.index.json") << "{\"weight_map\": {\"a\": " + DeepArray() + "}}";
  std::unique_ptr<CheckpointReader> r;
  ExpectTooDeep(CheckpointReader::Open(dir, &r), dir + "/model.safetensors.index.json");
}

TEST(UntrustedInputTest, LongShapeIsQuotedByAPrefix) {
  std::string shape = "[";
  for (int i = 0; i < 100000; ++i) shape += "\"xxxxxxxx\",";
  shape += "1]";
  std::string path;
  const Status s = OpenHeader("{\"w\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,4]}}", &path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shape [\"xxxxxxxx\", "), std::string::npos) << s.message().substr(0, 300);
  EXPECT_NE(s.message().find("must hold non-negative integers"), std::string::npos);
  EXPECT_LT(s.message().size(), 400u);
}

TEST(UntrustedInputTest, HeaderBytesThatAreNotTextStayOutOfTheMessage) {
  std::string path;
  // Not UTF-8: the parser's message quotes the byte; the message escapes it.
  Status s = OpenHeader("{\"w\xff\xfe\": 1}", &path);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsOneLineOfText(s.message())) << s.message();
  EXPECT_NE(s.message().find("malformed header JSON"), std::string::npos) << s.message();
  // Valid JSON whose strings hold a newline and control bytes.
  s = OpenHeader("{\"bad\\nname\\u0007\":{\"dtype\":\"I64\\r\\n\",\"shape\":[1],\"data_offsets\":[0,8]}}", &path);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsOneLineOfText(s.message())) << s.message();
  EXPECT_NE(s.message().find("tensor 'bad\\nname\\x07'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("dtype 'I64\\r\\n'"), std::string::npos) << s.message();
}

Status LoadConfigText(const std::string& text, std::string* path) {
  *path = FreshDir() + "/config.json";
  std::ofstream(*path, std::ios::trunc) << text;
  ModelConfig c;
  return LoadModelConfig(*path, &c);
}

TEST(UntrustedInputTest, DeepConfigJson) {
  std::string path;
  for (const std::string& v : {DeepArray(), DeepObject()}) {
    const Status s = LoadConfigText("{\"model_type\": \"llama\", \"rope_scaling\": " + v + "}", &path);
    ExpectTooDeep(s, path);
    std::string unverified;
    ModelConfig c;
    ExpectTooDeep(LoadKvShape(path, &c, &unverified), path);
  }
}

TEST(UntrustedInputTest, ConfigJsonValuesAreQuotedByAPrefix) {
  std::string big = "[";
  for (int i = 0; i < 100000; ++i) big += "1,";
  big += "1]";
  std::string path;
  Status s = LoadConfigText("{\"model_type\": " + big + "}", &path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("key 'model_type' is [1, 1, 1"), std::string::npos) << s.message().substr(0, 300);
  EXPECT_LT(s.message().size(), 600u);
  s = LoadConfigText("{\"model_type\": \"llama\", \"vocab_size\": \"\\u0000\\n\\u00ff\"}", &path);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsOneLineOfText(s.message())) << s.message();
}

TEST(UntrustedInputTest, OversizedConfigJsonIsRefusedBeforeReading) {
  std::string path;
  ASSERT_FALSE(LoadConfigText("{}", &path).ok());
  fs::resize_file(path, (uint64_t{16} << 20) + 1);  // sparse: nothing is written
  ModelConfig c;
  const Status s = LoadModelConfig(path, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ": 16777217 bytes, more than the 16777216"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvlab

namespace kvlab {
namespace {

// Sizes in config.json are bounded before anything is sized by them.
TEST(UntrustedInputTest, AbsurdConfigSizesNameTheKeyAndBothNumbers) {
  const std::string base = R"({"model_type": "llama", "vocab_size": 259, "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, )";
  std::string path;
  Status s = LoadConfigText(base + "\"num_hidden_layers\": 3000000}", &path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path + ": 'num_hidden_layers' is 3000000, more than 4096"), std::string::npos)
      << s.message();
  s = LoadConfigText(base + "\"num_hidden_layers\": 2, \"max_position_embeddings\": 9223372036854775807}", &path);
  EXPECT_NE(s.message().find("'max_position_embeddings' is 9223372036854775807, more than 1073741824"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(LoadConfigText(base + "\"num_hidden_layers\": 2}", &path).ok());
}

}  // namespace
}  // namespace kvlab
