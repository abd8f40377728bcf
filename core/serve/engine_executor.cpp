#include "core/serve/engine_executor.h"

#include "core/serve/serve_bench.h"

namespace kvlab {
namespace {

class EngineExecutor : public StepExecutor {
 public:
  EngineExecutor(std::unique_ptr<Engine> engine, const ServeCachePlan& plan)
      : engine_(std::move(engine)), plan_(plan) {}

  const char* Name() const override { return "engine"; }
  const KVCache& cache() const override { return engine_->cache(); }
  int64_t MaxSequenceTokens() const override { return plan_.MaxSequenceTokens(); }
  Status AddSequence(int64_t seq) override { return engine_->AddSequence(seq); }
  Status RemoveSequence(int64_t seq) override { return engine_->RemoveSequence(seq); }
  Status AddSequenceWithPrefix(int64_t seq, const std::vector<BlockHash>& prefix) override {
    return engine_->AddSequenceWithPrefix(seq, prefix);
  }
  void CacheFullUnits(int64_t seq, const std::vector<BlockHash>& hashes) override {
    engine_->CacheFullUnits(seq, hashes);
  }

  Status Step(const std::vector<SeqChunk>& chunks, std::vector<int32_t>* next_tokens) override {
    // Engine::Forward reserves the step's slots before it takes staging
    // blocks for offloaded KV; check both here so that a step that cannot
    // get them changes nothing.
    const KVCache& c = engine_->cache();
    if (c.offload_enabled()) {
      std::vector<int64_t> seqs;
      int64_t need = 0, staging_plain = 0, staging_enc = 0;
      for (const SeqChunk& ch : chunks) {
        seqs.push_back(ch.seq);
        need += c.BlocksNeeded(ch.seq, static_cast<int64_t>(ch.tokens.size()));
      }
      c.StagingBlocksNeeded(seqs, &staging_plain, &staging_enc);
      if (need + staging_plain > c.AvailableBlocks() || staging_enc > c.AvailableEncodedBlocks()) {
        return Status::ResourceExhausted("KV pools cannot supply the step's " + std::to_string(need) + " new and " +
                                         std::to_string(staging_plain + staging_enc) + " staging blocks");
      }
    }
    KVLAB_RETURN_IF_ERROR(engine_->Forward(chunks, /*all_logits=*/false, &logits_));
    const int64_t vocab = engine_->model_config().vocab_size;
    next_tokens->clear();
    for (const std::vector<float>& l : logits_) next_tokens->push_back(Argmax(l.data(), vocab));
    return Status::OK();
  }

 private:
  std::unique_ptr<Engine> engine_;
  ServeCachePlan plan_;
  std::vector<std::vector<float>> logits_;
};

}  // namespace

Status NewEngineExecutor(const EngineOptions& options, const ModelConfig& model, const std::vector<PolicySpec>& policies,
                         const ServePoolSpec& pool, std::unique_ptr<StepExecutor>* out) {
  PolicyStack stack;
  KVLAB_RETURN_IF_ERROR(PolicyStack::Create(policies, &stack));
  ServeCachePlan plan;
  KVLAB_RETURN_IF_ERROR(PlanServeCache(model, stack, options.block_size, options.kv_dtype, pool, &plan));
  // Placement (offload): the scheduler books each step's staging blocks
  // (Scheduler::CanAppend) and Step checks them before Engine::Forward.
  EngineOptions eo = options;
  eo.num_blocks = plan.num_blocks;
  eo.prefix_caching = plan.prefix_caching;
  // Engine::Create sizes the encoded pool as max_seqs x streams x
  // ceil(max_context / tokens_per_block): one "sequence" of the planned size.
  eo.max_seqs = 1;
  eo.max_context = plan.shape.encoded
                       ? plan.num_encoded_blocks / plan.shape.StreamsPerSequence() * plan.shape.enc.tokens_per_block
                       : 1;
  std::unique_ptr<Engine> engine;
  KVLAB_RETURN_IF_ERROR(Engine::Create(eo, policies, &engine));
  const KVCache& c = engine->cache();
  const int64_t enc_blocks = c.encoded_pool() ? c.encoded_pool()->num_blocks() : 0;
  if (c.pool().num_blocks() != plan.num_blocks || enc_blocks != plan.num_encoded_blocks ||
      c.shape().BlockBytes() != plan.shape.BlockBytes()) {
    return Status::Internal("engine executor: the engine built pools of " + std::to_string(c.pool().num_blocks()) + " + " +
                            std::to_string(enc_blocks) + " blocks, the serving plan wanted " +
                            std::to_string(plan.num_blocks) + " + " + std::to_string(plan.num_encoded_blocks));
  }
  out->reset(new EngineExecutor(std::move(engine), plan));
  return Status::OK();
}

// serve-bench's entry points live here, beside the engine they may create,
// so that the rest of serve-bench stays in the torch-free kvlab_base.
Status NewServeExecutor(const ServeBenchConfig& config, std::unique_ptr<StepExecutor>* out) {
  if (config.model_free) return NewModelFreeServeExecutor(config, out);
  ModelConfig mc;
  KVLAB_RETURN_IF_ERROR(ResolveServeModel(config.engine.model, &mc));
  ServePoolSpec pool;
  KVLAB_RETURN_IF_ERROR(ServePoolFor(config, mc, &pool));
  return NewEngineExecutor(config.engine, mc, config.policies, pool, out);
}

Status RunServeBench(const std::string& toml_path, const ServeBenchOverrides& overrides, std::string* report) {
  ServeBenchConfig config;
  KVLAB_RETURN_IF_ERROR(LoadServeBenchConfig(toml_path, &config, overrides.sets));
  if (overrides.threads >= 0) config.engine.num_threads = overrides.threads;
  std::unique_ptr<StepExecutor> executor;
  KVLAB_RETURN_IF_ERROR(NewServeExecutor(config, &executor));
  ServeBenchResult result;
  KVLAB_RETURN_IF_ERROR(RunServeBenchWith(config, executor.get(), overrides, &result));
  *report = FormatServeBenchReport(config, result);
  if (!overrides.csv_path.empty()) *report += "  csv         " + overrides.csv_path + " (pool occupancy per step)\n";
  return Status::OK();
}

}  // namespace kvlab
