// Parameter checks and launch-shape choices of the sm90 attention kernels (plain C++, no GPU):
// why a call does not fit the fast kernels, the decode split count and its workspace size.
#include <cstdint>
#include <string>

#include "kernels/attention/attention.h"

namespace fxfuse::attention {
namespace {

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

bool d16(DType t) { return t == DType::BF16 || t == DType::F16; }

std::string checkOut(DType in, DType out, const float* scale) {
  if (out == DType::F8E4M3FN) return scale ? "" : "fp8 output needs out_scale";
  if (out != in) return std::string("output dtype ") + DTypeName(out) + " differs from the input dtype " + DTypeName(in);
  return "";
}

// TMA needs every stride of a tensor map a multiple of 16 bytes (8 elements of 16 bits).
std::string checkStrides(const char* what, const int64_t (&s)[3], bool check_batch) {
  for (int d = check_batch ? 0 : 1; d < 3; ++d)
    if (s[d] <= 0 || s[d] % 8 != 0)
      return std::string(what) + " stride " + std::to_string(s[d]) + " (dim " + std::to_string(d) +
             ") is not a positive multiple of 8 elements";
  return "";
}

}  // namespace

const char* DTypeName(DType t) {
  switch (t) {
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::F8E4M3FN: return "fp8_e4m3";
    default: return "?";
  }
}

std::string CheckPrefill(const PrefillParams& p) {
  if (!d16(p.dtype)) return "inputs must be bf16 or fp16";
  if (p.head_size != 64 && p.head_size != 128) return "head size " + std::to_string(p.head_size) + " is not 64 or 128";
  if (p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0) return "batch and head counts must be positive";
  if (p.heads_q % p.heads_kv != 0) return "heads_q is not a multiple of heads_kv";
  if (p.seqlen_q < 0 || p.seqlen_k < 0 || p.seqlen_q > (int64_t{1} << 30) || p.seqlen_k > (int64_t{1} << 30))
    return "sequence lengths out of range";
  if (!p.q || !p.k || !p.v || !p.out) return "null tensor pointer";
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v)) return "q/k/v not 16-byte aligned";
  if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr)) return "cu_seqlens_q and cu_seqlens_k go together";
  const bool dense = p.cu_seqlens_q == nullptr;
  std::string e;
  if (!(e = checkStrides("q", p.q_stride, dense && p.batch > 1)).empty()) return e;
  if (!(e = checkStrides("k", p.k_stride, dense && p.batch > 1)).empty()) return e;
  if (!(e = checkStrides("v", p.v_stride, dense && p.batch > 1)).empty()) return e;
  if (p.o_stride[1] <= 0 || p.o_stride[2] <= 0 || (dense && p.batch > 1 && p.o_stride[0] <= 0))
    return "output strides must be positive";
  // The epilogue writes 16-byte chunks of each output row.
  const int64_t o_align = p.out_dtype == DType::F8E4M3FN ? 16 : 8;
  if (!aligned16(p.out) || p.o_stride[0] % o_align != 0 || p.o_stride[1] % o_align != 0 || p.o_stride[2] % o_align != 0)
    return "output not 16-byte aligned or an output stride is not a multiple of 16 bytes";
  if (!dense && (p.total_q < p.seqlen_q || p.total_k < p.seqlen_k)) return "varlen: total_q/total_k below the maxima";
  if (!(p.softmax_scale > 0)) return "softmax scale must be positive";
  return checkOut(p.dtype, p.out_dtype, p.out_scale);
}

