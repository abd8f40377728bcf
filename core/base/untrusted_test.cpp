// The bounds on untrusted documents (depth, size) and the quoting of file bytes
// into error messages (core/base/untrusted.h).
#include "core/base/untrusted.h"

#include <gtest/gtest.h>

#include <string>

#include "core/base/untrusted_json.h"

namespace kvlab {
namespace {

bool ValidUtf8OneLine(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n' || c == '\r') return false;
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

std::string Repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(UntrustedTest, JsonDepthLimit) {
  EXPECT_TRUE(CheckJsonText(Repeat("[", 128) + Repeat("]", 128), "f.json", 1 << 20).ok());
  const Status deep = CheckJsonText(Repeat("[", 100000) + Repeat("]", 100000), "f.json", 1 << 20);
  EXPECT_EQ(deep.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(deep.message().find("f.json:1: JSON nested deeper than 128 levels"), std::string::npos) << deep.message();
  const Status objs = CheckJsonText("{\"a\":\n" + Repeat("{\"a\":", 200), "g.json", 1 << 20);
  EXPECT_NE(objs.message().find("g.json:2: JSON nested deeper"), std::string::npos) << objs.message();
  // Brackets inside strings (escaped quotes included) are text, not nesting.
  EXPECT_TRUE(CheckJsonText("{\"k\": \"\\\"" + Repeat("[", 1000) + "\"}", "s.json", 1 << 20).ok());
}

TEST(UntrustedTest, JsonSizeLimit) {
  const Status s = CheckJsonText(std::string(2000, ' '), "big.json", 1000);
  EXPECT_NE(s.message().find("big.json: 2000 bytes of JSON, more than the 1000"), std::string::npos) << s.message();
}

TEST(UntrustedTest, TomlDepthLimit) {
  EXPECT_TRUE(CheckTomlText("name = \"x\"\n[a.b.c]\nk.l = [[1, 2], {x = 1.5, y.z = 'q.q'}]\n", "c.toml", 1 << 20).ok());
  const std::string arrays = "a = " + Repeat("[", 100000) + Repeat("]", 100000) + "\n";
  const std::string tables = "a = " + Repeat("{b = ", 100000) + "1" + Repeat("}", 100000) + "\n";
  const std::string header = "x = 1\n[" + Repeat("t.", 100000) + "t]\n";
  const std::string keys = Repeat("k.", 100000) + "k = 1\n";
  const std::string aot = "[[" + Repeat("t.", 500) + "t]]\n";
  for (const std::string& text : {arrays, tables, header, keys, aot}) {
    const Status s = CheckTomlText(text, "deep.toml", 16 << 20);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << text.substr(0, 40);
    EXPECT_NE(s.message().find("deep.toml:"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("nested deeper than 128 levels"), std::string::npos) << s.message();
  }
  EXPECT_NE(CheckTomlText(header, "deep.toml", 1 << 20).message().find("deep.toml:2:"), std::string::npos);
  // Brackets and dots in strings and comments do not count.
  const std::string quiet = "s = \"" + Repeat("[", 500) + "\"\nt = '''" + Repeat("{", 500) + "'''\n# " +
                            Repeat("[", 500) + "\n\"" + Repeat("a.", 500) + "\" = 1\n";
  EXPECT_TRUE(CheckTomlText(quiet, "q.toml", 1 << 20).ok()) << CheckTomlText(quiet, "q.toml", 1 << 20).message();
  EXPECT_FALSE(CheckTomlText(std::string(100, 'x'), "big.toml", 99).ok());
}

TEST(UntrustedTest, QuoteBytesIsOneLineOfUtf8) {
  EXPECT_EQ(QuoteBytes("plain"), "plain");
  EXPECT_EQ(QuoteBytes("a\nb\tc\r\x01\x7f"), "a\\nb\\tc\\r\\x01\\x7f");
  EXPECT_EQ(QuoteBytes("caf\xc3\xa9"), "caf\xc3\xa9");                    // UTF-8 kept
  EXPECT_EQ(QuoteBytes("\xff\xfe\xc3"), "\\xff\\xfe\\xc3");               // not UTF-8: escaped
  EXPECT_EQ(QuoteBytes("\xed\xa0\x80"), "\\xed\\xa0\\x80");               // a surrogate
  EXPECT_EQ(QuoteBytes("\xc0\xaf"), "\\xc0\\xaf");                        // overlong
  EXPECT_EQ(QuoteBytes(std::string(100, 'x'), 10), std::string(10, 'x') + "... (100 bytes)");
  EXPECT_EQ(QuoteBytes("ab\xc3\xa9", 3), "ab... (4 bytes)");                // cut before a character
  const std::string once = QuoteBytes("x\xff\ny\xe2\x82\xac", 1000);
  EXPECT_TRUE(ValidUtf8OneLine(once));
  EXPECT_EQ(QuoteBytes(once, 1000), once);
}

TEST(UntrustedTest, QuoteJsonIsAPrefix) {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  const std::string q = QuoteJson(big, 40);
  EXPECT_EQ(q.rfind("[0, 1, 2, 3", 0), 0u) << q;
  EXPECT_LT(q.size(), 60u);
  EXPECT_EQ(q.substr(q.size() - 3), "...");
  EXPECT_EQ(QuoteJson(nlohmann::json::parse(R"({"a": [1, "x\ny"]})")), "{\"a\": [1, \"x\\ny\"]}");
  EXPECT_EQ(QuoteJson(nlohmann::json(3.5)), "3.5");
}

TEST(UntrustedTest, ParseJsonTextBoundsAndQuotes) {
  nlohmann::json j;
  EXPECT_TRUE(ParseJsonText("{\"a\": [1]}", "ok.json", 100, &j).ok());
  EXPECT_EQ(j["a"][0], 1);
  const Status deep = ParseJsonText(Repeat("[", 100000), "deep.json", 1 << 20, &j);
  EXPECT_NE(deep.message().find("deep.json:1: JSON nested deeper than 128"), std::string::npos);
  const Status bad = ParseJsonText("{\"a\": \"\xff\xfe\"}", "bad.json", 100, &j);
  EXPECT_NE(bad.message().find("bad.json: malformed JSON: "), std::string::npos) << bad.message();
  EXPECT_TRUE(ValidUtf8OneLine(bad.message())) << bad.message();
}

}  // namespace
}  // namespace kvlab
