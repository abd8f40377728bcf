// Sweep task texts as token ids (FILE.ids) and models whose vocabulary is not
// the byte tokenizer's: windows of ids instead of bytes, ids checked against
// the model's vocabulary, retrieval tasks refused for models without a tokenizer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/model/model_config.h"
#include "evals/sweep.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using sweep_test::Parse;
using sweep_test::Quiet;
using sweep_test::Records;

std::string TempDir(const std::string& name) { return sweep_test::TempDir("sweep_tokens_test", name); }

void WriteTextAndIds(const std::string& dir, size_t bytes) {
  std::string t;
  const char* words[] = {"keys ", "values ", "cache ", "tokens ", "heads ", "blocks "};
  for (size_t i = 0; t.size() < bytes; ++i) t += words[(i * 7 + i / 3) % 6];
  t.resize(bytes);
  std::ofstream(dir + "/text.txt") << t;
  std::ofstream ids(dir + "/text.ids");
  for (size_t i = 0; i < t.size(); ++i) {
    ids << static_cast<int>(static_cast<unsigned char>(t[i])) << (i % 16 == 15 ? "\n" : ", ");
  }
}

// On a byte-level model, a .ids file of a text's bytes scores exactly as the text.
TEST(SweepTokensTest, IdsFileOnAByteModelMatchesItsText) {
  const std::string dir = TempDir("bytes");
  WriteTextAndIds(dir, 300);
  const std::string common = "models = [\"small\"]\nlengths = [40]\nthreads = 1\nbaseline = true\n";
  const SweepConfig from_text = Parse(dir, "name = \"t\"\n" + common + "tasks = [\"bpb\", \"latency\"]\n"
                                      "[task.bpb]\ntext = \"text.txt\"\nprefill = 8\n"
                                      "[task.latency]\ntext = \"text.txt\"\ndecode_tokens = 2\n");
  std::string report;
  ASSERT_TRUE(RunSweep(from_text, Quiet(dir + "/text"), &report).ok()) << report;
  const SweepConfig from_ids = Parse(dir, "name = \"i\"\n" + common + "tasks = [\"bpb\", \"latency\"]\n"
                                     "[task.bpb]\ntext = \"text.ids\"\nprefill = 8\n"
                                     "[task.latency]\ntext = \"text.ids\"\ndecode_tokens = 2\n");
  ASSERT_TRUE(RunSweep(from_ids, Quiet(dir + "/ids"), &report).ok()) << report;
  const std::vector<json> t = Records(dir + "/text"), i = Records(dir + "/ids");
  ASSERT_EQ(t.size(), 2u);
  ASSERT_EQ(i.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(t[k]["status"], "ok") << t[k].dump();
    EXPECT_EQ(i[k]["status"], "ok") << i[k].dump();
  }
  EXPECT_EQ(t[0]["task"], "bpb");
  EXPECT_DOUBLE_EQ(i[0]["metrics"]["bpb"].get<double>(), t[0]["metrics"]["bpb"].get<double>());
  EXPECT_EQ(i[0]["metrics"]["bpb_unit"], "token");
  EXPECT_FALSE(t[0]["metrics"].contains("bpb_unit"));
  EXPECT_EQ(i[1]["metrics"]["memory"]["tokens_seen"], t[1]["metrics"]["memory"]["tokens_seen"]);
  fs::remove_all(dir);
}

// An id past the model's vocabulary fails the point with the file named.
TEST(SweepTokensTest, BadIdNamesTheFile) {
  const std::string dir = TempDir("badid");
  std::ofstream(dir + "/bad.ids") << "1 2 3 4 5 6 7 8 9 10\n11 12 13 259 14 15 16 17 18\n";
  const SweepConfig c = Parse(dir, "models = [\"small\"]\ntasks = [\"bpb\"]\nlengths = [16]\nthreads = 1\n"
                                   "[task.bpb]\ntext = \"bad.ids\"\n");
  std::string report;
  // Its only point fails, so the sweep measured nothing: an error, with the records written.
  const Status s = RunSweep(c, Quiet(dir + "/out"), &report);
  ASSERT_FALSE(s.ok()) << report;
  EXPECT_NE(s.message().find("every one of the 1 point(s) failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(dir + "/bad.ids:2"), std::string::npos) << s.message();
  const std::vector<json> r = Records(dir + "/out");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["status"], "error");
  const std::string e = r[0]["error"].get<std::string>();
  EXPECT_NE(e.find(dir + "/bad.ids:2"), std::string::npos) << e;
  EXPECT_NE(e.find("'259'"), std::string::npos) << e;
  fs::remove_all(dir);
}

// A model with a 300-token vocabulary and no tokenizer: ids work, text and
// the retrieval tasks (text prompts) are refused with a clear error.
TEST(SweepTokensTest, NonByteModelTakesIdsAndRefusesRetrieval) {
  const std::string dir = TempDir("nonbyte");
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("small", &mc).ok());
  mc.vocab_size = 300;
  mc.num_hidden_layers = 1;
  mc.bos_token_id = 1;
  mc.eos_token_id = 2;
  mc.pad_token_id = -1;
  ASSERT_TRUE(WriteRandomCheckpoint(mc, 1, 0.02, dir + "/m300").ok());
  std::ofstream ids(dir + "/text.ids");
  for (int i = 0; i < 200; ++i) ids << (i * 37 % 300) << " ";
  ids.close();
  std::ofstream(dir + "/text.txt") << std::string(200, 'x');
  const SweepConfig c = Parse(dir, "models = [\"m300\"]\ntasks = [\"bpb\", \"passkey\"]\nlengths = [32]\nthreads = 1\n"
                                   "[task.bpb]\ntext = \"text.ids\"\nprefill = 8\n"
                                   "[task.passkey]\ndepths = [0.5]\nsamples = 1\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, Quiet(dir + "/out"), &report).ok()) << report;
  std::vector<json> r = Records(dir + "/out");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0]["task"], "bpb");
  EXPECT_EQ(r[0]["status"], "ok") << r[0].dump();
  EXPECT_EQ(r[0]["metrics"]["bpb_unit"], "token");
  EXPECT_EQ(r[0]["metrics"]["tokens_scored"], 31);
  EXPECT_EQ(r[1]["task"], "passkey");
  EXPECT_EQ(r[1]["status"], "error");
  const std::string e = r[1]["error"].get<std::string>();
  // The retrieval tasks take any tokenizer now; this model has none.
  EXPECT_NE(e.find("task 'passkey'"), std::string::npos) << e;
  EXPECT_NE(e.find("model 'm300'"), std::string::npos) << e;
  EXPECT_NE(e.find("no tokenizer"), std::string::npos) << e;
  EXPECT_NE(e.find("300"), std::string::npos) << e;

  // Text on this model: no tokenizer, so the error says to give token ids.
  const SweepConfig t = Parse(dir, "models = [\"m300\"]\ntasks = [\"latency\"]\nlengths = [32]\nthreads = 1\n"
                                   "[task.latency]\ntext = \"text.txt\"\ndecode_tokens = 1\n");
  EXPECT_FALSE(RunSweep(t, Quiet(dir + "/out2"), &report).ok()) << report;  // its only point failed
  r = Records(dir + "/out2");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0]["status"], "error");
  const std::string e2 = r[0]["error"].get<std::string>();
  EXPECT_NE(e2.find("text.txt"), std::string::npos) << e2;
  EXPECT_NE(e2.find("token ids"), std::string::npos) << e2;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
