#include "core/model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/base/temp_dir_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, so tests never see each other's files.
std::string FreshDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = fs::path(ProcessTempDir()) / ("kvlab_st_" + std::string(info->name()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

// Writes an 8-byte length (the header's real length unless `header_len` is given),
// the header text and `data_bytes` bytes of data.
void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes, int64_t header_len = -1) {
  const uint64_t n = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  std::ofstream o(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) o.put(static_cast<char>((n >> (8 * i)) & 0xff));
  o << header << std::string(data_bytes, '\0');
}

std::string OneTensorHeader(const std::string& dtype, const std::string& shape, int64_t begin, int64_t end) {
  return "{\"w\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}}";
}

// Opening `header` + data must fail with a message naming the file and each of `needles`.
void ExpectOpenFails(const std::string& header, size_t data_bytes, const std::vector<std::string>& needles,
                     int64_t header_len = -1) {
  const std::string path = FreshDir() + "/bad.safetensors";
  WriteRaw(path, header, data_bytes, header_len);
  std::unique_ptr<SafetensorsFile> f;
  const Status st = SafetensorsFile::Open(path, &f);
  ASSERT_FALSE(st.ok()) << header;
  EXPECT_EQ(f, nullptr);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  for (const std::string& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.ToString();
}

struct Sample {
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> f16, bf16;
  Sample() {
    for (float v : f32) {
      f16.push_back(F32ToF16(v));
      bf16.push_back(F32ToBF16(v));
    }
  }
  std::vector<TensorToWrite> Tensors() const {
    return {{"a.f32", DType::kF32, {2, 3}, f32.data()},
            {"b.f16", DType::kF16, {6}, f16.data()},
            {"c.bf16", DType::kBF16, {3, 1, 2}, bf16.data()},
            {"d.scalar", DType::kF32, {}, f32.data()},
            {"e.empty", DType::kF32, {0, 4}, nullptr}};
  }
};

TEST(SafetensorsTest, RoundTripAllDTypes) {
  const std::string path = FreshDir() + "/model.safetensors";
  Sample s;
  ASSERT_TRUE(WriteSafetensors(path, s.Tensors(), {{"note", "x"}}).ok());
  std::unique_ptr<SafetensorsFile> f;
  const Status st = SafetensorsFile::Open(path, &f);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(f->tensors().size(), 5u);
  for (const TensorToWrite& w : s.Tensors()) {
    const TensorView* t = f->Find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->file, path);
    EXPECT_EQ(t->nbytes, t->numel() * DTypeBytes(w.dtype));
    if (t->nbytes > 0) {
      EXPECT_EQ(std::memcmp(t->data, w.data, t->nbytes), 0) << w.name;
    }
  }
  std::vector<float> back(6);
  ConvertToF32(DType::kBF16, f->Find("c.bf16")->data, back.data(), 6);
  EXPECT_FLOAT_EQ(back[1], -2.25f);
  EXPECT_EQ(f->Find("d.scalar")->numel(), 1);
  EXPECT_EQ(f->Find("missing"), nullptr);
  EXPECT_EQ(f->metadata().at("note"), "x");
  EXPECT_EQ(f->metadata().at("format"), "pt");

  // HF layout: header length a multiple of 8, data laid out in the order given.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(f->Find("a.f32")->data, reinterpret_cast<const uint8_t*>(f->Find("b.f16")->data) - 24);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  const std::string path = FreshDir() + "/x.safetensors";
  float v = 1;
  EXPECT_FALSE(WriteSafetensors(path, {{"a", DType::kF32, {1}, &v}, {"a", DType::kF32, {1}, &v}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"a", DType::kF32, {-1}, &v}}).ok());
  EXPECT_FALSE(WriteSafetensors(path, {{"a", DType::kF32, {2}, nullptr}}).ok());
  EXPECT_FALSE(WriteSafetensors("/nonexistent-dir/x.safetensors", {{"a", DType::kF32, {1}, &v}}).ok());
}

TEST(SafetensorsTest, TruncatedDataNamesFileAndTensor) {
  const std::string path = FreshDir() + "/model.safetensors";
  Sample s;
  ASSERT_TRUE(WriteSafetensors(path, s.Tensors()).ok());
  fs::resize_file(path, fs::file_size(path) - 10);
  std::unique_ptr<SafetensorsFile> f;
  const Status st = SafetensorsFile::Open(path, &f);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tensor '"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("past the end"), std::string::npos) << st.message();
}

TEST(SafetensorsTest, HeaderLengthPastEndOfFile) {
  ExpectOpenFails(OneTensorHeader("F32", "[1]", 0, 4), 4, {"header length", "past the end"}, 1 << 20);
  // 2^63: must not overflow when added to 8.
  ExpectOpenFails(OneTensorHeader("F32", "[1]", 0, 4), 4, {"header length"}, INT64_MAX);
}

TEST(SafetensorsTest, FileShorterThanLengthField) {
  const std::string path = FreshDir() + "/tiny.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  std::unique_ptr<SafetensorsFile> f;
  const Status st = SafetensorsFile::Open(path, &f);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(path), std::string::npos);
}

TEST(SafetensorsTest, UnknownDTypeNamesTensorAndDType) {
  ExpectOpenFails(OneTensorHeader("I64", "[1]", 0, 8), 8, {"'w'", "I64"});
  ExpectOpenFails(OneTensorHeader("F8_E4M3", "[4]", 0, 4), 4, {"'w'", "F8_E4M3"});
}

TEST(SafetensorsTest, MalformedHeaderJson) {
  ExpectOpenFails("{\"w\": {\"dtype\": \"F32\",", 0, {"malformed header JSON"});
  ExpectOpenFails("[1, 2]", 0, {"object"});
  ExpectOpenFails("{\"w\": 3}", 0, {"'w'"});
}

