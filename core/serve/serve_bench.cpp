#include "core/serve/serve_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/model/memory_calc.h"

namespace kvlab {
namespace {

struct Pending {
  double time;
  int64_t conversation;
  bool operator>(const Pending& o) const { return time != o.time ? time > o.time : conversation > o.conversation; }
};

struct RequestInfo {
  int64_t conversation;
  int user_class;
};

std::string Pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * v);
  return buf;
}

std::string Fmt(double v, int prec = 1) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", prec, v);
  return buf;
}

std::string FormatPercentiles(const Percentiles& p, int prec) {
  if (p.count == 0) return "n/a";
  return "median " + Fmt(p.median, prec) + ", p90 " + Fmt(p.p90, prec) + ", p99 " + Fmt(p.p99, prec) + " (n=" +
         std::to_string(p.count) + ")";
}

nlohmann::json PercentilesJson(const Percentiles& p) {
  return {{"count", p.count}, {"median", p.median}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}};
}

}  // namespace

Percentiles ComputePercentiles(std::vector<double>* v) {
  Percentiles p;
  p.count = static_cast<int64_t>(v->size());
  if (v->empty()) return p;
  std::sort(v->begin(), v->end());
  auto rank = [&](double q) {
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(v->size())));
    return (*v)[std::min(v->size() - 1, k == 0 ? 0 : k - 1)];
  };
  p.median = rank(0.5);
  p.p90 = rank(0.9);
  p.p99 = rank(0.99);
  double sum = 0;
  for (double x : *v) sum += x;
  p.mean = sum / static_cast<double>(v->size());
  return p;
}

Status ServePoolFor(const ServeBenchConfig& config, const ModelConfig& mc, ServePoolSpec* out) {
  *out = config.pool;
  if (out->request_tokens > 0 || out->pool_bytes <= 0 || out->plain_pool_bytes > 0) return Status::OK();
  PolicyStack stack;
  KVLAB_RETURN_IF_ERROR(PolicyStack::Create(config.policies, &stack));
  KvEncoding enc;
  int64_t residual = 0;
  if (!stack.SealedEncoding(static_cast<int>(mc.head_dim), config.engine.block_size, &enc, &residual)) return Status::OK();
  // The workload's requests are known before it runs: every answer is
  // max_new_tokens long, so each turn's prompt is the history so far.
  Workload workload;
  KVLAB_RETURN_IF_ERROR(GenerateWorkload(config.workload, mc.vocab_size, &workload));
  int64_t requests = 0, tokens = 0;
  std::vector<int32_t> prompt, answer;
  for (const Conversation& c : workload.conversations) {
    ChatSession s(&c, config.max_context);
    while (!s.done()) {
      int64_t max_new = 0;
      bool truncated = false;
      s.NextRequest(&prompt, &max_new, &truncated);
      tokens += static_cast<int64_t>(prompt.size()) + max_new;
      requests++;
      answer.assign(static_cast<size_t>(max_new), 0);
      s.OnAnswer(answer);
    }
  }
  if (requests > 0) out->request_tokens = std::max<int64_t>(1, tokens / requests);
  return Status::OK();
}

Status NewModelFreeServeExecutor(const ServeBenchConfig& config, std::unique_ptr<StepExecutor>* out) {
  if (!config.model_free) return Status::InvalidArgument(config.path + ": model_free = false needs the engine (NewServeExecutor)");
  ModelConfig mc;
  KVLAB_RETURN_IF_ERROR(ResolveServeModel(config.engine.model, &mc));
  ServePoolSpec pool;
  KVLAB_RETURN_IF_ERROR(ServePoolFor(config, mc, &pool));
  return NewModelFreeExecutor(mc, config.policies, config.engine.block_size, config.engine.kv_dtype, pool, out);
}

