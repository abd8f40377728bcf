// `kvlab train` and `kvlab convert`: reproducibility, resume, the trainer's
// forward against the engine's, KV-head pooling against the engine's own
// head merge, and config errors.
#include "datasets/trainer/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/base/temp_dir_test_util.h"
#include "core/engine/engine.h"
#include "datasets/tasks/tasks.h"
#include "core/tokenizer/tokenizer.h"
#include "datasets/trainer/train_config.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::path(ProcessTempDir()) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A small text corpus (no files from the corpus build are needed).
std::string WriteCorpus(const std::string& dir) {
  std::string text;
  SplitMix rng(3);
  const char* words[] = {"the ", "cache ", "grows ", "with ", "every ", "token ", "and ", "user ", "keys ", "values "};
  while (text.size() < 20000) text += words[rng.Below(10)];
  const std::string path = dir + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

std::string ConfigText(const std::string& out, const std::string& corpus, int kv_heads) {
  return "out = \"" + out + "\"\n[model]\nhidden_size = 64\nintermediate_size = 128\nnum_hidden_layers = 2\n"
         "num_attention_heads = 4\nnum_key_value_heads = " + std::to_string(kv_heads) +
         "\nmax_position_embeddings = 256\n[train]\nseed = 5\nlr = 3e-3\nwarmup_steps = 5\nthreads = 1\n"
         "eval_every = 0\ncheckpoint_every = 0\nlog_every = 100\n[data]\ntrain = \"" + corpus +
         "\"\n[[phase]]\nsteps = 30\nseq_len = 48\nbatch = 4\ntext = 1.0\ncopy = 0.5\npasskey = 0.0\n";
}

TrainConfig Config(const std::string& dir, const std::string& out, int kv_heads) {
  TrainConfig c;
  const Status s = ParseTrainConfig(ConfigText(out, WriteCorpus(dir), kv_heads), dir + "/train.toml", &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c;
}

TEST(TrainerTest, SameSeedSameLossesAndLossFalls) {
  const std::string dir = TempDir("repro");
  TrainOptions o;
  o.quiet = true;
  o.max_steps = 20;
  TrainResult a, b;
  ASSERT_TRUE(Train(Config(dir, dir + "/a", 2), o, &a).ok());
  ASSERT_TRUE(Train(Config(dir, dir + "/b", 2), o, &b).ok());
  ASSERT_EQ(a.step_losses.size(), 20u);
  EXPECT_EQ(a.step_losses, b.step_losses);  // bit for bit
  // Learning happens: the loss of the last steps is well below the first.
  EXPECT_LT(a.step_losses.back(), a.step_losses.front() - 1.0);
  // A different seed gives different losses.
  TrainConfig c = Config(dir, dir + "/c", 2);
  c.seed = 6;
  TrainResult r;
  ASSERT_TRUE(Train(c, o, &r).ok());
  EXPECT_NE(r.step_losses, a.step_losses);
  fs::remove_all(dir);
}

// Interrupted after 12 steps and resumed: the same losses as one run.
TEST(TrainerTest, ResumeContinuesExactly) {
  const std::string dir = TempDir("resume");
  TrainOptions o;
  o.quiet = true;
  o.max_steps = 24;
  TrainResult whole, first, second;
  ASSERT_TRUE(Train(Config(dir, dir + "/whole", 4), o, &whole).ok());
  o.max_steps = 12;
  ASSERT_TRUE(Train(Config(dir, dir + "/split", 4), o, &first).ok());
  EXPECT_EQ(first.steps_done, 12);
  ASSERT_TRUE(fs::exists(dir + "/split/optimizer.pt"));
  ASSERT_TRUE(Train(Config(dir, dir + "/split", 4), o, &second).ok());
  EXPECT_EQ(second.steps_done, 24);
  std::vector<double> joined = first.step_losses;
  joined.insert(joined.end(), second.step_losses.begin(), second.step_losses.end());
  EXPECT_EQ(joined, whole.step_losses);
  // The loss log has one row per logged step, none duplicated by the resume.
  std::ifstream log(dir + "/split/loss.csv");
  std::string line;
  int rows = 0;
  while (std::getline(log, line)) ++rows;
  EXPECT_EQ(rows, 1 + 2);  // header + the two final steps (log_every is 100)
  fs::remove_all(dir);
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// What the trainer learns is what the engine runs: the checkpoint it writes
// gives the same logits through the paged engine (GQA 4:2, trained weights).
TEST(TrainerTest, TrainerForwardEqualsEngine) {
  const std::string dir = TempDir("fwd");
  TrainOptions o;
  o.quiet = true;
  o.max_steps = 10;
  TrainResult r;
  ASSERT_TRUE(Train(Config(dir, dir + "/m", 2), o, &r).ok());
  std::vector<int32_t> ids = {256};
  for (int i = 0; i < 60; ++i) ids.push_back(97 + (i * 7) % 26);
  std::vector<float> ours, dense;
  ASSERT_TRUE(TrainerLogits(dir + "/m", ids, &ours).ok());
  EngineOptions eo;
  eo.model = dir + "/m";
  eo.kv_dtype = DType::kF32;
  eo.max_context = 64;
  ASSERT_TRUE(DenseLogits(eo, ids, /*nocache=*/true, &dense).ok());
  EXPECT_LT(MaxAbsDiff(ours, dense), 1e-4f);
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(eo, {PolicySpec{"full", {}, "t"}}, &e).ok());
  ASSERT_TRUE(e->AddSequence(0).ok());
  std::vector<std::vector<float>> paged;
  ASSERT_TRUE(e->Forward({SeqChunk{0, ids}}, true, &paged).ok());
  EXPECT_LT(MaxAbsDiff(ours, paged[0]), 1e-4f);
  fs::remove_all(dir);
}

// convert --pool-kv-heads 2 gives the checkpoint the engine's own mean/first
// head merge (gqa-reuse) computes on the fly.
TEST(TrainerTest, ConvertMatchesEngineHeadMerge) {
  const std::string dir = TempDir("convert");
  TrainOptions o;
  o.quiet = true;
  o.max_steps = 5;
  TrainResult r;
  ASSERT_TRUE(Train(Config(dir, dir + "/mha", 4), o, &r).ok());
  std::vector<int32_t> ids = {256, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110};
  for (const char* merge : {"mean", "first"}) {
    const bool mean = std::string(merge) == "mean";
    ASSERT_TRUE(ConvertPoolKvHeads(dir + "/mha", dir + "/gqa", 2, mean).ok());
    ModelConfig mc;
    ASSERT_TRUE(LoadModelConfig(dir + "/gqa/config.json", &mc).ok());
    EXPECT_EQ(mc.num_key_value_heads, 2);
    EngineOptions eo;
    eo.kv_dtype = DType::kF32;
    eo.max_context = 32;
    auto logits = [&](const std::string& model, const std::vector<PolicySpec>& stack) {
      eo.model = model;
      std::unique_ptr<Engine> e;
      EXPECT_TRUE(Engine::Create(eo, stack, &e).ok());
      EXPECT_TRUE(e->AddSequence(0).ok());
      std::vector<std::vector<float>> out;
      EXPECT_TRUE(e->Forward({SeqChunk{0, ids}}, true, &out).ok());
      return out[0];
    };
    const auto converted = logits(dir + "/gqa", {PolicySpec{"full", {}, "t"}});
    const auto merged = logits(dir + "/mha", {PolicySpec{"gqa-reuse", {{"group", "2"}, {"merge", merge}}, "t"}});
    EXPECT_LT(MaxAbsDiff(converted, merged), 1e-4f) << merge;
    const auto original = logits(dir + "/mha", {PolicySpec{"full", {}, "t"}});
    EXPECT_GT(MaxAbsDiff(converted, original), 1e-3f) << merge << ": pooling changed nothing";
  }
  // A group that does not divide the KV heads is refused, naming the file.
  const Status bad = ConvertPoolKvHeads(dir + "/mha", dir + "/bad", 3, true);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.ToString().find("config.json"), std::string::npos);
  fs::remove_all(dir);
}

// [data] boost: about boost_share of the text rows come from the boost file,
// the rest from train; without it no row does, and the draw is deterministic.
TEST(TrainerTest, BoostDrawsItsShareOfTextRows) {
  const std::string dir = TempDir("boost");
  const std::string train(8192, 'a'), boost(8192, 'x');
  std::ofstream(dir + "/a.txt") << train;
  std::ofstream(dir + "/x.txt") << boost;
  const std::string head = "out = \"o\"\n[data]\ntrain = \"a.txt\"\n";
  const std::string phase = "[[phase]]\nsteps = 40\nseq_len = 16\nbatch = 8\ntext = 1.0\n";
  TrainConfig plain, boosted;
  ASSERT_TRUE(ParseTrainConfig(head + phase, dir + "/p.toml", &plain).ok());
  const Status s = ParseTrainConfig(head + "boost = \"x.txt\"\nboost_share = 0.3\n" + phase, dir + "/b.toml", &boosted);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(boosted.boost_data, dir + "/x.txt");  // relative to the config's folder
  auto count = [&](const TrainConfig& c, int* from_boost, int* rows) {
    *from_boost = *rows = 0;
    for (int64_t step = 0; step < 40; ++step) {
      for (const std::vector<int32_t>& row : TrainingBatchRows(c, step, train, boost)) {
        ASSERT_EQ(row.size(), 17u);
        EXPECT_EQ(row[0], ByteTokenizer::kBos);
        const int xs = static_cast<int>(std::count(row.begin() + 1, row.end(), 'x'));
        const int as = static_cast<int>(std::count(row.begin() + 1, row.end(), 'a'));
        EXPECT_EQ(xs + as, 16);
        EXPECT_TRUE(xs == 0 || as == 0);  // a row comes from one file
        *from_boost += xs == 16;
        ++*rows;
      }
    }
  };
  int from_boost = 0, rows = 0;
  count(plain, &from_boost, &rows);
  EXPECT_EQ(rows, 320);
  EXPECT_EQ(from_boost, 0);
  count(boosted, &from_boost, &rows);
  EXPECT_GT(from_boost, 0.3 * 320 - 40);  // binomial(320, 0.3): mean 96, sd 8.2
  EXPECT_LT(from_boost, 0.3 * 320 + 40);
  EXPECT_EQ(TrainingBatchRows(boosted, 7, train, boost), TrainingBatchRows(boosted, 7, train, boost));
  // The two keys go together, and the share is below 1.
  TrainConfig c;
  for (const std::string bad : {"boost = \"x.txt\"\n", "boost_share = 0.5\n", "boost = \"x.txt\"\nboost_share = 1.0\n"}) {
    const Status e = ParseTrainConfig(head + bad + phase, dir + "/bad.toml", &c);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.ToString().find("bad.toml"), std::string::npos) << e.ToString();
    EXPECT_NE(e.ToString().find("boost"), std::string::npos) << e.ToString();
  }
  fs::remove_all(dir);
}

