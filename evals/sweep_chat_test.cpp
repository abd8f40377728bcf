// chat = true in a sweep (evals/tasks/chat_prompt.cpp): RULER's prompt goes
// through the model's chat template (a copy of the byte-level tiny-gqa with a
// tokenizer_config.json that has one), the answer prefix after the generation
// prompt, one BOS; the mode is recorded in metrics and key; query_aware =
// false still splits before the question; a model without a template fails
// its point naming the task, the key and the model directory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"
#include "evals/tasks/task.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using sweep_test::Source;

// tiny-gqa's weights with a chat template beside them.
std::string ChatModel(const std::string& dir) {
  const std::string m = dir + "/tiny-chat";
  fs::create_directories(m);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::create_symlink(Source() + "/datasets/models/tiny-gqa/" + f, m + "/" + f);
  std::ofstream(m + "/tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content | trim }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"})";
  return m;
}

std::string Config(const std::string& model, const std::string& extra = "") {
  return "models = [\"" + model + "\"]\ntasks = [\"niah_single_1\"]\nlengths = [512]\nthreads = 1\n"
         "[task.niah_single_1]\nsamples = 2\ntokens_to_generate = 8\n" + extra;
}

TEST(SweepChatTest, EncodeTaskPromptWrapsOnceWithOneBos) {
  const std::string dir = sweep_test::TempDir("sweep_chat_test", "encode");
  const std::string model = ChatModel(dir);
  std::unique_ptr<ChatTemplate> chat;
  ASSERT_TRUE(ChatTemplate::Load(model, &chat).ok());
  ByteTokenizer tok;
  std::vector<int32_t> ids;
  size_t head_end = 0;
  ASSERT_TRUE(EncodeTaskPrompt(tok, chat.get(), "CONTEXT question?\n", "Answer:", 7, &ids, &head_end).ok());
  const std::string want = "<|user|>\nCONTEXT question?\n<|assistant|>\nAnswer:";
  std::vector<int32_t> expect = ByteTokenizer::Encode(want, /*add_bos=*/true);
  EXPECT_EQ(ids, expect);
  EXPECT_EQ(head_end, 1 + std::string("<|user|>\nCONTEXT").size());  // BOS, the template's prefix, the head
  ASSERT_TRUE(EncodeTaskPrompt(tok, nullptr, "CONTEXT question?\n", "Answer:", 7, &ids, &head_end).ok());
  EXPECT_EQ(ids, ByteTokenizer::Encode("CONTEXT question?\nAnswer:", true));
  EXPECT_EQ(head_end, 8u);
  int64_t overhead = 0;
  ASSERT_TRUE(ChatOverheadTokens(tok, chat.get(), &overhead).ok());
  EXPECT_EQ(overhead, static_cast<int64_t>(std::string("<|user|>\n\n<|assistant|>\n").size()));
  fs::remove_all(dir);
}

TEST(SweepChatTest, RulerWithChatIsRecorded) {
  const std::string dir = sweep_test::TempDir("sweep_chat_test", "run");
  const std::string model = ChatModel(dir);
  std::string report;
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, Config(model)), sweep_test::Quiet(dir + "/plain"), &report).ok());
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, Config(model, "chat = true\n")), sweep_test::Quiet(dir + "/chat"), &report)
                  .ok())
      << report;
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, Config(model, "chat = true\nquery_aware = false\n")),
                       sweep_test::Quiet(dir + "/chat-agnostic"), &report)
                  .ok())
      << report;
  ASSERT_TRUE(RunSweep(sweep_test::Parse(dir, Config(model, "query_aware = false\n")),
                       sweep_test::Quiet(dir + "/agnostic"), &report)
                  .ok())
      << report;
  std::ifstream md(dir + "/chat/summary.md");
  const std::string summary((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(summary.find(", question-aware, chat template"), std::string::npos) << summary;
  const json plain = sweep_test::Records(dir + "/plain")[0], chat = sweep_test::Records(dir + "/chat")[0];
  ASSERT_EQ(chat["status"], "ok") << chat.dump();
  EXPECT_EQ(plain["metrics"]["chat"], false);
  EXPECT_EQ(chat["metrics"]["chat"], true);
  EXPECT_EQ(plain["key"].get<std::string>().find("\"chat\":"), std::string::npos);  // older records' keys hold
  EXPECT_NE(chat["key"].get<std::string>().find("\"chat\":true"), std::string::npos);
  // The template's tokens count in the length: both prompts fit it (within 2%).
  for (const json* r : {&plain, &chat}) {
    for (const json& n : (*r)["metrics"]["per_sample"]["prompt_tokens"]) {
      EXPECT_NEAR(n.get<double>(), 512.0 - 8 - 1, 0.02 * 512) << r->dump();
    }
  }
  // Question-agnostic: the split is where the context ends, so the question
  // part grows by exactly what the template puts after the message.
  const json ca = sweep_test::Records(dir + "/chat-agnostic")[0], pa = sweep_test::Records(dir + "/agnostic")[0];
  ASSERT_EQ(ca["status"], "ok") << ca.dump();
  const json& cq = ca["metrics"]["per_sample"]["question_tokens"];
  const json& pq = pa["metrics"]["per_sample"]["question_tokens"];
  ASSERT_EQ(cq.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(cq[i].get<int64_t>() - pq[i].get<int64_t>(), static_cast<int64_t>(std::string("\n<|assistant|>\n").size()));
  }
  fs::remove_all(dir);
}

TEST(SweepChatTest, ModelWithoutTemplateFailsNamingTaskKeyAndModel) {
  const std::string dir = sweep_test::TempDir("sweep_chat_test", "none");
  const std::string model = Source() + "/datasets/models/tiny-gqa";
  std::string report;
  RunSweep(sweep_test::Parse(dir, Config(model, "chat = true\n")), sweep_test::Quiet(dir + "/out"), &report);
  const json r = sweep_test::Records(dir + "/out")[0];
  const std::string err = r.value("error", "");
  EXPECT_NE(err.find("task 'niah_single_1': [task.niah_single_1] chat = true, but model 'tiny-gqa' (" + model +
                     ") has no chat template"),
            std::string::npos)
      << r.dump();
  SweepConfig c;
  std::ofstream(dir + "/bad.toml") << Config(model, "chat = \"yes\"\n");
  const Status s = LoadSweepConfig(dir + "/bad.toml", {}, &c);
  EXPECT_NE(s.message().find("'task.niah_single_1.chat' must be true or false"), std::string::npos) << s.ToString();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
