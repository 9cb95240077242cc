// The sm90 attention routes of an rt.attention step (sm90_attention.h): which kernel runs a
// dense attention, and the rotated form the session's prologue pass takes a rotary step into.
#include "compiler/runtime/sm90_attention.h"

#include <cstdlib>
#include <string>

#include "ir/status.h"
#include "kernels/attention/attention.h"
#include "kernels/runtime/dense_paged_view.h"
#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {

namespace {

namespace fa = fxfuse::attention;

// A one-token decode over dense K/V (rt.attention, impl = "sm90") on the paged attention
// kernel through its identity view (kernels/runtime/dense_paged_view.h): the block table,
// lengths and query starts uploaded once here, freed with the step with the split workspace.
// The default: it beat the split-KV decode kernel and cuDNN on the H200's attention table
// (docs/benchmarks/attention.md). Except over a single key (a dense layer's first token), where
// the split-KV kernel's short chain measured faster (docs/attention.md "Dense decode on the
// paged kernel"). $FXFUSE_DENSE_DECODE=paged or =split forces one route for A/B runs. Empty
// where the view does not apply or the route is the split-KV kernel.
std::function<cudaError_t(cudaStream_t)> pagedDenseDecode(const AttentionParams& q,
                                                          std::vector<std::function<void()>>* cleanup) {
  const char* env = std::getenv("FXFUSE_DENSE_DECODE");
  const std::string route = env ? env : "";
  if (route != "paged" && route != "split" && !route.empty())
    fail("FXFUSE_DENSE_DECODE={} is not one of paged, split", route);
  if (route == "split" || (route.empty() && q.Sk == 1)) return {};
  DensePagedView view;
  if (!PagedViewOfDenseAttention(q, &view).empty()) return {};
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return {};
  PagedAttentionParams p;
  void* memory = nullptr;
  const cudaError_t prepared = PrepareDensePagedView(view, sms, &p, &memory);
  if (memory) cleanup->push_back([memory] { cudaFree(memory); });
  if (prepared != cudaSuccess) return {};
  return [p](cudaStream_t s) { return LaunchPagedAttention(p, s); };
}

// Attention over a single key as the copy of V it is (LaunchSingleKeyAttention), unless
// $FXFUSE_SINGLE_KEY_ATTENTION=0 (A/B runs). Empty where it does not apply.
std::function<cudaError_t(cudaStream_t)> singleKeyAttention(const AttentionParams& q) {
  const char* env = std::getenv("FXFUSE_SINGLE_KEY_ATTENTION");
  if ((env && std::string(env) == "0") || SingleKeyAttentionUnsupported(q)) return {};
  return [q](cudaStream_t s) { return LaunchSingleKeyAttention(q, s); };
}

bool shortAttentionFromEnv() {
  const char* env = std::getenv("FXFUSE_SHORT_ATTENTION");
  return !(env && std::string(env) == "0");
}

// Attention over a short context on the kernel that holds it in shared memory
// (LaunchShortAttention), unless $FXFUSE_SHORT_ATTENTION=0 (A/B runs). Empty where it does not
// apply.
std::function<cudaError_t(cudaStream_t)> shortAttention(const AttentionParams& q) {
  if (!shortAttentionFromEnv() || ShortAttentionUnsupported(q, nullptr)) return {};
  return [q](cudaStream_t s) { return LaunchShortAttention(q, nullptr, s); };
}


// The attention library's dtypes for q/k/v and the output; false where it takes neither.
bool kernelDTypes(const AttentionParams& q, fa::DType* dt, fa::DType* out_dt) {
  if (q.dtype != DType::BF16 && q.dtype != DType::F16) return false;
  *dt = q.dtype == DType::BF16 ? fa::DType::BF16 : fa::DType::F16;
  if (q.out_dtype == q.dtype) *out_dt = *dt;
  else if (q.out_dtype == DType::F8E4M3FN) *out_dt = fa::DType::F8E4M3FN;
  else return false;
  return true;
}

// Fields the prefill and decode kernels' params share.
template <typename Params>
void setCommon(const AttentionParams& q, fa::DType dt, fa::DType out_dt, Params* x) {
  x->dtype = dt;
  x->q = q.q;
  x->out = q.out;
  x->batch = static_cast<int>(q.B);
  x->heads_q = static_cast<int>(q.Hq);
  x->heads_kv = static_cast<int>(q.Hk);
  x->head_size = static_cast<int>(q.E);
  x->softmax_scale = q.scale;
  x->causal = q.causal;
  x->out_dtype = out_dt;
  x->out_scale = q.out_scale;
}

// The split-KV decode kernel for a few query rows per KV head without a causal mask (or a causal
// one of a single token over a single key: torch's causal mask is top-left aligned, decode's
// bottom-right alignment agrees only when Sq == Sk); its workspace is freed with the step.
std::function<cudaError_t(cudaStream_t)> splitKvDecode(const AttentionParams& q, fa::DType dt, fa::DType out_dt,
                                                       std::vector<std::function<void()>>* cleanup) {
  const int64_t group = q.Hq / q.Hk;
  if (!(q.Sq <= 8 && group * q.Sq <= fa::kDecodeMaxRows && (!q.causal || (q.Sq == 1 && q.Sk == 1)) && q.Sk > 0))
    return {};
  fa::DecodeParams d;
  setCommon(q, dt, out_dt, &d);
  d.k_cache = q.k;
  d.v_cache = q.v;
  d.num_query_tokens = static_cast<int>(q.Sq);
  for (int i = 0; i < 3; ++i) {
    d.q_stride[i] = q.q_stride[i];
    d.o_stride[i] = q.o_stride[i];
  }
  // cache strides in (batch, token, head) order
  d.k_stride[0] = q.k_stride[0], d.k_stride[1] = q.k_stride[2], d.k_stride[2] = q.k_stride[1];
  d.v_stride[0] = q.v_stride[0], d.v_stride[1] = q.v_stride[2], d.v_stride[2] = q.v_stride[1];
  d.max_context_len = q.Sk;
  if (!fa::CheckDecode(d).empty()) return {};
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return {};
  const size_t ws = fa::DecodeWorkspaceBytes(d, sms);
  if (ws > 0) {
    void* w = nullptr;
    if (cudaMalloc(&w, ws) != cudaSuccess) return {};
    cleanup->push_back([w] { cudaFree(w); });
    d.workspace = w;
  }
  return [d](cudaStream_t s) { return fa::LaunchDecode(d, s); };
}

// The wgmma prefill kernel, with `rotary` as its prologue when given.
std::function<cudaError_t(cudaStream_t)> prefill(const AttentionParams& q, fa::DType dt, fa::DType out_dt,
                                                 const AttentionRotary* rotary) {
  fa::PrefillParams p;
  setCommon(q, dt, out_dt, &p);
  p.k = q.k;
  p.v = q.v;
  p.seqlen_q = q.Sq;
  p.seqlen_k = q.Sk;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.q_stride[i];
    p.k_stride[i] = q.k_stride[i];
    p.v_stride[i] = q.v_stride[i];
    p.o_stride[i] = q.o_stride[i];
  }
  if (rotary) {
    if (!rotary->neox || rotary->rotary_dim != q.E) return {};
    p.rotary_positions = rotary->positions;
    p.rotary_cos_sin = rotary->cos_sin_cache;
    p.rotary_cos_sin_dtype = rotary->cos_sin_dtype;
    p.rotary_rows = rotary->cos_sin_rows;
    p.rotary_stride = rotary->cos_sin_stride;
  }
  if (!fa::CheckPrefill(p).empty()) return {};
  return [p](cudaStream_t s) { return fa::LaunchPrefill(p, s); };
}