// A ruler phase's rows are RULER's own prompts (niah_single_1's and vt's
// templates here) followed by their references, and only the answer's bytes
// carry answer_weight; a missing essay file or an unknown task is refused.
TEST(TrainerTest, RulerRowsAreRulerPromptsWithTheirAnswersWeighted) {
  const std::string dir = TempDir("ruler");
  const std::string head = "out = \"o\"\n";
  const std::string phase =
      "[[phase]]\nsteps = 10\nseq_len = 600\nbatch = 8\nmin_length = 0.8\ntext = 0.0\nruler = 1.0\n"
      "ruler_tasks = [\"niah_single_1\", \"vt\"]\nanswer_weight = 3.0\nfiller_weight = 0.5\n";
  TrainConfig c;
  const Status s = ParseTrainConfig(head + phase, dir + "/r.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  int niah = 0, vt = 0;
  for (int64_t step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> weights;
    const auto rows = TrainingBatchRows(c, step, "", "", "", &weights);
    ASSERT_EQ(rows.size(), 8u);
    for (size_t b = 0; b < rows.size(); ++b) {
      std::string text;
      for (size_t t = 1; t < rows[b].size() && rows[b][t] != ByteTokenizer::kEos; ++t) text += static_cast<char>(rows[b][t]);
      std::string prefix, answer;
      std::string weighted;  // the bytes trained at answer_weight
      for (size_t t = 0; t < text.size(); ++t) {
        if (weights[b][t] == 3.0f) weighted += text[t];
        else EXPECT_EQ(weights[b][t], 0.5f) << t;
      }
      ASSERT_FALSE(weighted.empty());
      ASSERT_EQ(text.substr(text.size() - weighted.size()), weighted);  // the answer ends the row
      const std::string prompt = text.substr(0, text.size() - weighted.size());
      if (prompt.rfind("A special magic number is hidden within the following text.", 0) == 0) {
        ++niah;
        // " 1234567." after "... mentioned in the provided text is": the needle's value.
        ASSERT_EQ(weighted.size(), 9u) << weighted;
        EXPECT_EQ(weighted.front(), ' ');
        EXPECT_EQ(weighted.back(), '.');
        const std::string value = weighted.substr(1, 7);
        EXPECT_NE(prompt.find("is: " + value + "."), std::string::npos) << value;
        EXPECT_EQ(prompt.substr(prompt.size() - 34), " mentioned in the provided text is");
      } else {
        ASSERT_EQ(prompt.rfind("Memorize and track the chain(s) of variable assignment", 0), 0u) << prompt.substr(0, 80);
        ++vt;
        // The five names of the chain after "they are: ", each assigned in the prompt.
        EXPECT_EQ(prompt.substr(prompt.size() - 10), "they are: ");
        std::istringstream names(weighted);
        std::string name;
        int n = 0;
        while (names >> name) {
          EXPECT_NE(prompt.find("VAR " + name + " = "), std::string::npos) << name;
          ++n;
        }
        EXPECT_EQ(n, 5);
      }
      EXPECT_LE(text.size() + 1, 600u);
    }
  }
  EXPECT_GT(niah, 0);
  EXPECT_GT(vt, 0);
  EXPECT_EQ(TrainingBatchRows(c, 2, "", "", ""), TrainingBatchRows(c, 2, "", "", ""));
  TrainConfig bad;
  Status e = ParseTrainConfig(head + "[[phase]]\nsteps = 1\nseq_len = 600\ntext = 0.0\nruler = 1.0\n"
                              "ruler_tasks = [\"niah_multikey_1\"]\n", dir + "/essay.toml", &bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.ToString().find("essay.toml"), std::string::npos) << e.ToString();
  EXPECT_NE(e.ToString().find("'essay'"), std::string::npos) << e.ToString();
  e = ParseTrainConfig(head + "[[phase]]\nsteps = 1\nseq_len = 600\ntext = 0.0\nruler = 1.0\n"
                       "ruler_tasks = [\"niah_single_9\"]\n", dir + "/task.toml", &bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.ToString().find("ruler_tasks"), std::string::npos) << e.ToString();
  EXPECT_NE(e.ToString().find("niah_single_9"), std::string::npos) << e.ToString();
  e = ParseTrainConfig(head + "[[phase]]\nsteps = 1\nseq_len = 600\ntext = 0.0\nruler = 1.0\n", dir + "/none.toml", &bad);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.ToString().find("ruler_tasks"), std::string::npos) << e.ToString();
  fs::remove_all(dir);
}

