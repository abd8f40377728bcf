#include "core/cache/cache_reservation.h"

#include <algorithm>
#include <limits>

namespace kvlab {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// a * b, or false when it does not fit in int64.
bool Mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool Add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

std::string Num(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > (s[0] == '-' ? 1 : 0); i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

Status Overflow(const char* what) {
  return Status::InvalidArgument(std::string("pool reservation: the ") + what + " overflow 64 bits (max_seqs x max_context too large)");
}

}  // namespace

Status CheckDeviceBudget(const PolicyStack& stack, int64_t budget, int64_t max_seqs, int num_layers, int num_kv_heads,
                         int64_t block_bytes) {
  int64_t open = 0, need = 0;
  if (!Mul(max_seqs, static_cast<int64_t>(num_layers) * num_kv_heads, &open) || !Mul(open, block_bytes, &need)) {
    return Overflow("device budget's bytes");
  }
  if (budget >= need) return Status::OK();
  const KVPolicy* place = stack.For(kConcernPlacement);
  return Status::InvalidArgument(
      "policy '" + std::string(place != nullptr ? place->Name() : "placement") + "' parameter 'device_budget' is " +
      Num(budget) + " bytes, less than the " + Num(need) + " bytes every step needs on the device: " + Num(open) +
      " streams (max_seqs " + Num(max_seqs) + " x " + Num(num_layers) + " layers x " + Num(num_kv_heads) +
      " KV heads) each write into their open " + Num(block_bytes) +
      "-byte block, which stays on the device (the staging of offloaded blocks is reserved beside the budget); "
      "raise device_budget to at least " + Num(need) + " or lower max_seqs");
}

namespace {

Status ReserveAtStep(const CacheShape& shape, const ModelKvShape& model, DType requested_dtype, const PolicyStack& stack,
                     const ReservationRequest& req, PoolReservation* out) {
  *out = PoolReservation();
  if (req.max_seqs <= 0 || req.max_context <= 0) {
    return Status::InvalidArgument("pool reservation: max_seqs and max_context must be positive");
  }
  const int64_t ctx = req.max_context;
  const int64_t step = req.step_tokens > 0 ? std::min(req.step_tokens, ctx) : ctx;
  const int64_t bs = shape.block_size;
  const int64_t tpb = shape.encoded ? shape.enc.tokens_per_block : 0;
  const KVPolicy* sel = stack.For(kConcernSelection);
  const int64_t kept = stack.KeptSlotsBound(ctx, shape.num_kv_heads);
  const int64_t slots = std::min(ctx, kept + step);

  // Full cache for the same request: the baseline every ratio is against.
  int64_t full_block_bytes = 2 * bs * model.head_dim * DTypeBytes(requested_dtype);
  int64_t full = 0;
  if (!Mul(req.max_seqs, static_cast<int64_t>(model.num_layers) * model.num_kv_heads, &full) ||
      !Mul(full, CeilDiv(ctx, bs), &full) || !Mul(full, full_block_bytes, &full)) {
    return Overflow("full cache's bytes");
  }
  out->full_bytes = full;

  // Plain and encoded blocks of one stream of layer l holding up to stream_slots.
  auto stream_blocks = [&](int l, int64_t stream_slots, int64_t* p, int64_t* e) {
    int64_t sl = stream_slots;
    if (shape.Window(l) > 0) sl = std::min(sl, shape.Window(l) + bs + step);
    if (req.prefix_caching) sl = ctx;
    *p = CeilDiv(sl, bs);
    // Sealing leaves at most the residual + a group being filled + a step
    // plain; compaction never decodes sealed groups back into plain slots.
    if (shape.encoded && !req.prefix_caching) *p = std::min(*p, CeilDiv(shape.residual + tpb - 1 + step, bs));
    *e = 0;
    if (shape.encoded) {
      // Groups stay whole while they keep a slot: sl slots in R runs touch at
      // most ceil(sl / tpb) + R groups; scattered ones (R = 0) one each.
      // Sealing keeps the residual plain, so without selection at most
      // sl - residual tokens are ever sealed.
      *e = CeilDiv(sel == nullptr && !req.prefix_caching ? sl - shape.residual : sl, tpb);
      if (sel != nullptr && !req.prefix_caching) {
        const int64_t runs = sel->KeptRunsBound();
        *e = std::min(CeilDiv(ctx, tpb), runs > 0 ? *e + runs : sl);
      }
    }
  };
  // A policy whose rule differs by head (duo) is reserved per stream.
  const bool per_head = sel != nullptr && sel->PerHeadSplit() && !req.prefix_caching;
  // Per layer: plain and encoded blocks of one stream (the layer's largest).
  std::vector<int64_t> plain_l(static_cast<size_t>(shape.num_layers)), enc_l(plain_l.size());
  int64_t windowed_layers = 0, plain_per_seq = 0, enc_per_seq = 0;
  for (int l = 0; l < shape.num_layers; ++l) {
    if (shape.Window(l) > 0) ++windowed_layers;
    int64_t p = 0, e = 0;
    stream_blocks(l, slots, &p, &e);
    plain_l[static_cast<size_t>(l)] = p;
    enc_l[static_cast<size_t>(l)] = e;
    if (!per_head) {
      plain_per_seq += p * shape.num_kv_heads;
      enc_per_seq += e * shape.num_kv_heads;
      continue;
    }
    for (int h = 0; h < shape.num_kv_heads; ++h) {
      const int64_t kh = std::max<int64_t>(0, std::min(ctx, sel->KeptSlotsBoundOfHead(ctx, l, h, shape.num_kv_heads)));
      stream_blocks(l, std::min(ctx, kh + step), &p, &e);
      plain_per_seq += p;
      enc_per_seq += e;
    }
  }
  int64_t plain = 0, enc = 0;
  if (!Mul(plain_per_seq, req.max_seqs, &plain) || !Mul(enc_per_seq, req.max_seqs, &enc)) return Overflow("block counts");

  const int64_t streams = static_cast<int64_t>(shape.num_layers) * shape.num_kv_heads;
  std::string why;
  auto line = [&why](const std::string& s) { why += (why.empty() ? "" : "\n") + s; };
  const std::string seqs_streams = Num(req.max_seqs) + " seqs x " + Num(streams) + " streams";
  if (req.prefix_caching) {
    line("plain: " + seqs_streams + " x " + Num(CeilDiv(ctx, bs)) + " blocks (prefix caching keeps the full reservation: " +
         "cached blocks outlive their sequences)");
  } else if (per_head) {
    line("plain: " + seqs_streams + ", " + Num(plain_per_seq) + " blocks a sequence by each head's bound (" +
         sel->Name() + ": up to " + Num(ctx) + " + a " + Num(step) + "-token step)");
  } else if (sel != nullptr) {
    line("plain: " + seqs_streams + ", each at most " + Num(slots) + " slots (" + sel->Name() + " keeps <= " + Num(kept) +
         " of " + Num(ctx) + " + a " + Num(step) + "-token step)" +
         (windowed_layers > 0 ? "; " + Num(windowed_layers) + " window layers less" : "") +
         (shape.encoded ? "; sealing leaves <= " + Num(CeilDiv(shape.residual + tpb - 1 + step, bs)) +
                              " blocks plain (residual + a group being filled + a step)"
                        : ""));
  } else if (shape.encoded) {
    line("plain: " + seqs_streams + " x " + Num(plain_l.empty() ? 0 : plain_l[0]) + " blocks (residual " +
         Num(shape.residual) + " + a " + Num(tpb) + "-token group being filled + a " + Num(step) + "-token step)");
  } else {
    line("plain: " + seqs_streams + " x " + Num(CeilDiv(ctx, bs)) + " blocks (" + Num(ctx) + " tokens" +
         (windowed_layers > 0 ? "; " + Num(windowed_layers) + " window layers hold their window + a block + a step" : "") +
         ")");
  }
  if (shape.encoded) {
    if (sel != nullptr && !req.prefix_caching) {
      const int64_t runs = sel->KeptRunsBound();
      line("encoded: " + seqs_streams + ", " + Num(tpb) + " tokens a block; sealed groups stay whole while they keep a slot, so " +
           (runs > 0 ? Num(slots) + " slots in " + Num(runs) + " runs touch <= " + Num(CeilDiv(slots, tpb) + runs) + " groups"
                     : "each of " + Num(slots) + " scattered slots may hold its own group") +
           " (at most the " + Num(CeilDiv(ctx, tpb)) + " groups of " + Num(ctx) + " tokens)");
    } else {
      line("encoded: " + seqs_streams + ", " + Num(tpb) + " tokens a block, for up to " +
           (req.prefix_caching ? Num(ctx) + " slots"
                               : Num(std::max<int64_t>(0, slots - shape.residual)) + " sealed slots (the " +
                                     Num(shape.residual) + "-token residual stays plain)"));
    }
  }

  PlacementOptions po;
  if (stack.Placement(&po)) {
    KVLAB_RETURN_IF_ERROR(CheckDeviceBudget(stack, po.device_budget_bytes, req.max_seqs, shape.num_layers,
                                            shape.num_kv_heads, shape.BlockBytes()));
  }
  if (stack.Placement(&po) && !req.prefix_caching) {
    const int64_t sets = shape.num_layers > 1 ? 2 : 1;
    const int64_t max_plain_l = plain_l.empty() ? 0 : *std::max_element(plain_l.begin(), plain_l.end());
    const int64_t max_enc_l = enc_l.empty() ? 0 : *std::max_element(enc_l.begin(), enc_l.end());
    int64_t all_streams = 0;
    if (!Mul(streams, req.max_seqs, &all_streams)) return Overflow("stream counts");
    const int64_t budget_plain = CeilDiv(po.device_budget_bytes, shape.BlockBytes());
    // Per stream: its open tail block and one step's tokens after it.
    const int64_t working = CeilDiv(bs - 1 + step, bs);
    const int64_t staging = sets * req.max_seqs * shape.num_kv_heads * max_plain_l;
    // Compaction brings a stream's offloaded blocks back before it moves slots,
    // and placement runs only after every stream is compacted, so with
    // selection the device may hold every stream's bound at once.
    int64_t headroom = 0;
    if (sel != nullptr && !Mul(all_streams, max_plain_l, &headroom)) return Overflow("device block counts");
    int64_t dev_plain = 0;
    if (!Mul(all_streams, working, &dev_plain) || !Add(dev_plain, budget_plain, &dev_plain) ||
        !Add(dev_plain, staging + headroom, &dev_plain)) {
      return Overflow("device block counts");
    }
    if (dev_plain < plain) {
      out->budget_blocks = budget_plain;
      out->staging_blocks = staging;
      plain = dev_plain;
      why = "plain (device): " + Num(budget_plain) + " blocks of the " + Num(po.device_budget_bytes) +
            "-byte device budget + " + Num(all_streams) + " streams x " + Num(working) + " (open tail and a " + Num(step) +
            "-token step) + " + Num(staging) + " staging (" + Num(sets) + " sets of one layer's blocks)" +
            (headroom > 0 ? " + " + Num(headroom) + " for compaction, which brings every stream back" : "") + "\n" + why;
    }
    if (shape.encoded) {
      const int64_t budget_enc = CeilDiv(po.device_budget_bytes, shape.enc.BlockBytes());
      const int64_t staging_enc = sets * req.max_seqs * shape.num_kv_heads * max_enc_l;
      int64_t dev_enc = 0;
      if (!Mul(all_streams, CeilDiv(step, tpb) + 1, &dev_enc) || !Add(dev_enc, budget_enc + staging_enc, &dev_enc)) {
        return Overflow("device block counts");
      }
      if (dev_enc < enc) {
        enc = dev_enc;
        line("encoded (device): " + Num(budget_enc) + " blocks of the device budget + " + Num(all_streams) +
             " streams x " + Num(CeilDiv(step, tpb) + 1) + " sealed a step + " + Num(staging_enc) + " staging");
      }
    }
  }
  out->plain_blocks = plain;
  out->encoded_blocks = enc;
  if (!Mul(plain, shape.BlockBytes(), &out->plain_bytes) ||
      (shape.encoded && !Mul(enc, shape.enc.BlockBytes(), &out->encoded_bytes))) {
    return Overflow("pool bytes");
  }
  out->why = why;
  out->step_tokens = step;
  return Status::OK();
}

}  // namespace

Status ReservePools(const CacheShape& shape, const ModelKvShape& model, DType requested_dtype, const PolicyStack& stack,
                    const ReservationRequest& req, PoolReservation* out) {
  KVLAB_RETURN_IF_ERROR(ReserveAtStep(shape, model, requested_dtype, stack, req, out));
  // An encoding without selection holds two pools at their own peaks: the
  // plain one the residual, a group being filled and a step; the encoded one
  // what is sealed by the end. Just past the residual the two can reserve more
  // than the full cache; a smaller step (whole blocks, down to one) shrinks
  // the plain pool's peak until they do not.
  if (!req.lower_step_to_fit_full || !shape.encoded || stack.For(kConcernSelection) != nullptr ||
      req.prefix_caching || out->bytes() <= out->full_bytes) {
    return Status::OK();
  }
  const int64_t bs = shape.block_size, asked = out->step_tokens, asked_bytes = out->bytes();
  PoolReservation lower = *out;
  ReservationRequest r = req;
  for (int64_t step = (asked - 1) / bs * bs; step >= bs; step -= bs) {
    r.step_tokens = step;
    KVLAB_RETURN_IF_ERROR(ReserveAtStep(shape, model, requested_dtype, stack, r, &lower));
    if (lower.bytes() <= lower.full_bytes) break;
  }
  if (lower.bytes() >= asked_bytes) return Status::OK();  // no smaller step helps
  *out = lower;
  const bool fits = out->bytes() <= out->full_bytes;
  out->why += "\nstep: lowered from " + Num(asked) + " to " + Num(out->step_tokens) + " tokens: the pools reserve " +
              Num(out->bytes()) + " B, " + (fits ? "no more than" : "still more than (the smallest step)") +
              " the full cache's " + Num(out->full_bytes) + " B; with " + Num(asked) + " they would reserve " +
              Num(asked_bytes) + " B";
  return Status::OK();
}

}  // namespace kvlab
