// serve-bench: config errors with file:line:column, and model-free runs
// (the engine run is in engine_executor_test.cpp).
#include "core/serve/serve_bench.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/base/temp_dir_test_util.h"

namespace kvlab {
namespace {

const char* kUsers = R"(
[workload]
seed = 1
[[workload.users]]
name = "chat"
count = 6
arrival_rate = 0.2
turns = {dist = "uniform", min = 1, max = 3}
user_tokens = {dist = "lognormal", median = 200, sigma = 0.8, min = 8, max = 1500}
output_tokens = {dist = "pareto", alpha = 1.5, scale = 20, max = 200}
think_steps = {dist = "exponential", mean = 10}
system_tokens = 16
)";

Status Parse(const std::string& text, ServeBenchConfig* cfg) { return ParseServeBenchConfig(text, "cfg.toml", cfg); }

std::string ErrorOf(const std::string& text) {
  ServeBenchConfig cfg;
  Status s = Parse(text, &cfg);
  EXPECT_FALSE(s.ok()) << text;
  return s.message();
}

TEST(ServeBenchConfigTest, ParsesAFullConfig) {
  ServeBenchConfig cfg;
  Status s = Parse(std::string("model = \"llama-3.1-8b\"\npool_gb = 2.5\nmax_num_seqs = 32\nmax_context = 4096\n"
                               "[[policy]]\nname = \"quant\"\nformat = \"int8\"\n") + kUsers, &cfg);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(cfg.model_free);
  EXPECT_EQ(cfg.engine.model, "llama-3.1-8b");
  EXPECT_EQ(cfg.pool.pool_bytes, 2'500'000'000);
  EXPECT_EQ(cfg.scheduler.max_num_seqs, 32);
  EXPECT_EQ(cfg.pool.max_num_seqs, 32);
  EXPECT_EQ(cfg.max_context, 4096);
  ASSERT_EQ(cfg.policies.size(), 1u);
  EXPECT_EQ(cfg.policies[0].params.at("format"), "int8");
  ASSERT_EQ(cfg.workload.classes.size(), 1u);
  const UserClass& uc = cfg.workload.classes[0];
  EXPECT_EQ(uc.name, "chat");
  EXPECT_EQ(uc.user_tokens.kind, Distribution::Kind::kLogNormal);
  EXPECT_EQ(uc.user_tokens.max, 1500);
  EXPECT_EQ(uc.output_tokens.kind, Distribution::Kind::kPareto);
  EXPECT_EQ(uc.system_tokens, 16);
}

TEST(ServeBenchConfigTest, UnknownKeysAndBadValuesNameFileLineColumn) {
  EXPECT_NE(ErrorOf(std::string("pool_gb = 1\npool_gbs = 2\n") + kUsers).find("cfg.toml:2:12: unknown key 'pool_gbs'"),
            std::string::npos);
  std::string e = ErrorOf(std::string("pool_gb = 1\n") + kUsers + "arival_rate = 3\n");
  EXPECT_NE(e.find("cfg.toml:14:15: unknown key 'arival_rate' in [[workload.users]]"), std::string::npos) << e;
  e = ErrorOf("pool_gb = 1\n[workload]\n[[workload.users]]\nuser_tokens = {dist = \"lognormal\", mean = 3}\n");
  EXPECT_NE(e.find("cfg.toml:4:43: unknown key 'mean' in lognormal 'user_tokens'; valid keys: dist, median, sigma, min, max"),
            std::string::npos) << e;
  e = ErrorOf("pool_gb = 1\n[workload]\n[[workload.users]]\nturns = {dist = \"zipf\"}\n");
  EXPECT_NE(e.find("cfg.toml:4:9: 'turns' needs dist = "), std::string::npos) << e;
  EXPECT_NE(e.find("got 'zipf'"), std::string::npos) << e;
  e = ErrorOf("pool_gb = 1\n[workload]\n[[workload.users]]\ncount = -2\n");
  EXPECT_NE(e.find("cfg.toml:4:9: 'count' must be >= 0"), std::string::npos) << e;
  e = ErrorOf(std::string("pool_gb = 1\nkv_dtype = \"fp8\"\n") + kUsers);
  EXPECT_NE(e.find("cfg.toml:2:12: 'kv_dtype' must be f32, f16 or bf16, got 'fp8' (8-bit storage is the quant policy"),
            std::string::npos) << e;
  EXPECT_NE(ErrorOf(std::string("pool_gb = 1\npool_blocks = 100\n") + kUsers).find("exactly one of pool_gb and pool_blocks"),
            std::string::npos);
  EXPECT_NE(ErrorOf("pool_gb = 1\n").find("missing [workload]"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string("pool_gb = 1\nmax_num_seqs = 4096\n") + kUsers).find("must not exceed max_num_batched_tokens"),
            std::string::npos);
  EXPECT_NE(ErrorOf("pool_gb = 1\n[workload\n").find("cfg.toml:2:"), std::string::npos);
  // A pool size whose bytes would not fit 64 bits (or is not a number) is refused, never rounded.
  for (const char* bad : {"inf", "nan", "1e300", "-1"}) {
    e = ErrorOf(std::string("pool_gb = ") + bad + "\n" + kUsers);
    EXPECT_NE(e.find("cfg.toml:1:11: 'pool_gb' must be a number of GB in (0, 1e9], got "), std::string::npos) << e;
  }
}

TEST(ServeBenchConfigTest, SetOverridesKeysBeforeTheyAreRead) {
  const std::string base = std::string("model = \"llama-3.1-8b\"\npool_gb = 0.5\nmax_num_seqs = 16\n") + kUsers;
  ServeBenchConfig cfg;
  Status s = ParseServeBenchConfig(base, "cfg.toml", &cfg, {"plain_pool_gb=0.25", "max_num_seqs=8", "workload.seed=7"});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(cfg.pool.plain_pool_bytes, 250'000'000);
  EXPECT_EQ(cfg.scheduler.max_num_seqs, 8);
  EXPECT_EQ(cfg.workload.seed, 7u);
  EXPECT_EQ(cfg.sets.size(), 3u);
  // A set key goes through the same checks as one in the file.
  s = ParseServeBenchConfig(base, "cfg.toml", &cfg, {"pool_gbs=2"});
  EXPECT_NE(s.message().find("unknown key 'pool_gbs'"), std::string::npos) << s.ToString();
  s = ParseServeBenchConfig(base, "cfg.toml", &cfg, {"pool_gb.x=2"});
  EXPECT_NE(s.message().find("--set pool_gb.x=2: 'pool_gb' is not a table"), std::string::npos) << s.ToString();
  s = ParseServeBenchConfig(base, "cfg.toml", &cfg, {"max_num_seqs"});
  EXPECT_NE(s.message().find("--set max_num_seqs: expected KEY=VALUE"), std::string::npos) << s.ToString();
}

// RunServeBench without the engine: the model-free executor.
Status RunModelFree(const std::string& path, const ServeBenchOverrides& ov, std::string* report) {
  ServeBenchConfig cfg;
  KVLAB_RETURN_IF_ERROR(LoadServeBenchConfig(path, &cfg));
  std::unique_ptr<StepExecutor> ex;
  KVLAB_RETURN_IF_ERROR(NewModelFreeServeExecutor(cfg, &ex));
  ServeBenchResult res;
  KVLAB_RETURN_IF_ERROR(RunServeBenchWith(cfg, ex.get(), ov, &res));
  *report = FormatServeBenchReport(cfg, res);
  return Status::OK();
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ProcessTempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ServeBenchRunTest, ModelFreeRunReportsAndWritesTheOccupancyCsv) {
  const std::string path = WriteTemp("serve_mf.toml", std::string("model = \"llama-3.1-8b\"\npool_gb = 0.5\nmax_num_seqs = 16\n"
                                                                  "max_num_batched_tokens = 512\n") + kUsers);
  ServeBenchOverrides ov;
  ov.csv_path = ProcessTempDir() + "/serve_mf.csv";
  ov.json_path = ProcessTempDir() + "/serve_mf.jsonl";
  std::remove(ov.json_path.c_str());
  std::string report;
  Status s = RunModelFree(path, ov, &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(report.find("executor    model-free, model llama-3.1-8b, policy full"), std::string::npos) << report;
  EXPECT_NE(report.find("131,072 B per token"), std::string::npos) << report;
  EXPECT_NE(report.find("TTFT        steps: median"), std::string::npos) << report;
  EXPECT_NE(report.find("0 rejected, 0 aborted, 0 unfinished"), std::string::npos) << report;
  const std::string csv = Slurp(ov.csv_path);
  EXPECT_EQ(csv.rfind("time,running,waiting,batched_tokens", 0), 0u);
  EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 50);
  const std::string json = Slurp(ov.json_path);
  EXPECT_NE(json.find("\"executor\":\"model-free\""), std::string::npos) << json;
  EXPECT_EQ(std::count(json.begin(), json.end(), '\n'), 1);
}

TEST(ServeBenchRunTest, RejectedConversationIsReportedWithItsReason) {
  const std::string path = WriteTemp("serve_reject.toml", R"(
model = "llama-3.1-70b"
pool_gb = 1.0
[workload]
[[workload.users]]
name = "too-long"
user_tokens = 5000
output_tokens = 10
)");
  std::string report;
  Status s = RunModelFree(path, ServeBenchOverrides(), &report);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(report.find("0 requests: 0 finished, 1 rejected"), std::string::npos) << report;
  EXPECT_NE(report.find("rejected: request 0 needs 5010 tokens"), std::string::npos) << report;
}

TEST(ServeBenchConfigTest, PrefixCachingKey) {
  ServeBenchConfig cfg;
  ASSERT_TRUE(Parse(std::string("pool_gb = 1\n") + kUsers, &cfg).ok());
  EXPECT_EQ(cfg.pool.prefix_caching, PrefixCachingMode::kDefault);
  ASSERT_TRUE(Parse(std::string("pool_gb = 1\nprefix_caching = false\n") + kUsers, &cfg).ok());
  EXPECT_EQ(cfg.pool.prefix_caching, PrefixCachingMode::kOff);
  ASSERT_TRUE(Parse(std::string("pool_gb = 1\nprefix_caching = true\n[[policy]]\nname = \"kivi\"\n") + kUsers, &cfg).ok());
  EXPECT_EQ(cfg.pool.prefix_caching, PrefixCachingMode::kOn);
  ASSERT_TRUE(Parse(std::string("pool_gb = 1\nprefix_caching = true\n[[policy]]\nname = \"h2o\"\n") + kUsers, &cfg).ok())
      << "selection stacks share by copy on write";
  std::string e = ErrorOf(std::string("pool_gb = 1\nprefix_caching = true\n[[policy]]\nname = \"offload\"\n") + kUsers);
  EXPECT_NE(e.find("cfg.toml:2:18: prefix_caching = true, but the stack 'offload("), std::string::npos) << e;
  EXPECT_NE(e.find("placement policy 'offload' moves blocks off the device"), std::string::npos) << e;
  e = ErrorOf(std::string("pool_gb = 1\nprefix_caching = 1\n") + kUsers);
  EXPECT_NE(e.find("cfg.toml:2:18: 'prefix_caching' must be true or false"), std::string::npos) << e;
}

// A shared system prompt and multi-turn chats: the same workload with
// prefix caching off and on (the default for full).
TEST(ServeBenchRunTest, PrefixCachingServesSharedPromptsFromTheCache) {
  const std::string common = R"(
model = "llama-3.1-8b"
pool_gb = 0.5
max_num_seqs = 16
max_num_batched_tokens = 512
[workload]
seed = 3
[[workload.users]]
name = "chat"
count = 12
arrival_rate = 0.2
turns = 3
user_tokens = {dist = "uniform", min = 16, max = 64}
output_tokens = {dist = "uniform", min = 8, max = 32}
think_steps = 5
system_tokens = 200
)";
  std::string off, on;
  ServeBenchOverrides ov;
  ov.json_path = ProcessTempDir() + "/serve_prefix.jsonl";
  std::remove(ov.json_path.c_str());
  ASSERT_TRUE(RunModelFree(WriteTemp("serve_off.toml", "prefix_caching = false\n" + common), ov, &off).ok());
  Status s = RunModelFree(WriteTemp("serve_on.toml", common), ov, &on);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_NE(off.find("prefix hits prefix caching off"), std::string::npos) << off;
  EXPECT_NE(on.find("prefix hits "), std::string::npos) << on;
  EXPECT_NE(on.find("units of 16 tokens"), std::string::npos) << on;
  EXPECT_NE(on.find("36 finished, 0 rejected, 0 aborted, 0 unfinished"), std::string::npos) << on;
  std::ifstream f(ov.json_path);
  std::string line_off, line_on;
  ASSERT_TRUE(std::getline(f, line_off) && std::getline(f, line_on));
  const auto j_off = nlohmann::json::parse(line_off), j_on = nlohmann::json::parse(line_on);
  EXPECT_EQ(j_off["prefix_caching"], false);
  EXPECT_EQ(j_off["prompt_cached_tokens"], 0);
  EXPECT_EQ(j_on["prefix_caching"], true);
  EXPECT_EQ(j_on["prompt_tokens"], j_off["prompt_tokens"]);
  // Every conversation after the first finds the 192 tokens of whole blocks of
  // the system prompt; later turns find their history too.
  EXPECT_GT(j_on["prompt_cached_tokens"].get<int64_t>(), 11 * 192);
  EXPECT_GT(j_on["prefix_hit_rate"].get<double>(), 0.5);
  EXPECT_LT(j_on["batched_tokens"].get<int64_t>(), j_off["batched_tokens"].get<int64_t>() / 2);
}

// The plain/encoded split of a byte budget for an encoding stack: sized for
// as many requests of request_tokens as the budget holds, each with its
// plain residual and tail and its encoded blocks.
TEST(ServePoolSplitTest, SizedForTheRequestLength) {
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  PolicyStack stack;
  ASSERT_TRUE(PolicyStack::Create({{"kivi", {}, "t"}}, &stack).ok());
  ServePoolSpec spec;
  spec.pool_bytes = 2'000'000'000;
  spec.max_num_seqs = 256;
  spec.max_num_batched_tokens = 512;
  ServeCachePlan half, sized;
  ASSERT_TRUE(PlanServeCache(mc, stack, 16, DType::kBF16, spec, &half).ok());
  EXPECT_EQ(half.PlainBytes(), spec.pool_bytes / 2 / half.shape.BlockBytes() * half.shape.BlockBytes())
      << "without a request length the plain pool is capped at half";
  EXPECT_EQ(half.split_requests, 0);
  spec.request_tokens = 600;
  ASSERT_TRUE(PlanServeCache(mc, stack, 16, DType::kBF16, spec, &sized).ok());
  const CacheShape& sh = sized.shape;
  const int64_t streams = sh.StreamsPerSequence(), bb = sh.BlockBytes(), ebb = sh.enc.BlockBytes();
  const int64_t tpb = sh.enc.tokens_per_block, res = sh.residual;
  const int64_t p = (res + tpb - 1 + 15) / 16 + 1, e = (600 - res) / tpb, batch = 512 / 16;
  const int64_t n = (spec.pool_bytes - streams * batch * bb) / (streams * (p * bb + e * ebb));
  ASSERT_GT(n, 1);
  ASSERT_LT(n, 256);
  EXPECT_EQ(sized.split_requests, n);
  EXPECT_EQ(sized.num_blocks, streams * (batch + n * p));
  // n requests of 600 tokens fit both pools, and the budget is used.
  EXPECT_GE(sized.num_encoded_blocks, n * e * streams);
  EXPECT_LE(sized.PlainBytes() + sized.EncodedBytes(), spec.pool_bytes);
  EXPECT_GT(sized.PlainBytes() + sized.EncodedBytes(), spec.pool_bytes - streams * ebb);
  // Half the budget in plain blocks holds fewer such requests: KIVI's
  // residual of 128 bf16 tokens outweighs its encoded blocks at 600 tokens.
  const int64_t fit_half = (half.num_blocks / streams - batch) / p;
  EXPECT_LT(std::min(fit_half, half.num_encoded_blocks / streams / e), n);
  // A budget larger than max_num_seqs requests need leaves the rest to the encoded pool.
  spec.max_num_seqs = 4;
  ASSERT_TRUE(PlanServeCache(mc, stack, 16, DType::kBF16, spec, &sized).ok());
  EXPECT_EQ(sized.split_requests, 4);
  EXPECT_EQ(sized.num_blocks, streams * (batch + 4 * p));
}

// serve-bench sizes the split from the workload's mean request length (460
// tokens here); on such short requests KIVI-2's 128-token bf16 residual
// outweighs its encoded blocks, and the sized split (three quarters plain)
// runs more requests at once than half the budget in plain blocks.
TEST(ServeBenchRunTest, KiviSplitFollowsTheWorkload) {
  const std::string common = R"(
model = "llama-3.1-8b"
pool_gb = 0.2
max_num_seqs = 64
max_num_batched_tokens = 256
[[policy]]
name = "kivi"
[workload]
seed = 4
[[workload.users]]
count = 40
arrival_rate = 1.0
user_tokens = {dist = "uniform", min = 200, max = 500}
output_tokens = {dist = "uniform", min = 50, max = 150}
)";
  ServeBenchOverrides ov;
  ov.json_path = ProcessTempDir() + "/serve_split.jsonl";
  std::remove(ov.json_path.c_str());
  std::string half, sized;
  ASSERT_TRUE(RunModelFree(WriteTemp("serve_half.toml", "plain_pool_gb = 0.1\n" + common), ov, &half).ok());
  Status s = RunModelFree(WriteTemp("serve_sized.toml", common), ov, &sized);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(half.find("split for requests of"), std::string::npos) << half;
  EXPECT_NE(sized.find("split for requests of"), std::string::npos) << sized;
  std::ifstream f(ov.json_path);
  std::string line_half, line_sized;
  ASSERT_TRUE(std::getline(f, line_half) && std::getline(f, line_sized));
  const auto jh = nlohmann::json::parse(line_half), js = nlohmann::json::parse(line_sized);
  EXPECT_EQ(jh["split_request_tokens"], 0);
  EXPECT_GT(js["split_request_tokens"].get<int64_t>(), 100);
  EXPECT_GT(js["plain_pool_bytes"].get<int64_t>(), jh["plain_pool_bytes"].get<int64_t>());
  EXPECT_EQ(js["finished"], jh["finished"]);
  EXPECT_LT(js["steps"].get<int64_t>(), jh["steps"].get<int64_t>());
  EXPECT_GT(js["mean_running"].get<double>(), jh["mean_running"].get<double>());
  EXPECT_GT(js["token_share_of_pool"].get<double>(), jh["token_share_of_pool"].get<double>());
  // The key overrides the workload's mean.
  ServeBenchConfig cfg;
  ASSERT_TRUE(Parse("split_request_tokens = 300\n" + common, &cfg).ok());
  EXPECT_EQ(cfg.pool.request_tokens, 300);
  ModelConfig mc;
  ASSERT_TRUE(PresetConfig("llama-3.1-8b", &mc).ok());
  ServePoolSpec pool;
  ASSERT_TRUE(ServePoolFor(cfg, mc, &pool).ok());
  EXPECT_EQ(pool.request_tokens, 300);
}

}  // namespace
}  // namespace kvlab