TEST(TrainConfigTest, ErrorsNameFileLineColumn) {
  TrainConfig c;
  Status s = ParseTrainConfig("out = \"x\"\n[train]\nlrr = 1.0\n", "cfg.toml", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("cfg.toml:3:"), std::string::npos) << s.ToString();
  EXPECT_NE(s.ToString().find("train.lrr"), std::string::npos);
  s = ParseTrainConfig("out = \"x\"\n[[phase]]\nsteps = \"ten\"\n", "cfg.toml", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("cfg.toml:3:"), std::string::npos) << s.ToString();
  s = ParseTrainConfig("out = \"x\"\n", "cfg.toml", &c);
  EXPECT_FALSE(s.ok());  // no phase
  s = ParseTrainConfig("out = \"x\"\n[model]\nnum_attention_heads = 8\nnum_key_value_heads = 3\n[[phase]]\nsteps = 1\ntext = 0.0\ncopy = 1.0\n",
                       "cfg.toml", &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("num_key_value_heads"), std::string::npos) << s.ToString();
  // min_length is a fraction of seq_len in (0, 1].
  for (const char* bad : {"0.0", "1.5", "-0.25"}) {
    s = ParseTrainConfig(std::string("out = \"x\"\n[[phase]]\nsteps = 1\ntext = 0.0\ncopy = 1.0\nmin_length = ") + bad + "\n", "cfg.toml", &c);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.ToString().find("min_length"), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find("cfg.toml:"), std::string::npos) << s.ToString();
  }
  s = ParseTrainConfig("out = \"x\"\n[[phase]]\nsteps = 1\ntext = 0.0\ncopy = 1.0\nmin_length = 0.75\n", "cfg.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_DOUBLE_EQ(c.phases[0].min_length, 0.75);
  ASSERT_TRUE(ParseTrainConfig("out = \"x\"\n[[phase]]\nsteps = 1\ntext = 0.0\ncopy = 1.0\n", "cfg.toml", &c).ok());
  EXPECT_DOUBLE_EQ(c.phases[0].min_length, 0.25);
}

