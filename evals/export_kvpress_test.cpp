// `kvlab export --format kvpress` (evals/export_kvpress.h): the policy ->
// press mapping and the ratio conversion; the CSV writer on texts with commas,
// quotes and newlines; the layout written for the committed fixture
// evals/fixtures/export/results.jsonl (hand-made records of every task family:
// RULER under six stacks, LongBench, LongBench-E, LongBench v2, InfiniteBench,
// a passkey record made before predictions were kept, bpb, latency, a failed
// point); a tiny real sweep exported, its metrics.json equal to its records;
// and the errors (an unknown format, a directory without results, a field of
// the wrong type).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "evals/export_kvpress.h"
#include "evals/sweep.h"
#include "evals/tasks/sample_text.h"
#include "evals/sweep_test_util.h"

namespace kvlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using sweep_test::Source;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

KvpressPress Map(const std::string& policy, const std::string& label = "") {
  KvpressPress p;
  const Status s = MapStackToKvpress(policy, label, &p);
  EXPECT_TRUE(s.ok()) << policy << ": " << s.ToString();
  return p;
}

TEST(ExportKvpressTest, StacksMapToPressesAndRatios) {
  KvpressPress p = Map("full");
  EXPECT_EQ(p.press_name, "no_press");
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(p, 1000, NAN), 0.0);

  p = Map("snapkv(budget=0,every=256,kernel=7,pooling=max,ratio=0.25,window=32)");
  EXPECT_EQ(p.press_name, "snapkv");
  EXPECT_TRUE(p.mapped);
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(p, 1000, NAN), 0.75);
  EXPECT_EQ(p.press_init, "SnapKVPress(compression_ratio={R}, window_size=32, kernel_size=7)");

  // A token budget is converted with the sample's context: 1 - 256 / 1024.
  p = Map("h2o(budget=256,heavy_fraction=0.5,ratio=0.2)");
  EXPECT_EQ(p.press_name, "observed_attention");
  EXPECT_EQ(p.ratio_kind, KvpressRatioKind::kTokens);
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(p, 1024, NAN), 0.75);
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(p, 128, NAN), 0.0);  // a budget above the context keeps everything
  EXPECT_NE(p.note.find("ObservedAttentionPress scores each key once"), std::string::npos) << p.note;

  p = Map("sink(n_sink=4,positions=cache,window=252)");
  EXPECT_EQ(p.press_name, "streaming_llm");
  EXPECT_EQ(p.keep_tokens, 256);
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(p, 1024, NAN), 0.75);

  EXPECT_EQ(Map("tova(budget=0,heads=mean,ratio=0.125)").press_name, "tova");
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(Map("tova(budget=0,heads=mean,ratio=0.125)"), 1, NAN), 0.875);
  EXPECT_EQ(Map("key-norm(budget=0,ratio=0.5,recent=1)").press_name, "knorm");
  EXPECT_EQ(Map("keydiff(budget=0,ratio=0.5)").press_init, "KeyDiffPress(compression_ratio={R})");
  EXPECT_EQ(Map("lagkv(budget=0,lag_size=64,n_sink=4,ratio=0.5)").press_init,
            "LagKVPress(compression_ratio={R}, n_sink=4, lag_size=64)");
  EXPECT_EQ(Map("cur(budget=0,leverage=kv_avg,local_window=16,num_sinks=4,ratio=0.5)").press_init,
            "CURPress(compression_ratio={R}, num_sinks=4, leverage_type=\"kv_avg\", use_local_approximation=True, "
            "local_window_size=16)");
  EXPECT_EQ(Map("cur(budget=0,leverage=key,local_window=0,num_sinks=2,ratio=0.5)").press_init,
            "CURPress(compression_ratio={R}, num_sinks=2, leverage_type=\"key\", use_local_approximation=False)");
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(Map("keydiff(budget=0,ratio=0.25)"), 1, NAN), 0.75);
  EXPECT_EQ(Map("chunkkv(budget=0,chunk_length=20,ratio=0.5,score=lagkv)").press_init,
            "ChunkKVPress(press=LagKVPress(compression_ratio={R}), chunk_length=20)");
  EXPECT_EQ(Map("pyramidkv(beta=20,budget=0,every=256,kernel=7,pooling=max,ratio=0.5,window=32)").press_name,
            "pyramidkv");
  EXPECT_EQ(Map("adakv(alpha=0.2,beta=20,budget=0,every=256,kernel=7,layers=uniform,pooling=max,ratio=0.5,window=32)")
                .press_name,
            "adakv_snapkv");
  EXPECT_EQ(Map("random(budget=0,ratio=0.2,seed=0)").press_name, "random");

  // duo: '+' inside its streaming list does not split the stack; the head ratio is 1 - fraction.
  p = Map("duo(fraction=0.25,heads=,recent=252,sinks=4,streaming=0.0+0.1+1.1)");
  EXPECT_EQ(p.press_name, "duo_attention");
  EXPECT_DOUBLE_EQ(p.head_compression_ratio, 0.75);

  // No press: kvlab's own name, the ratio from the bytes kept.
  p = Map("kivi(attention=exact,bits=2,group=32,key_axis=channel,residual=128,value_axis=token)", "kivi(bits=2)");
  EXPECT_EQ(p.press_name, "kvlab_kivi_bits_2");
  EXPECT_FALSE(p.mapped);
  EXPECT_DOUBLE_EQ(KvpressCompressionRatio(p, 1000, 0.25), 0.75);
  EXPECT_NE(p.note.find("QuantizedCache"), std::string::npos) << p.note;
  p = Map("sink(n_sink=4,positions=cache,window=60)+kivi(attention=exact,bits=4,group=32,key_axis=channel,residual=128,"
          "value_axis=token)",
          "sink(window=60)+kivi(bits=4)");
  EXPECT_EQ(p.press_name, "kvlab_sink_window_60_kivi_bits_4");
  EXPECT_NE(p.note.find("sink alone would be streaming_llm"), std::string::npos) << p.note;
  EXPECT_FALSE(Map("adakv(layers=pyramid,ratio=0.5)", "adakv(layers=pyramid)").mapped);
  EXPECT_FALSE(Map("offload(device_budget=131072)", "offload").mapped);

  KvpressPress bad;
  const Status s = MapStackToKvpress("snapkv(ratio=0.5", "", &bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("field 'policy' is \"snapkv(ratio=0.5\""), std::string::npos) << s.message();
}