// What every sm90 route needs: no mask, E == Ev, bf16/f16, grid limits, unit head-dim strides.
bool sm90Takes(const AttentionParams& q, fa::DType* dt, fa::DType* out_dt) {
  if (q.mask_dtype != DType::DTYPE_UNSPECIFIED || q.E != q.Ev) return false;
  if (!kernelDTypes(q, dt, out_dt)) return false;
  if (q.B > (int64_t{1} << 16) || q.Hq > 65535 || q.Hk <= 0 || q.Hq % q.Hk != 0) return false;
  return q.q_stride[3] == 1 && q.k_stride[3] == 1 && q.v_stride[3] == 1 && q.o_stride[3] == 1;
}

}  // namespace

bool ShortAttentionFromEnv() { return shortAttentionFromEnv(); }

// The sm90 attention kernels for a rt.attention step (plan arg impl = "sm90"), in this order:
// attention over a single key as a copy of V (singleKeyAttention); a context of at most 16
// keys held in shared memory (shortAttention: a dense layer's T <= 16, measured faster than the
// routes below in the decoder layer, docs/attention.md "Short contexts"); a one-token decode
// over dense K/V on the paged kernel (pagedDenseDecode); else split-KV decode for a few query
// rows per KV head without a causal mask, or a causal one of a single token over a single key
// (torch's causal mask is top-left aligned: decode's bottom-right alignment agrees only when
// Sq == Sk); else the wgmma prefill kernel. A causal block of more than 16 tokens goes to
// prefill: the decode kernel took 79 µs for 8 causal tokens over their own 8 (ncu, H200,
// docs/benchmarks/decoder_layer.md, T = 8). Returns an empty function when the params do not
// fit (odd strides, misaligned pointers, mask, fp32, ...): the caller uses the reference kernel
// then. A decode workspace is allocated here and freed with the step.
std::function<cudaError_t(cudaStream_t)> Sm90Attention(const AttentionParams& q,
                                                       std::vector<std::function<void()>>* cleanup) {
  fa::DType dt, out_dt;
  if (!sm90Takes(q, &dt, &out_dt)) return {};
  if (auto single = singleKeyAttention(q)) return single;
  if (auto short_context = shortAttention(q)) return short_context;
  if (auto paged = pagedDenseDecode(q, cleanup)) return paged;
  if (auto decode = splitKvDecode(q, dt, out_dt, cleanup)) return decode;
  return prefill(q, dt, out_dt, nullptr);
}

std::function<cudaError_t(cudaStream_t)> Sm90RotatedAttention(const AttentionParams& q, const AttentionRotary& rotary) {
  fa::DType dt, out_dt;
  if (!sm90Takes(q, &dt, &out_dt)) return {};
  if (shortAttentionFromEnv() && !ShortAttentionUnsupported(q, &rotary))
    return [q, rotary](cudaStream_t s) { return LaunchShortAttention(q, &rotary, s); };
  if (q.Sq > fa::kRotaryPrefillMaxTokens) return {};
  return prefill(q, dt, out_dt, &rotary);
}

}  // namespace fxfuse::runtime