TEST(TrainConfigTest, LearningRateFollowsTheScheduleEachPhaseRanUnder) {
  const std::string head = "out = \"x\"\n[train]\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 10\n";
  const std::string phase = "[[phase]]\nsteps = 100\ntext = 0.0\ncopy = 1.0\n";
  TrainConfig c;
  // One cosine over all phases: linear warm-up, then down to min_lr at the end.
  ASSERT_TRUE(ParseTrainConfig(head + phase + phase, "cfg.toml", &c).ok());
  EXPECT_DOUBLE_EQ(c.LearningRateAt(0), 1e-3);
  EXPECT_DOUBLE_EQ(c.LearningRateAt(9), 1e-2);
  EXPECT_NEAR(c.LearningRateAt(10), 1e-2, 1e-12);
  EXPECT_NEAR(c.LearningRateAt(105), 5.5e-3, 1e-12);  // half-way through steps 10..200
  EXPECT_NEAR(c.LearningRateAt(199), 1e-3, 1e-5);
  const double at_150 = c.LearningRateAt(150);
  // A run first planned for 100 steps, then lengthened to 200: the first phase
  // ran under a 100-step schedule (down to min_lr at step 100), the second
  // under the 200-step one, whose rate at step 100 is half-way up again.
  ASSERT_TRUE(ParseTrainConfig(head + phase + "schedule_steps = 100\n" + phase + "schedule_steps = 200\n", "cfg.toml", &c).ok());
  EXPECT_EQ(c.phases[0].schedule_steps, 100);
  EXPECT_NEAR(c.LearningRateAt(55), 5.5e-3, 1e-12);  // half-way through steps 10..100
  EXPECT_NEAR(c.LearningRateAt(99), 1e-3, 1e-5);
  EXPECT_NEAR(c.LearningRateAt(100), 1e-3 + 0.5 * 9e-3 * (1 + std::cos(M_PI * 90.0 / 190.0)), 1e-12);
  EXPECT_DOUBLE_EQ(c.LearningRateAt(150), at_150);
  // Inherited by later phases until one sets its own.
  ASSERT_TRUE(ParseTrainConfig(head + phase + "schedule_steps = 150\n" + phase, "cfg.toml", &c).ok());
  EXPECT_NEAR(c.LearningRateAt(149), 1e-3, 1e-5);
  EXPECT_DOUBLE_EQ(c.LearningRateAt(180), 1e-3);
  // A schedule shorter than the phase it governs is an error naming the key.
  for (const char* bad : {"50", "-1"}) {
    const Status s = ParseTrainConfig(head + phase + phase + "schedule_steps = " + bad + "\n", "cfg.toml", &c);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.ToString().find("schedule_steps"), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find("cfg.toml:"), std::string::npos) << s.ToString();
  }
}