TEST(ExportKvpressTest, CsvQuotesAsPythonsCsvModule) {
  EXPECT_EQ(CsvRow({"plain", "", "a b"}), "plain,,a b\n");
  EXPECT_EQ(CsvRow({"a,b", "say \"hi\"", "two\nlines", "cr\rx"}),
            "\"a,b\",\"say \"\"hi\"\"\",\"two\nlines\",\"cr\rx\"\n");
}

// The texts a record keeps: valid UTF-8 with newlines, cut at a character, bounded per record.
TEST(ExportKvpressTest, SampleTextsAreBounded) {
  EXPECT_EQ(KeptText("a\nb\xff\xc3\xa9", 100), "a\nb\xEF\xBF\xBD\xC3\xA9");  // a stray byte becomes U+FFFD
  EXPECT_EQ(KeptText("ab\xc3\xa9", 3), "ab");                                  // never half a character
  EXPECT_EQ(KeptText("\xed\xa0\x80", 10), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is not UTF-8
  SampleTextLog log;
  const std::string big(kMaxPredictionBytes + 10, 'x');
  const std::vector<std::string> many(40, std::string(300, 'y'));
  log.Add(big, "q", many, {{"answer_prefix", " is"}});
  const std::string huge(kMaxPredictionBytes, 'z');
  const size_t per_sample = kMaxPredictionBytes + kMaxQuestionBytes + kMaxAnswersBytes;
  const size_t fill = kMaxSampleTextBytes / per_sample + 1;  // enough samples to pass the record's budget
  for (size_t i = 0; i < fill; ++i) {
    log.Add(huge, std::string(kMaxQuestionBytes, 'q'), {std::string(kMaxAnswersBytes, 'a')}, {{"answer_prefix", ""}});
  }
  log.Add("late", "q", {"a"}, {{"answer_prefix", ""}});
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  log.Put(&m);
  ASSERT_EQ(m["predictions"].size(), fill + 2);
  EXPECT_EQ(m["predictions"][0].get<std::string>().size(), kMaxPredictionBytes);
  // 13 whole answers of 300 bytes, a 14th cut to the 100 bytes left of 4,000.
  ASSERT_EQ(m["sample_text"]["answers"][0].size(), 14u);
  EXPECT_EQ(m["sample_text"]["answers"][0][13].get<std::string>().size(), 100u);
  EXPECT_EQ(m["sample_text"]["answer_prefix"][0], " is");
  EXPECT_EQ(m["predictions"][fill + 1], "");  // past the budget: kept empty, counted
  EXPECT_EQ(m["sample_text"]["answers"][fill + 1].size(), 0u);
  EXPECT_GE(m["sample_text_dropped"].get<int64_t>(), 1);
  EXPECT_LT(m.dump().size(), kMaxSampleTextBytes + 2 * per_sample);
}

// The fixture's layout, file by file.
TEST(ExportKvpressTest, FixtureLayout) {
  const std::string out = sweep_test::TempDir("export_kvpress_test", "fixture");
  ExportOptions o;
  o.out_dir = out;
  std::string report;
  ASSERT_TRUE(ExportResults(Source() + "/evals/fixtures/export", o, &report).ok()) << report;
  EXPECT_NE(report.find("12 run(s) from 15 point(s) (1 failed point(s) not exported)"), std::string::npos) << report;
  EXPECT_NE(report.find("kvlab_passkey__1024__tiny-gqa__no_press__0.00__query_aware: 3 sample(s) without a recorded "
                        "prediction"), std::string::npos) << report;
  EXPECT_NE(report.find("not exported (no quality metric to compare): latency"), std::string::npos) << report;
  for (const char* d : {"ruler__1024__tiny-gqa__no_press__0.00__query_aware", "ruler__1024__tiny-gqa__snapkv__0.75__query_aware",
                        "ruler__1024__tiny-gqa__observed_attention__0.74__query_aware",
                        "ruler__1024__tiny-gqa__kvlab_kivi_bits_2__0.75__query_aware",
                        "ruler__1024__tiny-gqa__streaming_llm__0.73",  // query-agnostic: 1 - 256 / (1000 - 40)
                        "ruler__1024__tiny-gqa__duo_attention__0.75__query_aware",
                        "longbench__hotpotqa__tiny-gqa__no_press__0.00__max_context1024__query_aware",
                        "longbench-e__trec_e__tiny-gqa__no_press__0.00__max_context1024__query_aware",
                        "longbench-v2__0shot__tiny-gqa__no_press__0.00__max_context1024__query_aware",
                        "infinitebench__passkey__tiny-gqa__no_press__0.00__max_context1024__query_aware",
                        "kvlab_passkey__1024__tiny-gqa__no_press__0.00__query_aware"}) {
    for (const char* f : {"predictions.csv", "metrics.json", "config.yaml", "kvlab.json"}) {
      EXPECT_TRUE(fs::is_regular_file(out + "/" + d + "/" + f)) << d << "/" << f;
    }
  }
  EXPECT_FALSE(fs::exists(out + "/kvlab_bpb__1024__tiny-gqa__no_press__0.00/predictions.csv"));  // teacher-forced
  EXPECT_EQ(json::parse(Slurp(out + "/kvlab_bpb__1024__tiny-gqa__no_press__0.00/metrics.json")),
            json::parse(R"({"bpb": 1.84, "kl": 0.0, "top1_agreement": 1.0})"));

  // RULER: one run holds every task at the length; string_match is the record's score.
  const std::string full = out + "/ruler__1024__tiny-gqa__no_press__0.00__query_aware";
  EXPECT_EQ(json::parse(Slurp(full + "/metrics.json")),
            json::parse(R"({"niah_single_1": {"string_match": 50.0}, "vt": {"string_match": 60.0}})"));
  EXPECT_EQ(Slurp(full + "/predictions.csv"),
            "question,answer_prefix,answer,task,max_new_tokens,predicted_answer,compression_ratio,kvlab_score\n"
            "\"\nWhat is the special magic number for lively-cat mentioned in the provided text?\", The special magic "
            "number for lively-cat mentioned in the provided text is,\"[\"\"1234567\"\"]\",niah_single_1,128, 1234567.,"
            "0.0,1.0\n"
            "\"\nWhat is the special magic number for brave-owl mentioned in the provided text?\", The special magic "
            "number for brave-owl mentioned in the provided text is,\"[\"\"7654321\"\"]\",niah_single_1,128,\"I do not "
            "know, \"\"really\"\"\nno\",0.0,0.0\n"
            "Question: Find all variables that are assigned the value 12345 in the text above.,\" Answer: According to "
            "the chain(s) of variable assignment in the text above, 5 variables are assigned the value 12345, they "
            "are: \",\"[\"\"XKQZB\"\",\"\"ABCDE\"\",\"\"FGHIJ\"\",\"\"KLMNO\"\",\"\"PQRST\"\"]\",vt,30,\" XKQZB, ABCDE, "
            "FGHIJ\",0.0,0.6\n");
  const std::string yaml = Slurp(full + "/config.yaml");
  EXPECT_EQ(yaml.substr(0, yaml.find("output_dir")),
            "dataset: \"ruler\"\ndata_dir: \"1024\"\nmodel: \"tiny-gqa\"\ndevice: null\npress_name: \"no_press\"\n"
            "compression_ratio: 0.0\nkey_channel_compression_ratio: null\nfraction: 1.0\nmax_new_tokens: null\n"
            "max_context_length: null\nquery_aware: true\nneedle_depth: null\ncompression_interval: null\n"
            "target_size: null\nhidden_states_buffer_size: null\n");
  EXPECT_NE(yaml.find("press_init_command: \"None\"\nseed: 0\nfp8: false\n"), std::string::npos) << yaml;

  const std::string snap = out + "/ruler__1024__tiny-gqa__snapkv__0.75__query_aware";
  EXPECT_EQ(json::parse(Slurp(snap + "/metrics.json")),
            json::parse(R"({"niah_single_1": {"string_match": 50.0}, "vt": {"string_match": 40.0}})"));
  EXPECT_NE(Slurp(snap + "/config.yaml")
                .find("press_init_command: \"SnapKVPress(compression_ratio=0.75, window_size=32, kernel_size=7)\""),
            std::string::npos);
  const json kv = json::parse(Slurp(snap + "/kvlab.json"));
  EXPECT_EQ(kv["kvlab_stack"], "snapkv(ratio=0.25)");
  EXPECT_EQ(kv["intervals_95"]["niah_single_1"]["value"]["n"], 2);
  EXPECT_EQ(kv["intervals_95"]["niah_single_1"]["difference_from_full"]["estimate"], 0.0);  // [0, 1] - [1, 0]

  // duo: head_compression_ratio replaces compression_ratio, as save_config does.
  const std::string duo = Slurp(out + "/ruler__1024__tiny-gqa__duo_attention__0.75__query_aware/config.yaml");
  EXPECT_NE(duo.find("head_compression_ratio: 0.75\n"), std::string::npos) << duo;
  EXPECT_EQ(duo.find("\ncompression_ratio:"), std::string::npos) << duo;

  // LongBench: a bare number (%), the texts quoted, answers a JSON list.
  const std::string lb = out + "/longbench__hotpotqa__tiny-gqa__no_press__0.00__max_context1024__query_aware";
  EXPECT_EQ(Slurp(lb + "/metrics.json"), "75.0\n");
  EXPECT_EQ(Slurp(lb + "/predictions.csv"),
            "question,answer_prefix,answers,all_classes,length,task,max_new_tokens,predicted_answer,compression_ratio,"
            "kvlab_score\n"
            "\"Question: Where is the Louvre?\nAnswer:\",,\"[\"\"Paris\"\"]\",,,hotpotqa,32,\"Paris, France\",0.0,0.5\n"
            "\"Question: What did he say?\nAnswer:\",,\"[\"\"yes\"\",\"\"\\\"\"yes\\\"\"\"\"]\",,,hotpotqa,32,\"He said "
            "\"\"yes\"\"\r\nthen left\",0.0,1.0\n");
  EXPECT_NE(Slurp(lb + "/config.yaml").find("max_context_length: 1024\n"), std::string::npos);
  // LongBench-E: per length bucket; all_classes on every row.
  const std::string lbe = out + "/longbench-e__trec_e__tiny-gqa__no_press__0.00__max_context1024__query_aware";
  EXPECT_EQ(json::parse(Slurp(lbe + "/metrics.json")), json::parse(R"({"0-4k": 100.0, "8k+": 0.0})"));
  EXPECT_NE(Slurp(lbe + "/predictions.csv").find(",\"[\"\"Abbreviation\"\",\"\"Entity\"\"]\",3000,trec,64,"),
            std::string::npos);
  // LongBench v2: fractions, by difficulty and length; InfiniteBench: the mean, a fraction.
  EXPECT_EQ(json::parse(Slurp(out + "/longbench-v2__0shot__tiny-gqa__no_press__0.00__max_context1024__query_aware/"
                                    "metrics.json")),
            json::parse(R"({"average": 0.5, "easy": 1.0, "hard": 0.0, "long": 0.0, "short": 1.0})"));
  EXPECT_EQ(Slurp(out + "/infinitebench__passkey__tiny-gqa__no_press__0.00__max_context1024__query_aware/metrics.json"),
            "1.0\n");
  // A record made before predictions were kept: rows without predicted_answer, metrics from the record.
  const std::string pk = out + "/kvlab_passkey__1024__tiny-gqa__no_press__0.00__query_aware";
  EXPECT_EQ(json::parse(Slurp(pk + "/metrics.json"))["char_accuracy"], 0.8);
  EXPECT_NE(Slurp(pk + "/predictions.csv").find("\n,,,passkey,,,0.0,0.0\n"), std::string::npos) << Slurp(pk + "/predictions.csv");
  fs::remove_all(out);
}

// A real sweep on the random `small` preset: metrics.json equals the records.
TEST(ExportKvpressTest, SweepExportMatchesItsRecords) {
  const std::string dir = sweep_test::TempDir("export_kvpress_test", "sweep");
  const SweepConfig c = sweep_test::Parse(
      dir, "models = [\"small\"]\ntasks = [\"niah_single_1\", \"passkey\"]\nlengths = [640]\nthreads = 1\n"
           "[task.niah_single_1]\nsamples = 2\ntokens_to_generate = 8\n[task.passkey]\ndepths = [0.5]\nsamples = 1\n"
           "[[point]]\n[[point.policy]]\nname = \"h2o\"\nratio = 0.5\n");
  std::string report;
  ASSERT_TRUE(RunSweep(c, sweep_test::Quiet(dir + "/out"), &report).ok()) << report;
  ExportOptions o;
  ASSERT_TRUE(ExportResults(dir + "/out", o, &report).ok()) << report;
  EXPECT_EQ(report.find("without predictions"), std::string::npos) << report;
  for (const json& r : sweep_test::Records(dir + "/out")) {
    ASSERT_EQ(r["status"], "ok") << r.dump();
    const json& m = r["metrics"];
    const bool base = r["baseline"].get<bool>();
    const std::string press = base ? "no_press__0.00" : "observed_attention__0.50";
    const bool ruler = r["task"] == "niah_single_1";
    const std::string run = dir + "/out/kvpress/" + (ruler ? "ruler" : "kvlab_passkey") + "__640__small__" + press +
                            "__query_aware";
    const json metrics = json::parse(Slurp(run + "/metrics.json"));
    if (ruler) {
      char want[32];
      std::snprintf(want, sizeof(want), "%.2f", m["score"].get<double>());
      EXPECT_DOUBLE_EQ(metrics["niah_single_1"]["string_match"].get<double>(), std::strtod(want, nullptr));
    } else {
      EXPECT_EQ(metrics["accuracy"], m["accuracy"]);
      EXPECT_EQ(metrics["char_accuracy"], m["char_accuracy"]);
    }
    ASSERT_EQ(m["predictions"].size(), m["per_sample"]["accuracy"].size());
    const std::string csv = Slurp(run + "/predictions.csv");
    for (const json& p : m["predictions"]) {
      const std::string cell = CsvRow({p.get<std::string>()});
      EXPECT_NE(csv.find("," + cell.substr(0, cell.size() - 1) + ","), std::string::npos) << p << "\n" << csv;
    }
    EXPECT_NE(Slurp(run + "/config.yaml").find(base ? "compression_ratio: 0.0\n" : "compression_ratio: 0.5\n"),
              std::string::npos);
  }
  fs::remove_all(dir);
}

TEST(ExportKvpressTest, BadInputIsOneClearError) {
  const std::string dir = sweep_test::TempDir("export_kvpress_test", "bad");
  std::string report;
  ExportOptions o;
  o.format = "lm-eval";
  Status s = ExportResults(Source() + "/evals/fixtures/export", o, &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown export format 'lm-eval' (known: kvpress)"), std::string::npos) << s.message();
  o.format = "kvpress";
  s = ExportResults(dir, o, &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir + ": no results.jsonl there"), std::string::npos) << s.message();
  // Only failed points.
  std::ifstream in(Source() + "/evals/fixtures/export/results.jsonl");
  std::string line, failed, ok;
  while (std::getline(in, line)) {
    const json r = json::parse(line);
    if (r["status"] == "error") failed = line;
    if (r["task"] == "longbench-hotpotqa") ok = line;
  }
  std::ofstream(dir + "/results.jsonl") << failed << "\n";
  s = ExportResults(dir, o, &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no ok record (1 failed point(s))"), std::string::npos) << s.message();
  // A prediction of the wrong type names the point and the field.
  json r = json::parse(ok);
  r["metrics"]["predictions"][1] = 7;
  std::ofstream(dir + "/results.jsonl") << r.dump() << "\n";
  s = ExportResults(dir, o, &report);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("field 'metrics.predictions' holds 7, expected an array of strings"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("results.jsonl: point {"), std::string::npos) << s.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvlab
