#include "core/tokenizer.h"

#include <gtest/gtest.h>

namespace kvlab {
namespace {

TEST(TokenizerTest, BytesRoundTripWithBos) {
  const std::string text = "KV caché\n";
  auto ids = ByteTokenizer::Encode(text);
  ASSERT_EQ(ids.size(), text.size() + 1);
  EXPECT_EQ(ids[0], ByteTokenizer::kBos);
  EXPECT_EQ(ids[1], 'K');
  EXPECT_EQ(ByteTokenizer::Decode(ids), text);
  EXPECT_EQ(ByteTokenizer::Decode({ByteTokenizer::kEos, 'a', ByteTokenizer::kPad}), "a");
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

}  // namespace
}  // namespace kvlab