// The committed retrieval model's config replays the learning rates its run
// logged (its plan was lengthened four times while it ran; train.toml records
// the schedule each part ran under), so a fresh run follows the same rates.
TEST(TrainConfigTest, TinyRecallConfigReplaysItsLoggedLearningRates) {
  const char* src = std::getenv("KVLAB_SOURCE_DIR");
  const std::string dir = std::string(src ? src : ".") + "/datasets/models/tiny-recall";
  TrainConfig c;
  const Status s = LoadTrainConfig(dir + "/train.toml", &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::ifstream csv(dir + "/loss.csv");
  ASSERT_TRUE(csv.good()) << dir << "/loss.csv";
  std::string line;
  std::getline(csv, line);
  ASSERT_EQ(line.rfind("step,tokens,lr,", 0), 0u) << line;
  int rows = 0;
  int64_t last = 0;
  while (std::getline(csv, line)) {
    std::stringstream ss(line);
    std::string step, tokens, lr;
    std::getline(ss, step, ',');
    std::getline(ss, tokens, ',');
    std::getline(ss, lr, ',');
    const int64_t logged_step = std::stoll(step);  // the count after the step: its index is one less
    const double want = std::stod(lr);
    EXPECT_NEAR(c.LearningRateAt(logged_step - 1), want, 2e-5 * want) << "step " << logged_step;
    last = logged_step;
    ++rows;
  }
  EXPECT_GE(rows, c.TotalSteps() / 10);  // logged every 10 steps
  EXPECT_EQ(last, c.TotalSteps());
}

TEST(TasksTest, DeterministicAndWellFormed) {
  for (TaskKind kind : {TaskKind::kPasskey, TaskKind::kMultiNeedle, TaskKind::kRecall}) {
    for (double depth : {0.0, 0.5, 1.0}) {
      TaskSpec spec;
      spec.kind = kind;
      spec.length = 1024;
      spec.depth = depth;
      spec.seed = 11;
      TaskSample a, b;
      ASSERT_TRUE(MakeTask(spec, &a).ok());
      ASSERT_TRUE(MakeTask(spec, &b).ok());
      EXPECT_EQ(a.prompt, b.prompt);
      EXPECT_EQ(a.prompt.size() + a.answer.size(), 1024u) << TaskKindName(kind);
      EXPECT_FALSE(a.answer.empty());
      // The answer is recoverable from the prompt only through the needle.
      EXPECT_NE(a.prompt.find(a.answer), std::string::npos);
      if (kind == TaskKind::kPasskey) {
        EXPECT_NEAR(a.depth, depth, 0.05);
        // Digits appear only in the needle (twice) and nowhere in the filler.
        size_t digits = 0;
        for (char ch : a.prompt) digits += (ch >= '0' && ch <= '9');
        EXPECT_EQ(digits, 2 * a.answer.size());
      }
      EXPECT_EQ(ScoreExact(a, a.answer + "xyz"), 1.0);
      EXPECT_EQ(ScoreExact(a, "x" + a.answer), 0.0);
      EXPECT_EQ(ScoreExact(a, a.answer.substr(0, a.answer.size() - 1)), 0.0);
      spec.seed = 12;
      ASSERT_TRUE(MakeTask(spec, &b).ok());
      EXPECT_NE(a.prompt + a.answer, b.prompt + b.answer);
    }
  }
  TaskSpec copy;
  copy.kind = TaskKind::kCopy;
  copy.length = 200;
  TaskSample c;
  ASSERT_TRUE(MakeTask(copy, &c).ok());
  ASSERT_EQ(c.target_mask.size(), c.prompt.size());
  // The masked characters are exactly the repeats, each equal to the first copy.
  const size_t open = c.prompt.find('['), close = c.prompt.find(']');
  const std::string s = c.prompt.substr(open + 1, close - open - 1);
  size_t masked = 0;
  for (uint8_t m : c.target_mask) masked += m;
  size_t copies = 0;
  for (size_t p = c.prompt.find("[" + s + "]"); p != std::string::npos; p = c.prompt.find("[" + s + "]", p + 1)) ++copies;
  ASSERT_GE(copies, 2u);
  EXPECT_EQ(masked, (copies - 1) * (s.size() + 1));
  TaskSpec tiny;
  tiny.length = 20;
  EXPECT_FALSE(MakeTask(tiny, &c).ok());
}

}  // namespace
}  // namespace kvlab