Status RunServeBenchWith(const ServeBenchConfig& config, StepExecutor* executor, const ServeBenchOverrides& overrides,
                         ServeBenchResult* out) {
  ServeBenchResult res;
  ModelConfig mc;
  KVLAB_RETURN_IF_ERROR(ResolveServeModel(config.engine.model, &mc));
  Workload workload;
  KVLAB_RETURN_IF_ERROR(GenerateWorkload(config.workload, mc.vocab_size, &workload));
  SchedulerOptions so = config.scheduler;
  so.max_model_len = mc.max_position_embeddings;
  if (config.max_context > 0) so.max_model_len = std::min(so.max_model_len, config.max_context);
  KVLAB_RETURN_IF_ERROR(so.Validate());
  Scheduler sched(so, executor);

  const KVCache& cache = executor->cache();
  const CacheShape& shape = cache.shape();
  const BlockPool* enc_pool = cache.encoded_pool();
  const double plain_slot_bytes = static_cast<double>(shape.BlockBytes()) / shape.block_size;
  const double enc_slot_bytes =
      enc_pool ? static_cast<double>(enc_pool->block_bytes()) / shape.enc.tokens_per_block : 0.0;
  const int64_t pool_bytes = cache.BytesReserved();
  res.executor = executor->Name();
  res.model = mc.name.empty() ? config.engine.model : mc.name;
  res.shape = shape;
  res.plain_pool_bytes = cache.pool().bytes_reserved();
  res.encoded_pool_bytes = enc_pool ? enc_pool->bytes_reserved() : 0;
  res.kv_bytes_per_token = 2LL * shape.num_layers * shape.num_kv_heads * shape.head_dim * DTypeBytes(shape.dtype);
  res.offload = cache.offload_enabled();
  if (enc_pool != nullptr) {
    ServePoolSpec pool;
    KVLAB_RETURN_IF_ERROR(ServePoolFor(config, mc, &pool));
    if (pool.plain_pool_bytes <= 0 && pool.pool_bytes > 0) res.split_request_tokens = pool.request_tokens;
  }
  res.prefix_caching = cache.prefix_caching();
  res.prefix_unit_tokens = cache.prefix_caching() ? cache.prefix_unit_tokens() : 0;
  {
    PolicyStack stack;
    KVLAB_RETURN_IF_ERROR(PolicyStack::Create(config.policies, &stack));
    res.policy = stack.Describe();
  }
  for (const UserClass& uc : config.workload.classes) res.classes.push_back({uc.name, 0, 0, 0, 0, 0, {}, {}});

  // Output files go where asked, their directories created.
  for (const std::string& p : {overrides.csv_path, overrides.json_path}) {
    const std::filesystem::path parent = std::filesystem::path(p).parent_path();
    std::error_code ec;
    if (!p.empty() && !parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return Status::IOError(parent.string() + ": cannot create directory: " + ec.message());
  }
  std::ofstream csv;
  if (!overrides.csv_path.empty()) {
    csv.open(overrides.csv_path);
    if (!csv) return Status::IOError(overrides.csv_path + ": cannot write the occupancy CSV");
    csv << "time,running,waiting,batched_tokens,prefill_tokens,preempted,bytes_in_use,pool_bytes,occupancy,"
           "token_bytes,largest_request,largest_request_tokens,largest_request_bytes,largest_request_share,wall_ms,"
           "cached_bytes,shared_bytes,prefix_hit_tokens,device_bytes,host_bytes,disk_bytes\n";
  }

  std::vector<ChatSession> sessions;
  sessions.reserve(workload.conversations.size());
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> pending;
  for (const Conversation& c : workload.conversations) {
    sessions.emplace_back(&c, config.max_context);
    pending.push({c.arrival, c.id});
  }
  res.conversations = static_cast<int64_t>(workload.conversations.size());
  std::unordered_map<int64_t, RequestInfo> info;
  std::vector<double> ttft_steps, tpot_steps, ttft_ms, tpot_ms;
  std::vector<std::vector<double>> class_ttft(res.classes.size()), class_tpot(res.classes.size());
  std::vector<double> wall_at = {0.0};  // wall ms inside steps before time t
  double wall = 0, sum_running = 0, sum_occupancy = 0, sum_token_bytes = 0, sum_used_bytes = 0, sum_cached = 0,
         sum_shared = 0, sum_device = 0, sum_host = 0, sum_disk = 0;
  const int64_t max_steps = overrides.max_steps > 0 ? overrides.max_steps : config.max_steps;
  int64_t t = 0, next_id = 0, stalls = 0;

  auto submit = [&](int64_t conv, double arrival) {
    ChatSession& s = sessions[static_cast<size_t>(conv)];
    RequestSpec spec;
    spec.id = next_id++;
    spec.arrival = arrival;
    bool truncated = false;
    s.NextRequest(&spec.prompt, &spec.max_new_tokens, &truncated);
    res.truncated_turns += truncated ? 1 : 0;
    const int cls = s.conversation().user_class;
    Status st = sched.AddRequest(std::move(spec));
    if (!st.ok()) {
      res.rejected++;
      if (res.reject_reasons.size() < 3) res.reject_reasons.push_back(st.message());
      return;  // the conversation ends here
    }
    res.requests++;
    res.classes[static_cast<size_t>(cls)].requests++;
    info[next_id - 1] = {conv, cls};
  };

  while (true) {
    while (!pending.empty() && pending.top().time <= static_cast<double>(t)) {
      const Pending p = pending.top();
      pending.pop();
      submit(p.conversation, p.time);
    }
    if (!sched.HasUnfinished()) {
      if (pending.empty()) break;
      t = std::max<int64_t>(t + 1, static_cast<int64_t>(std::ceil(pending.top().time)));  // idle until the next arrival
      wall_at.resize(static_cast<size_t>(t) + 1, wall);
      continue;
    }
    if (res.steps >= max_steps) {
      res.hit_max_steps = true;
      break;
    }
    StepOutcome step;
    const auto t0 = std::chrono::steady_clock::now();
    KVLAB_RETURN_IF_ERROR(sched.Step(static_cast<double>(t), &step));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!step.ran() && step.aborted.empty() && ++stalls > 1000) {
      return Status::Internal("serve-bench: the scheduler ran nothing for 1000 steps with requests waiting");
    }
    if (step.ran()) {
      stalls = 0;
      res.steps++;
      wall += ms;
      res.batched_tokens += step.num_batched_tokens;
      // Memory after the step, read from the pools and the streams.
      int64_t used_by_requests = 0, largest_id = -1, largest_bytes = 0, prefill_tokens = 0;
      double token_bytes = 0;
      const std::vector<int64_t> running = sched.RunningIds();
      for (int64_t id : running) {
        int64_t bytes = 0;
        for (int l = 0; l < shape.num_layers; ++l) {
          for (int h = 0; h < shape.num_kv_heads; ++h) {
            const Stream& s = cache.stream(id, l, h);
            bytes += static_cast<int64_t>(s.blocks.size()) * cache.pool().block_bytes();
            if (enc_pool) bytes += static_cast<int64_t>(s.enc_blocks.size()) * enc_pool->block_bytes();
            token_bytes += static_cast<double>(s.num_plain()) * plain_slot_bytes +
                           static_cast<double>(s.num_encoded) * enc_slot_bytes;
          }
        }
        used_by_requests += bytes;
        if (bytes > largest_bytes) largest_bytes = bytes, largest_id = id;
      }
      // Blocks shared by several requests count once; blocks only the prefix
      // cache holds are free for allocation and counted apart.
      const int64_t shared_extra = cache.SharedExtraBytes(), cached_only = cache.CachedOnlyBytes();
      const int64_t in_use = cache.BytesInUse() - cached_only;  // every tier
      // Offloading moves blocks to host memory and disk: the pool is the
      // device's, so occupancy is the device's share.
      const int64_t device = cache.DeviceBytesInUse() - cached_only, host = cache.HostBytesInUse(),
                    disk = cache.DiskBytesInUse();
      sum_device += static_cast<double>(device);
      sum_host += static_cast<double>(host);
      sum_disk += static_cast<double>(disk);
      res.peak_host_bytes = std::max(res.peak_host_bytes, host);
      res.peak_disk_bytes = std::max(res.peak_disk_bytes, disk);
      if (used_by_requests - shared_extra != in_use) {
        return Status::Internal("serve-bench: the pools hold " + std::to_string(in_use) + " B for requests (and " +
                                std::to_string(cached_only) + " B cached) but the running requests' streams hold " +
                                std::to_string(used_by_requests) + " B, " + std::to_string(shared_extra) +
                                " B of it shared");
      }
      token_bytes -= static_cast<double>(shared_extra);  // shared units are full blocks of real tokens
      sum_cached += static_cast<double>(cached_only);
      sum_shared += static_cast<double>(shared_extra);
      for (const StepOutcome::Chunk& c : step.chunks) prefill_tokens += c.prefill ? c.num_tokens : 0;
      sum_running += static_cast<double>(running.size());
      res.peak_running = std::max<int64_t>(res.peak_running, static_cast<int64_t>(running.size()));
      res.peak_bytes_in_use = std::max(res.peak_bytes_in_use, device);
      sum_occupancy += static_cast<double>(device) / static_cast<double>(pool_bytes);
      sum_token_bytes += token_bytes;
      sum_used_bytes += static_cast<double>(in_use);
      int64_t largest_tokens = 0;
      if (largest_id >= 0) {
        const Request* r = sched.Find(largest_id);
        largest_tokens = r->num_computed;
        if (largest_bytes > res.largest_request_bytes) {
          res.largest_request_bytes = largest_bytes;
          res.largest_request_tokens = largest_tokens;
          res.largest_request_class = res.classes[static_cast<size_t>(info[largest_id].user_class)].name;
        }
      }
      if (csv.is_open()) {
        csv << t << ',' << running.size() << ',' << sched.WaitingIds().size() << ',' << step.num_batched_tokens << ','
            << prefill_tokens << ',' << step.preempted.size() << ',' << in_use << ',' << pool_bytes << ','
            << Fmt(static_cast<double>(in_use) / static_cast<double>(pool_bytes), 5) << ','
            << std::llround(token_bytes) << ',' << largest_id << ',' << largest_tokens << ',' << largest_bytes << ','
            << Fmt(static_cast<double>(largest_bytes) / static_cast<double>(pool_bytes), 5) << ',' << Fmt(wall, 3)
            << ',' << cached_only << ',' << shared_extra << ',' << step.prefix_hit_tokens << ',' << device << ','
            << host << ',' << disk << '\n';
      }
    }
    ++t;
    wall_at.push_back(wall);
    for (Request& r : sched.TakeFinished()) {
      const RequestInfo ri = info[r.spec.id];
      info.erase(r.spec.id);
      ServeBenchResult::ClassStats& cs = res.classes[static_cast<size_t>(ri.user_class)];
      res.preemptions += r.num_preemptions;
      res.preempted_requests += r.num_preemptions > 0 ? 1 : 0;
      res.recomputed_tokens += r.recomputed_tokens;
      cs.preemptions += r.num_preemptions;
      cs.recomputed_tokens += r.recomputed_tokens;
      if (r.state == RequestState::kAborted) {
        res.aborted++;
        if (res.reject_reasons.size() < 3) res.reject_reasons.push_back(r.abort_reason);
        continue;
      }
      res.finished++;
      cs.finished++;
      res.prompt_cached_tokens += r.prompt_cached_tokens;
      res.readmission_cached_tokens += r.cached_tokens - r.prompt_cached_tokens;
      cs.max_tokens = std::max(cs.max_tokens, r.num_tokens());
      res.prompt_tokens += static_cast<int64_t>(r.spec.prompt.size());
      res.output_tokens += static_cast<int64_t>(r.output.size());
      const double ttft = r.first_token_time - r.spec.arrival;
      ttft_steps.push_back(ttft);
      class_ttft[static_cast<size_t>(ri.user_class)].push_back(ttft);
      const auto visible = static_cast<size_t>(std::ceil(r.spec.arrival));
      ttft_ms.push_back(wall_at[static_cast<size_t>(r.first_token_time)] - wall_at[visible]);
      if (r.output.size() > 1) {
        const double n = static_cast<double>(r.output.size() - 1);
        tpot_steps.push_back((r.finish_time - r.first_token_time) / n);
        class_tpot[static_cast<size_t>(ri.user_class)].push_back(tpot_steps.back());
        tpot_ms.push_back((wall_at[static_cast<size_t>(r.finish_time)] - wall_at[static_cast<size_t>(r.first_token_time)]) / n);
      }
      ChatSession& s = sessions[static_cast<size_t>(ri.conversation)];
      s.OnAnswer(r.output);
      if (!s.done()) pending.push({r.finish_time + s.conversation().turns[s.next_turn()].think_steps, ri.conversation});
    }
  }
  res.end_time = static_cast<double>(t);
  res.peak_plain_bytes = cache.pool().peak_bytes_in_use();
  res.peak_encoded_bytes = enc_pool ? enc_pool->peak_bytes_in_use() : 0;
  res.peak_device_bytes = cache.PeakDeviceBytesInUse();
  res.wall_ms = wall;
  res.unfinished = static_cast<int64_t>(sched.RunningIds().size() + sched.WaitingIds().size());
  // Preemptions of requests still in flight count too.
  for (int64_t id : sched.RunningIds()) {
    const Request* r = sched.Find(id);
    res.preemptions += r->num_preemptions;
    res.recomputed_tokens += r->recomputed_tokens;
  }
  for (int64_t id : sched.WaitingIds()) {
    const Request* r = sched.Find(id);
    res.preemptions += r->num_preemptions;
    res.recomputed_tokens += r->recomputed_tokens;
  }
  res.ttft_steps = ComputePercentiles(&ttft_steps);
  res.tpot_steps = ComputePercentiles(&tpot_steps);
  res.ttft_ms = ComputePercentiles(&ttft_ms);
  res.tpot_ms = ComputePercentiles(&tpot_ms);
  for (size_t c = 0; c < res.classes.size(); ++c) {
    res.classes[c].ttft_steps = ComputePercentiles(&class_ttft[c]);
    res.classes[c].tpot_steps = ComputePercentiles(&class_tpot[c]);
  }
  if (res.steps > 0) {
    res.mean_running = sum_running / static_cast<double>(res.steps);
    res.mean_occupancy = sum_occupancy / static_cast<double>(res.steps);
    res.token_share_of_pool = sum_token_bytes / (static_cast<double>(pool_bytes) * static_cast<double>(res.steps));
    res.mean_cached_only_bytes = sum_cached / static_cast<double>(res.steps);
    res.mean_shared_saved_bytes = sum_shared / static_cast<double>(res.steps);
    res.mean_device_bytes = sum_device / static_cast<double>(res.steps);
    res.mean_host_bytes = sum_host / static_cast<double>(res.steps);
    res.mean_disk_bytes = sum_disk / static_cast<double>(res.steps);
  }
  if (sum_used_bytes > 0) res.token_share_of_used = sum_token_bytes / sum_used_bytes;

  if (!overrides.json_path.empty()) {
    nlohmann::json j = {
        {"config", config.path}, {"sets", config.sets}, {"executor", res.executor}, {"model", res.model}, {"policy", res.policy},
        {"kv_dtype", DTypeName(res.shape.dtype)}, {"block_size", res.shape.block_size},
        {"encoding", res.shape.encoded ? res.shape.enc.Describe() : ""},
        {"plain_pool_bytes", res.plain_pool_bytes}, {"encoded_pool_bytes", res.encoded_pool_bytes},
        {"kv_bytes_per_token", res.kv_bytes_per_token}, {"max_context", config.max_context},
        {"steps", res.steps}, {"end_time", res.end_time}, {"hit_max_steps", res.hit_max_steps}, {"wall_ms", res.wall_ms},
        {"conversations", res.conversations}, {"requests", res.requests}, {"finished", res.finished},
        {"rejected", res.rejected}, {"aborted", res.aborted}, {"unfinished", res.unfinished},
        {"truncated_turns", res.truncated_turns}, {"prompt_tokens", res.prompt_tokens},
        {"output_tokens", res.output_tokens}, {"batched_tokens", res.batched_tokens},
        {"preemptions", res.preemptions}, {"preempted_requests", res.preempted_requests},
        {"recomputed_tokens", res.recomputed_tokens}, {"prefix_caching", res.prefix_caching},
        {"prompt_cached_tokens", res.prompt_cached_tokens}, {"prefix_hit_rate", res.prefix_hit_rate()},
        {"readmission_cached_tokens", res.readmission_cached_tokens},
        {"mean_cached_only_bytes", res.mean_cached_only_bytes},
        {"mean_shared_saved_bytes", res.mean_shared_saved_bytes}, {"ttft_steps", PercentilesJson(res.ttft_steps)},
        {"tpot_steps", PercentilesJson(res.tpot_steps)}, {"ttft_ms", PercentilesJson(res.ttft_ms)},
        {"tpot_ms", PercentilesJson(res.tpot_ms)}, {"mean_running", res.mean_running},
        {"peak_running", res.peak_running}, {"peak_bytes_in_use", res.peak_bytes_in_use},
        {"peak_plain_bytes", res.peak_plain_bytes}, {"peak_encoded_bytes", res.peak_encoded_bytes},
        {"mean_occupancy", res.mean_occupancy}, {"token_share_of_used", res.token_share_of_used},
        {"token_share_of_pool", res.token_share_of_pool}, {"largest_request_bytes", res.largest_request_bytes},
        {"largest_request_tokens", res.largest_request_tokens}, {"largest_request_class", res.largest_request_class},
        {"offload", res.offload}, {"peak_device_bytes", res.peak_device_bytes},
        {"mean_device_bytes", res.mean_device_bytes}, {"peak_host_bytes", res.peak_host_bytes},
        {"mean_host_bytes", res.mean_host_bytes}, {"peak_disk_bytes", res.peak_disk_bytes},
        {"mean_disk_bytes", res.mean_disk_bytes}, {"split_request_tokens", res.split_request_tokens}};
    std::ofstream f(overrides.json_path, std::ios::app);
    f << j.dump() << '\n';
    if (!f) return Status::IOError(overrides.json_path + ": cannot append the summary");
  }
  *out = std::move(res);
  return Status::OK();
}