TEST(SafetensorsTest, BadShapesAndOffsets) {
  ExpectOpenFails(OneTensorHeader("F32", "[2]", 8, 0), 8, {"'w'", "end 0 < begin 8"});
  ExpectOpenFails(OneTensorHeader("F32", "[2]", 0, 16), 8, {"'w'", "past the end"});
  ExpectOpenFails(OneTensorHeader("F32", "[3]", 0, 8), 8, {"'w'", "needs 12 bytes"});
  ExpectOpenFails(OneTensorHeader("F32", "[2.5]", 0, 8), 8, {"'w'", "non-negative integers"});
  ExpectOpenFails(OneTensorHeader("F32", "[-2]", 0, 8), 8, {"'w'", "non-negative integers"});
  ExpectOpenFails(OneTensorHeader("F32", "[\"2\"]", 0, 8), 8, {"'w'", "non-negative integers"});
  ExpectOpenFails(OneTensorHeader("F32", "[4294967296, 4294967296]", 0, 8), 8, {"'w'", "overflows"});
  ExpectOpenFails(OneTensorHeader("F32", "[2]", -8, 0), 8, {"'w'", "data_offsets"});
  ExpectOpenFails("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, {"'w'", "data_offsets"});
  ExpectOpenFails("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, {"'w'", "dtype"});
}

std::string Entry(const std::string& name, const std::string& shape, int64_t begin, int64_t end) {
  return "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// The reference reader's layout rule (the Rust crate's Metadata::validate):
// sorted by offsets, the tensors tile the data, from 0 to the end of the file.
TEST(SafetensorsTest, TensorsMustNotOverlap) {
  // Listed after the tensor it overlaps: the order of the header does not matter.
  ExpectOpenFails("{" + Entry("b", "[4]", 8, 24) + "," + Entry("a", "[4]", 0, 16) + "}", 24,
                  {"tensor 'b' bytes [8, 24) overlap tensor 'a' bytes [0, 16) (tensors must not share bytes)"});
  ExpectOpenFails("{" + Entry("a", "[4]", 0, 16) + "," + Entry("b", "[4]", 0, 16) + "}", 16,
                  {"tensor 'b' bytes [0, 16) overlap tensor 'a' bytes [0, 16)"});
  // A tensor of no bytes inside another one's bytes.
  ExpectOpenFails("{" + Entry("a", "[4]", 0, 16) + "," + Entry("z", "[0]", 8, 8) + "}", 16,
                  {"tensor 'z' bytes [8, 8) overlap tensor 'a' bytes [0, 16)"});
}

TEST(SafetensorsTest, TensorsMustLeaveNoGap) {
  ExpectOpenFails("{" + Entry("a", "[4]", 0, 16) + "," + Entry("b", "[2]", 24, 32) + "}", 32,
                  {"data bytes [16, 24) belong to no tensor: tensor 'a' ends at 16, tensor 'b' starts at 24 "
                   "(each tensor must start where the one before it ends)"});
  ExpectOpenFails("{" + Entry("a", "[2]", 8, 16) + "}", 16,
                  {"data bytes [0, 8) belong to no tensor: the first, tensor 'a', starts at 8 "
                   "(the first tensor must start at offset 0)"});
}

TEST(SafetensorsTest, DataMustEndWhereTheLastTensorEnds) {
  ExpectOpenFails(OneTensorHeader("F32", "[4]", 0, 16), 24,
                  {"8 bytes past the last tensor's end: tensor 'w' ends at 16 of 24 data bytes "
                   "(the data must end where the last tensor ends)"});
  ExpectOpenFails("{}", 8, {"8 bytes of data, but the header names no tensor"});
  ExpectOpenFails("{\"__metadata__\":{\"format\":\"pt\"}}", 1, {"1 byte of data, but the header names no tensor"});
}

TEST(SafetensorsTest, NamesMustBeUnique) {
  // Even two identical entries: nlohmann would keep one and drop the other unseen.
  ExpectOpenFails("{" + Entry("w", "[4]", 0, 16) + "," + Entry("w", "[4]", 0, 16) + "}", 16,
                  {"tensor 'w' is named twice in the header (tensor names must be unique)"});
  ExpectOpenFails("{" + Entry("w", "[4]", 0, 16) + "," + Entry("v", "[2]", 16, 24) + "," + Entry("w", "[2]", 24, 32) +
                      "}",
                  32, {"tensor 'w' is named twice in the header"});
  ExpectOpenFails("{\"__metadata__\":{},\"__metadata__\":{}}", 0, {"'__metadata__' appears twice in the header"});
  ExpectOpenFails("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,16]}}", 16,
                  {"tensor 'w': key 'dtype' appears twice in its header entry"});
  ExpectOpenFails("{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"}}", 0,
                  {"'__metadata__': key 'format' appears twice in its header entry"});
}

TEST(SafetensorsTest, LayoutInAnyOrderWithEmptyTensorsLoads) {
  const std::string path = FreshDir() + "/ok.safetensors";
  // Out of order in the header; tensors of no bytes at the start, between two
  // others and at the end, two of them at one offset.
  WriteRaw(path,
           "{" + Entry("c", "[0]", 24, 24) + "," + Entry("b", "[2]", 16, 24) + "," + Entry("e", "[0, 3]", 0, 0) + "," +
               Entry("a", "[4]", 0, 16) + "," + Entry("d", "[0]", 16, 16) + "," + Entry("f", "[0]", 16, 16) + "}",
           24);
  std::unique_ptr<SafetensorsFile> f;
  const Status st = SafetensorsFile::Open(path, &f);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(f->tensors().size(), 6u);
  EXPECT_EQ(f->Find("b")->data, f->Find("a")->data + 16);
}

TEST(CheckpointReaderTest, SingleFileGetAndGetChecked) {
  const std::string dir = FreshDir();
  Sample s;
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", s.Tensors()).ok());
  std::unique_ptr<CheckpointReader> r;
  ASSERT_TRUE(CheckpointReader::Open(dir, &r).ok());
  EXPECT_TRUE(r->Has("a.f32"));
  EXPECT_FALSE(r->Has("nope"));
  EXPECT_EQ(r->TensorNames().size(), 5u);
  TensorView t;
  EXPECT_TRUE(r->GetChecked("a.f32", {2, 3}, &t).ok());
  EXPECT_EQ(t.name, "a.f32");

  Status st = r->Get("model.layers.0.mlp.up_proj.weight", &t);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos);
  EXPECT_NE(st.message().find(dir + "/model.safetensors"), std::string::npos) << st.message();

  st = r->GetChecked("a.f32", {3, 2}, &t);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  for (const char* n : {"'a.f32'", "model.safetensors", "[2, 3]", "expected [3, 2]"}) {
    EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  }
}

