// Benchmark of the sm90 attention kernels (docs/benchmarks/attention.md): prefill at 16k tokens
// per batch (32 query heads, 8 KV heads, head 128, causal and not, bf16 and FP8 output) and
// decode (batch 1..64, context 1k..32k) on both decode kernels: the paged tensor-core kernel
// over the dense cache's identity view (what the runtime runs, kernels/runtime/dense_paged_view.h)
// and kernels/attention's split-KV kernel, timed alternately; plus the device-to-device copy
// ceiling. CUDA events, warm-up, median of repeated launches; inputs random (uniform [-1, 1)),
// decode KV caches rotated so that each launch reads from beyond L2. One JSON object per line.
//   bench_attention [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/runtime/dense_paged_view.h"
#include "kernels/runtime/fill.h"
#include "kernels/runtime/paged_attention.h"
#include "kernels/attention/attention.h"

namespace {

using namespace fxfuse::attention;

#define CK(expr)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (expr);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

void* devRandom(size_t elems, unsigned seed) {
  void* p = nullptr;
  CK(cudaMalloc(&p, elems * 2));
  CK(fxfuse::runtime::FillRandom(p, static_cast<int64_t>(elems), fxfuse::DType::BF16, seed, nullptr));
  return p;
}

template <class F>
double medianMs(F&& launch, int warmup, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch(i);
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    launch(warmup + i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

// Medians of two launches timed alternately (A, B, A, B, ...): clock and power drift hit both.
// Each gets the round's index i (warm-up rounds first), to rotate inputs.
template <class FA, class FB>
std::pair<double, double> medianPairMs(FA&& fa, FB&& fb, int warmup, int reps) {
  cudaEvent_t e0, e1, e2;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  for (int i = 0; i < warmup; ++i) {
    fa(i);
    fb(i);
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> ta, tb;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0));
    fa(warmup + i);
    CK(cudaEventRecord(e1));
    fb(warmup + i);
    CK(cudaEventRecord(e2));
    CK(cudaEventSynchronize(e2));
    float x = 0, y = 0;
    CK(cudaEventElapsedTime(&x, e0, e1));
    CK(cudaEventElapsedTime(&y, e1, e2));
    ta.push_back(x);
    tb.push_back(y);
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaEventDestroy(e2));
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

void copyCeiling() {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  const double ms = medianMs([&](int) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  std::printf("{\"kind\": \"copy\", \"bytes\": %zu, \"ms\": %.5f, \"gbps\": %.1f}\n", bytes, ms, 2.0 * bytes / ms / 1e6);
  CK(cudaFree(a));
  CK(cudaFree(b));
}

// One prefill shape, bf16 output and FP8 output timed alternately.
void prefill(int seqlen, bool causal, int reps) {
  const int tokens = 16384, batch = tokens / seqlen, hq = 32, hk = 8, E = 128;
  void* q = devRandom(size_t{1} * tokens * hq * E, 1);
  void* k = devRandom(size_t{1} * tokens * hk * E, 2);
  void* v = devRandom(size_t{1} * tokens * hk * E, 3);
  void *out = nullptr, *out8 = nullptr;
  float* scale = nullptr;
  CK(cudaMalloc(&out, size_t{1} * tokens * hq * E * 2));
  CK(cudaMalloc(&out8, size_t{1} * tokens * hq * E));
  CK(cudaMalloc(reinterpret_cast<void**>(&scale), sizeof(float)));
  const float s = 0.01f;
  CK(cudaMemcpy(scale, &s, sizeof(float), cudaMemcpyHostToDevice));
  PrefillParams p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.batch = batch;
  p.heads_q = hq;
  p.heads_kv = hk;
  p.head_size = E;
  p.seqlen_q = p.seqlen_k = seqlen;
  // [B, S, H, E] memory (what torch's flash backend reads), strides (batch, head, token)
  p.q_stride[0] = p.o_stride[0] = int64_t{seqlen} * hq * E;
  p.q_stride[1] = p.o_stride[1] = E;
  p.q_stride[2] = p.o_stride[2] = int64_t{hq} * E;
  p.k_stride[0] = p.v_stride[0] = int64_t{seqlen} * hk * E;
  p.k_stride[1] = p.v_stride[1] = E;
  p.k_stride[2] = p.v_stride[2] = int64_t{hk} * E;
  p.softmax_scale = 0.08838834764831845f;
  p.causal = causal;
  PrefillParams p8 = p;
  p8.out = out8;
  p8.out_dtype = DType::F8E4M3FN;
  p8.out_scale = scale;
  const auto ms = medianPairMs([&](int) { CK(LaunchPrefill(p, nullptr)); }, [&](int) { CK(LaunchPrefill(p8, nullptr)); },
                               3, reps);
  const double flops = 4.0 * batch * hq * double(seqlen) * seqlen * E * (causal ? 0.5 : 1.0);
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    const double t = fp8 ? ms.second : ms.first;
    std::printf(
        "{\"kind\": \"prefill\", \"seqlen\": %d, \"batch\": %d, \"causal\": %s, \"out\": \"%s\", \"ms\": %.5f, \"tflops\": %.1f}\n",
        seqlen, batch, causal ? "true" : "false", fp8 ? "fp8" : "bf16", t, flops / t / 1e9);
  }
  std::fflush(stdout);
  for (void* x : {q, k, v, out, out8}) CK(cudaFree(x));
  CK(cudaFree(scale));
}

// The paged kernel's launch over the decode's dense [B, S, Hk, E] cache (k and v set per
// launch), prepared as the runtime prepares it (PrepareDensePagedView); `owned` collects the
// allocation.
fxfuse::runtime::PagedAttentionParams pagedDecodeOf(const DecodeParams& d, int sms, std::vector<void*>* owned) {
  namespace rt = fxfuse::runtime;
  rt::AttentionParams a;
  a.dtype = a.round_dtype = d.dtype;
  a.out_dtype = d.out_dtype;
  a.out_scale = d.out_scale;
  a.q = d.q;
  a.out = d.out;
  a.B = d.batch, a.Hq = d.heads_q, a.Hk = d.heads_kv, a.Sq = 1, a.Sk = d.max_context_len;
  a.E = a.Ev = d.head_size;
  // rt.attention's [B, H, S, E] strides; the decode's are (batch, head, token) for q/out and
  // (batch, token, head) for the cache.
  const int64_t q4[4] = {d.q_stride[0], d.q_stride[1], d.q_stride[2], 1};
  const int64_t o4[4] = {d.o_stride[0], d.o_stride[1], d.o_stride[2], 1};
  const int64_t k4[4] = {d.k_stride[0], d.k_stride[2], d.k_stride[1], 1};
  std::copy(q4, q4 + 4, a.q_stride);
  std::copy(o4, o4 + 4, a.o_stride);
  std::copy(k4, k4 + 4, a.k_stride);
  std::copy(k4, k4 + 4, a.v_stride);
  a.scale = d.softmax_scale;
  rt::DensePagedView view;
  const std::string why = rt::PagedViewOfDenseAttention(a, &view);
  if (!why.empty()) {
    std::fprintf(stderr, "the decode has no paged view: %s\n", why.c_str());
    std::exit(1);
  }
  rt::PagedAttentionParams p;
  void* memory = nullptr;
  CK(rt::PrepareDensePagedView(view, sms, &p, &memory));
  owned->push_back(memory);
  return p;
}

// One decode shape on both kernels, timed alternately over rotated caches.
void decode(int batch, int ctx, bool fp8, int reps) {
  const int hq = 32, hk = 8, E = 128;
  const size_t kv_elems = size_t{1} * batch * ctx * hk * E;
  const size_t kv_bytes = 2 * kv_elems * 2;
  const int copies = static_cast<int>(std::max<size_t>(1, (size_t{400} << 20) / kv_bytes + 1));
  std::vector<void*> ks, vs, owned;
  for (int c = 0; c < copies; ++c) {
    ks.push_back(devRandom(kv_elems, 10 + 2 * c));
    vs.push_back(devRandom(kv_elems, 11 + 2 * c));
  }
  owned.push_back(devRandom(size_t{1} * batch * hq * E, 4));
  const void* q = owned.back();
  void *out = nullptr, *scale = nullptr;
  CK(cudaMalloc(&out, size_t{1} * batch * hq * E * 2));
  CK(cudaMalloc(&scale, sizeof(float)));
  owned.push_back(out);
  owned.push_back(scale);
  const float s = 0.01f;
  CK(cudaMemcpy(scale, &s, sizeof(float), cudaMemcpyHostToDevice));
  DecodeParams p;
  p.q = q;
  p.out = out;
  p.batch = batch;
  p.heads_q = hq;
  p.heads_kv = hk;
  p.head_size = E;
  p.num_query_tokens = 1;
  p.q_stride[0] = p.o_stride[0] = int64_t{hq} * E;
  p.q_stride[1] = p.o_stride[1] = E;
  p.q_stride[2] = p.o_stride[2] = int64_t{hq} * E;
  // [B, S, Hk, E] cache, strides (batch, token, head)
  p.k_stride[0] = p.v_stride[0] = int64_t{ctx} * hk * E;
  p.k_stride[1] = p.v_stride[1] = int64_t{hk} * E;
  p.k_stride[2] = p.v_stride[2] = E;
  p.max_context_len = ctx;
  p.softmax_scale = 0.08838834764831845f;
  p.causal = true;
  p.out_dtype = fp8 ? DType::F8E4M3FN : DType::BF16;
  p.out_scale = fp8 ? static_cast<const float*>(scale) : nullptr;
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (const size_t ws_bytes = DecodeWorkspaceBytes(p, sms)) {
    CK(cudaMalloc(&p.workspace, ws_bytes));
    owned.push_back(p.workspace);
  }
  fxfuse::runtime::PagedAttentionParams paged = pagedDecodeOf(p, sms, &owned);
  const auto ms = medianPairMs(
      [&](int i) {
        paged.key_cache = ks[static_cast<size_t>(i % copies)];
        paged.value_cache = vs[static_cast<size_t>(i % copies)];
        CK(fxfuse::runtime::LaunchPagedAttention(paged, nullptr));
      },
      [&](int i) {
        p.k_cache = ks[static_cast<size_t>((i + copies / 2) % copies)];  // a copy the other did not just read
        p.v_cache = vs[static_cast<size_t>((i + copies / 2) % copies)];
        CK(LaunchDecode(p, nullptr));
      },
      3, reps);
  const double bytes = double(kv_bytes) + 2.0 * 2 * batch * hq * E;
  const struct {
    const char* kernel;
    long splits;
    double ms;
  } rows[] = {{"paged", static_cast<long>(paged.num_splits), ms.first}, {"split", DecodeSplits(p, sms), ms.second}};
  for (const auto& r : rows)
    std::printf(
        "{\"kind\": \"decode\", \"kernel\": \"%s\", \"batch\": %d, \"ctx\": %d, \"out\": \"%s\", \"splits\": %ld, "
        "\"ms\": %.5f, \"gbps\": %.1f}\n",
        r.kernel, batch, ctx, fp8 ? "fp8" : "bf16", r.splits, r.ms, bytes / r.ms / 1e6);
  std::fflush(stdout);
  for (void* x : ks) CK(cudaFree(x));
  for (void* x : vs) CK(cudaFree(x));
  for (void* x : owned) CK(cudaFree(x));
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool profile = argc > 1 && std::strcmp(argv[1], "--profile") == 0;
  if (profile) {  // one prefill and one decode launch set for ncu
    prefill(4096, true, 1);
    decode(16, 8192, false, 1);
    return 0;
  }
  const int reps = quick ? 5 : 20;
  copyCeiling();
  for (int s : {512, 1024, 2048, 4096, 8192, 16384})
    for (bool causal : {false, true}) prefill(s, causal, reps);
  for (int b : {1, 4, 16, 64})
    for (int ctx : {1024, 2048, 8192, 32768}) {
      decode(b, ctx, false, reps);
      if (b == 16) decode(b, ctx, true, reps);
    }
  return 0;
}