std::string FormatServeBenchReport(const ServeBenchConfig& config, const ServeBenchResult& r) {
  std::ostringstream o;
  const bool engine = r.executor == "engine";
  const int64_t pool = r.plain_pool_bytes + r.encoded_pool_bytes;
  o << "serve-bench " << config.path;
  for (const std::string& s : config.sets) o << " --set " << s;
  o << "\n";
  o << "  executor    " << r.executor << ", model " << r.model << ", policy " << r.policy << " ("
    << DTypeName(r.shape.dtype) << ", block_size " << r.shape.block_size << ", "
    << r.shape.StreamsPerSequence() << " streams per sequence)\n";
  o << "  KV pool     " << WithCommas(pool) << " B (" << DecimalUnits(pool) << "): plain " << WithCommas(r.plain_pool_bytes)
    << " B";
  if (r.encoded_pool_bytes > 0) o << " + encoded (" << r.shape.enc.Describe() << ") " << WithCommas(r.encoded_pool_bytes) << " B";
  if (r.split_request_tokens > 0) o << " (split for requests of " << WithCommas(r.split_request_tokens) << " tokens)";
  o << "; " << WithCommas(r.kv_bytes_per_token) << " B per token uncompressed\n";
  o << "  workload    " << r.conversations << " conversations, " << r.requests << " requests: " << r.finished
    << " finished, " << r.rejected << " rejected, " << r.aborted << " aborted, " << r.unfinished << " unfinished";
  if (config.max_context > 0) o << "; " << r.truncated_turns << " turns cut to max_context " << config.max_context;
  o << "\n";
  for (const std::string& why : r.reject_reasons) o << "    rejected: " << why << "\n";
  o << "  steps       " << r.steps << " (clock " << Fmt(r.end_time, 0) << " steps with idle gaps)"
    << (r.hit_max_steps ? ", stopped at max_steps" : "");
  if (engine) {
    o << ", " << Fmt(r.wall_ms / 1000.0, 2) << " s inside steps on "
      << (config.engine.num_threads == 0   ? std::string("all cores")
          : config.engine.num_threads == 1 ? std::string("1 thread")
                                           : std::to_string(config.engine.num_threads) + " threads");
  }
  o << "\n";
  const double steps = std::max<int64_t>(1, r.steps);
  o << "  throughput  " << Fmt(static_cast<double>(r.output_tokens) / steps, 2) << " output tokens/step, "
    << Fmt(static_cast<double>(r.batched_tokens) / steps, 1) << " tokens processed/step";
  if (engine && r.wall_ms > 0) {
    o << "; " << Fmt(static_cast<double>(r.output_tokens) / (r.wall_ms / 1000.0), 1) << " output tokens/s, "
      << Fmt(static_cast<double>(r.batched_tokens) / (r.wall_ms / 1000.0), 1) << " tokens/s";
  }
  o << "\n";
  o << "  TTFT        steps: " << FormatPercentiles(r.ttft_steps, 1) << "\n";
  if (engine) o << "              ms:    " << FormatPercentiles(r.ttft_ms, 1) << "\n";
  o << "  TPOT        steps: " << FormatPercentiles(r.tpot_steps, 2) << "\n";
  if (engine) o << "              ms:    " << FormatPercentiles(r.tpot_ms, 2) << "\n";
  o << "  preemption  " << r.preemptions << " preemptions of " << r.preempted_requests << " requests; "
    << WithCommas(r.recomputed_tokens) << " tokens recomputed ("
    << Pct(r.batched_tokens > 0 ? static_cast<double>(r.recomputed_tokens) / static_cast<double>(r.batched_tokens) : 0)
    << " of the tokens processed)\n";
  if (r.prefix_caching) {
    o << "  prefix hits " << Pct(r.prefix_hit_rate()) << " of prompt tokens served from the cache ("
      << WithCommas(r.prompt_cached_tokens) << " of " << WithCommas(r.prompt_tokens) << ", units of "
      << r.prefix_unit_tokens << " tokens); " << WithCommas(r.readmission_cached_tokens)
      << " more on readmission after preemption\n";
    o << "  sharing     blocks held once for several running requests: mean "
      << DecimalUnits(static_cast<int64_t>(r.mean_shared_saved_bytes)) << " saved; blocks only the cache holds "
      << "(evicted on demand): mean " << DecimalUnits(static_cast<int64_t>(r.mean_cached_only_bytes)) << " ("
      << Pct(pool > 0 ? r.mean_cached_only_bytes / static_cast<double>(pool) : 0) << " of the pool)\n";
  } else {
    o << "  prefix hits prefix caching off\n";
  }
  o << "  running     mean " << Fmt(r.mean_running, 1) << ", peak " << r.peak_running << " requests\n";
  o << "  occupancy   mean " << Pct(r.mean_occupancy) << " of the pool, peak " << DecimalUnits(r.peak_bytes_in_use)
    << " (" << Pct(pool > 0 ? static_cast<double>(r.peak_bytes_in_use) / static_cast<double>(pool) : 0) << ")\n";
  if (r.offload) {
    o << "  tiers       device mean " << DecimalUnits(static_cast<int64_t>(r.mean_device_bytes)) << ", peak "
      << DecimalUnits(r.peak_device_bytes) << " (staging included); host mean "
      << DecimalUnits(static_cast<int64_t>(r.mean_host_bytes)) << ", peak " << DecimalUnits(r.peak_host_bytes)
      << "; disk mean " << DecimalUnits(static_cast<int64_t>(r.mean_disk_bytes)) << ", peak "
      << DecimalUnits(r.peak_disk_bytes) << "\n";
  }
  if (r.encoded_pool_bytes > 0) {
    o << "  pools       plain peak " << DecimalUnits(r.peak_plain_bytes) << " of " << DecimalUnits(r.plain_pool_bytes)
      << ", encoded peak " << DecimalUnits(r.peak_encoded_bytes) << " of " << DecimalUnits(r.encoded_pool_bytes) << "\n";
  }
  o << "  real tokens " << Pct(r.token_share_of_used) << " of the KV memory held by requests, "
    << Pct(r.token_share_of_pool) << " of the pool (step averages)\n";
  if (r.largest_request_bytes > 0) {
    o << "  largest     one request (class '" << r.largest_request_class << "') held "
      << WithCommas(r.largest_request_bytes) << " B = " << DecimalUnits(r.largest_request_bytes) << " ("
      << Pct(static_cast<double>(r.largest_request_bytes) / static_cast<double>(pool)) << " of the pool) at "
      << WithCommas(r.largest_request_tokens) << " tokens\n";
  }
  for (const ServeBenchResult::ClassStats& c : r.classes) {
    o << "  class '" << c.name << "': " << c.requests << " requests, " << c.finished << " finished, " << c.preemptions
      << " preemptions, " << WithCommas(c.recomputed_tokens) << " tokens recomputed, longest "
      << WithCommas(c.max_tokens) << " tokens; TTFT steps median " << Fmt(c.ttft_steps.median, 1) << " p90 "
      << Fmt(c.ttft_steps.p90, 1) << "; TPOT steps median " << Fmt(c.tpot_steps.median, 2) << "\n";
  }
  return o.str();
}

}  // namespace kvlab