// Split count from a cost model: waves of CTAs (3, 2 or 1 per SM for the 4-, 16- and 64-row
// variants, by shared memory) times the keys each CTA streams (plus two tiles' worth of fixed
// cost), plus the combine pass when splitting; at least 256 keys per split. Ties go to fewer
// splits.
int DecodeSplits(const DecodeParams& p, int num_sms) {
  if (p.num_splits > 0) return p.num_splits;
  const int64_t blocks = static_cast<int64_t>(p.batch) * p.heads_kv;
  if (blocks <= 0 || p.max_context_len <= 0 || p.heads_kv <= 0) return 1;
  const int64_t rows = static_cast<int64_t>(p.heads_q / p.heads_kv) * p.num_query_tokens;
  const int64_t per_sm = rows <= 4 ? 3 : rows <= 16 ? 2 : 1;
  const int64_t slots = per_sm * static_cast<int64_t>(num_sms > 0 ? num_sms : 132);
  int64_t max_s = (p.max_context_len + 255) / 256;
  if (max_s > 64) max_s = 64;
  int best = 1;
  int64_t best_cost = -1;
  for (int64_t s = 1; s <= max_s; ++s) {
    const int64_t waves = (blocks * s + slots - 1) / slots;
    const int64_t keys = ((p.max_context_len + s - 1) / s + 63) / 64 * 64;
    const int64_t cost = waves * (keys + 128) + (s > 1 ? 256 : 0);
    if (best_cost < 0 || cost < best_cost) best_cost = cost, best = static_cast<int>(s);
  }
  return best;
}

size_t DecodeWorkspaceBytes(const DecodeParams& p, int num_sms) {
  const int splits = DecodeSplits(p, num_sms);
  if (splits <= 1) return 0;
  return static_cast<size_t>(splits) * static_cast<size_t>(p.batch) * static_cast<size_t>(p.heads_q) *
         static_cast<size_t>(p.num_query_tokens) * static_cast<size_t>(p.head_size + 2) * sizeof(float);
}

std::string CheckDecode(const DecodeParams& p) {
  if (!d16(p.dtype)) return "inputs must be bf16 or fp16";
  if (p.head_size != 64 && p.head_size != 128) return "head size " + std::to_string(p.head_size) + " is not 64 or 128";
  if (p.batch <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.num_query_tokens <= 0)
    return "batch, head and token counts must be positive";
  if (p.heads_q % p.heads_kv != 0) return "heads_q is not a multiple of heads_kv";
  if ((p.heads_q / p.heads_kv) * p.num_query_tokens > kDecodeMaxRows)
    return "(heads_q / heads_kv) * num_query_tokens exceeds " + std::to_string(kDecodeMaxRows);
  if (!p.q || !p.k_cache || !p.v_cache || !p.out) return "null tensor pointer";
  if (!aligned16(p.k_cache) || !aligned16(p.v_cache)) return "k/v cache not 16-byte aligned";
  for (int d = 0; d < 3; ++d)
    if (p.k_stride[d] % 8 != 0 || p.v_stride[d] % 8 != 0) return "k/v cache strides must be multiples of 8 elements";
  if (p.block_table && p.block_size <= 0) return "paged cache needs block_size";
  if (p.max_context_len <= 0 || p.max_context_len > (int64_t{1} << 30)) return "max_context_len out of range";
  if (p.num_splits < 0 || p.num_splits > 256) return "num_splits out of range";
  if (!(p.softmax_scale > 0)) return "softmax scale must be positive";
  return checkOut(p.dtype, p.out_dtype, p.out_scale);
}

bool FitsSm90(const AttentionShapeFacts& f, std::string* reason) {
  auto no = [&](const char* why) {
    if (reason) *reason = why;
    return false;
  };
  if (f.head_size != f.head_size_v) return no("value head size differs from the query head size");
  if (f.head_size != 64 && f.head_size != 128) return no("head size is not 64 or 128");
  if (!f.d16_inputs) return no("inputs are not all bf16 or all fp16");
  if (f.has_mask) return no("arbitrary attention mask");
  if (!f.last_dim_contiguous) return no("head dimension is not contiguous");
  if (f.stride_gcd_elems >= 0 && f.stride_gcd_elems % 8 != 0) return no("a token/head stride is not a multiple of 8 elements");
  if (!f.out_ok) return no("output dtype");
  if (reason) reason->clear();
  return true;
}

}  // namespace fxfuse::attention