TEST(CheckpointReaderTest, ShardedIndex) {
  const std::string dir = FreshDir();
  Sample s;
  const auto all = s.Tensors();
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", {all[0], all[1]}).ok());
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors", {all[2]}).ok());
  nlohmann::json index = {{"metadata", {{"total_size", 36}}},
                          {"weight_map",
                           {{"a.f32", "model-00001-of-00002.safetensors"},
                            {"b.f16", "model-00001-of-00002.safetensors"},
                            {"c.bf16", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  std::unique_ptr<CheckpointReader> r;
  const Status st = CheckpointReader::Open(dir, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  TensorView t;
  ASSERT_TRUE(r->GetChecked("c.bf16", {3, 1, 2}, &t).ok());
  EXPECT_NE(t.file.find("model-00002-of-00002.safetensors"), std::string::npos);
  EXPECT_EQ(std::memcmp(t.data, s.bf16.data(), 12), 0);
  const Status missing = r->Get("d.scalar", &t);  // in no shard's weight_map
  EXPECT_NE(missing.message().find("model.safetensors.index.json"), std::string::npos) << missing.message();
}

TEST(CheckpointReaderTest, MissingShardNamedByIndex) {
  const std::string dir = FreshDir();
  Sample s;
  ASSERT_TRUE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors", {s.Tensors()[0]}).ok());
  nlohmann::json index = {{"weight_map",
                           {{"a.f32", "model-00001-of-00002.safetensors"},
                            {"lm_head.weight", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  std::unique_ptr<CheckpointReader> r;
  const Status st = CheckpointReader::Open(dir, &r);
  ASSERT_FALSE(st.ok());
  for (const char* n : {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "lm_head.weight"}) {
    EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  }
}

TEST(CheckpointReaderTest, BadIndexes) {
  const std::string dir = FreshDir();
  Sample s;
  ASSERT_TRUE(WriteSafetensors(dir + "/shard.safetensors", {s.Tensors()[0]}).ok());
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::pair<std::string, std::string> cases[] = {
      {"{\"weight_map\": {", "malformed JSON"},
      {"{\"metadata\": {}}", "weight_map"},
      {"{\"weight_map\": {\"a.f32\": \"../shard.safetensors\"}}", "a.f32"},     // leaves the directory
      {"{\"weight_map\": {\"b.f16\": \"shard.safetensors\"}}", "does not contain"}};  // tensor not in shard
  for (const auto& [text, needle] : cases) {
    std::ofstream(index_path, std::ios::trunc) << text;
    std::unique_ptr<CheckpointReader> r;
    const Status st = CheckpointReader::Open(dir, &r);
    ASSERT_FALSE(st.ok()) << text;
    EXPECT_NE(st.message().find("model.safetensors.index.json"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  }
}

TEST(CheckpointReaderTest, NoCheckpointAndPickleOnly) {
  const std::string dir = FreshDir();
  std::unique_ptr<CheckpointReader> r;
  Status st = CheckpointReader::Open(dir, &r);
  ASSERT_FALSE(st.ok());
  for (const std::string& n : {dir, std::string("model.safetensors"), std::string("model.safetensors.index.json")}) {
    EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
  }
  std::ofstream(dir + "/pytorch_model.bin") << "not read";
  st = CheckpointReader::Open(dir, &r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("pytorch_model.bin"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("safetensors is required"), std::string::npos) << st.message();

  st = CheckpointReader::Open(dir + "/no-such-dir", &r);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(r, nullptr);
}

TEST(CheckpointReaderTest, CorruptSingleFileFailsOpen) {
  const std::string dir = FreshDir();
  WriteRaw(dir + "/model.safetensors", OneTensorHeader("I64", "[1]", 0, 8), 8);
  std::unique_ptr<CheckpointReader> r;
  const Status st = CheckpointReader::Open(dir, &r);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace kvlab
