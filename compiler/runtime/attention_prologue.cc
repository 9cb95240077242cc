// The rotary steps a short attention can take in as its prologue (attention_prologue.h): the
// operand check and rewrite (host only; the session's pass is attention_prologue_pass.cc).
#include "compiler/runtime/attention_prologue.h"

#include <cstdlib>
#include <string>

namespace fxfuse::runtime {

namespace {

constexpr int64_t kD16Bytes = 2;  // the rotation's rows are bf16 or f16

// The first head of the rotated rows [T, heads_q, E] that the attention operand `view`
// [1, heads, T, E] starts at, where it is a view of whole heads of those rows; else -1.
int64_t headOffset(const ReshapeAndCacheParams& r, const void* view, int64_t heads, const int64_t stride[4]) {
  const auto* base = static_cast<const char*>(r.query_out);
  const auto* at = static_cast<const char*>(view);
  if (at < base || stride[1] != r.query_out_stride[1] || stride[2] != r.query_out_stride[0] || stride[3] != 1)
    return -1;
  const int64_t head_bytes = kD16Bytes * r.query_out_stride[1];
  if (head_bytes <= 0 || (at - base) % head_bytes != 0) return -1;
  const int64_t first = (at - base) / head_bytes;
  return first + heads <= r.heads_q ? first : -1;
}

// Whether byte ranges [a, a + an) and [b, b + bn) overlap.
bool overlap(const void* a, int64_t an, const void* b, int64_t bn) {
  const auto *pa = static_cast<const char*>(a), *pb = static_cast<const char*>(b);
  return pa < pb + bn && pb < pa + an;
}

}  // namespace

std::optional<std::pair<AttentionParams, AttentionRotary>> RotatedAttentionOf(const ReshapeAndCacheParams& r,
                                                                              const AttentionParams& a) {
  if (!r.query_out || a.B != 1 || a.Sq != r.num_tokens || a.Sk != r.num_tokens || a.dtype != r.dtype ||
      a.E != r.head_size)
    return std::nullopt;
  const int64_t q_head = headOffset(r, a.q, a.Hq, a.q_stride), k_head = headOffset(r, a.k, a.Hk, a.k_stride);
  if (q_head < 0 || k_head < 0) return std::nullopt;
  // The sources are read while the attention writes: its output must not land on them.
  const int64_t source_bytes =
      kD16Bytes * ((r.num_tokens - 1) * r.query_stride[0] + (r.heads_q - 1) * r.query_stride[1] + r.head_size);
  const int64_t out_bytes = (a.out_dtype == DType::F8E4M3FN ? 1 : kD16Bytes) *
                            ((a.Hq - 1) * a.o_stride[1] + (a.Sq - 1) * a.o_stride[2] + a.Ev);
  if (overlap(r.query, source_bytes, a.out, out_bytes)) return std::nullopt;
  AttentionParams f = a;
  const auto* source = static_cast<const char*>(r.query);
  f.q = source + kD16Bytes * q_head * r.query_stride[1];
  f.k = source + kD16Bytes * k_head * r.query_stride[1];
  f.q_stride[1] = f.k_stride[1] = r.query_stride[1];
  f.q_stride[2] = f.k_stride[2] = r.query_stride[0];
  AttentionRotary rot;
  rot.positions = r.positions;
  rot.cos_sin_cache = r.cos_sin_cache;
  rot.cos_sin_dtype = r.cos_sin_dtype;
  rot.cos_sin_rows = r.cos_sin_rows;
  rot.cos_sin_stride = r.cos_sin_stride;
  rot.rotary_dim = r.rotary_dim;
  rot.neox = r.neox;
  if (ShortAttentionUnsupported(f, &rot)) return std::nullopt;
  return std::make_pair(f, rot);
}

bool AttentionPrologueFromEnv() {
  const char* v = std::getenv("FXFUSE_ATTENTION_PROLOGUE");
  return !(v && std::string(v) == "0");
}

}  // namespace fxfuse::runtime
