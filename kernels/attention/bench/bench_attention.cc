// Benchmark of the sm90 attention kernels (docs/benchmarks/attention.md): prefill at 16k tokens
// per batch (32 query heads, 8 KV heads, head 128, causal and not, bf16 and FP8 output) and
// split-KV decode (batch 1..64, context 1k..32k), plus the device-to-device copy ceiling.
// CUDA events, warm-up, median of repeated launches; inputs random (uniform [-1, 1)), decode KV
// caches rotated so that each launch reads from beyond L2. One JSON object per line on stdout.
//   bench_attention [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/runtime/fill.h"
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
template <class FA, class FB>
std::pair<double, double> medianPairMs(FA&& fa, FB&& fb, int warmup, int reps) {
  cudaEvent_t e0, e1, e2;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  for (int i = 0; i < warmup; ++i) {
    fa();
    fb();
  }
  CK(cudaDeviceSynchronize());
  std::vector<float> ta, tb;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0));
    fa();
    CK(cudaEventRecord(e1));
    fb();
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
  const auto ms = medianPairMs([&] { CK(LaunchPrefill(p, nullptr)); }, [&] { CK(LaunchPrefill(p8, nullptr)); }, 3, reps);
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

void decode(int batch, int ctx, bool fp8, int reps) {
  const int hq = 32, hk = 8, E = 128;
  const size_t kv_elems = size_t{1} * batch * ctx * hk * E;
  const size_t kv_bytes = 2 * kv_elems * 2;
  const int copies = static_cast<int>(std::max<size_t>(1, (size_t{400} << 20) / kv_bytes + 1));
  std::vector<void*> ks, vs;
  for (int c = 0; c < copies; ++c) {
    ks.push_back(devRandom(kv_elems, 10 + 2 * c));
    vs.push_back(devRandom(kv_elems, 11 + 2 * c));
  }
  void* q = devRandom(size_t{1} * batch * hq * E, 4);
  void* out = nullptr;
  float* scale = nullptr;
  CK(cudaMalloc(&out, size_t{1} * batch * hq * E * 2));
  CK(cudaMalloc(reinterpret_cast<void**>(&scale), sizeof(float)));
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
  p.out_scale = fp8 ? scale : nullptr;
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t ws_bytes = DecodeWorkspaceBytes(p, sms);
  void* ws = nullptr;
  if (ws_bytes) CK(cudaMalloc(&ws, ws_bytes));
  p.workspace = ws;
  const double ms = medianMs(
      [&](int i) {
        p.k_cache = ks[static_cast<size_t>(i % copies)];
        p.v_cache = vs[static_cast<size_t>(i % copies)];
        CK(LaunchDecode(p, nullptr));
      },
      3, reps);
  const double bytes = double(kv_bytes) + 2.0 * 2 * batch * hq * E;
  std::printf(
      "{\"kind\": \"decode\", \"batch\": %d, \"ctx\": %d, \"out\": \"%s\", \"splits\": %d, \"ms\": %.5f, \"gbps\": %.1f}\n",
      batch, ctx, fp8 ? "fp8" : "bf16", DecodeSplits(p, sms), ms, bytes / ms / 1e6);
  std::fflush(stdout);
  for (void* x : ks) CK(cudaFree(x));
  for (void* x : vs) CK(cudaFree(x));
  CK(cudaFree(q));
  CK(cudaFree(out));
  CK(cudaFree(scale));
  if (ws) CK(cudaFree(ws));
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
