// How fast does the small-M FP8 GEMM stream a decode step's weights, against a plain read of the
// same bytes? For each Llama weight shape (N x K, FP8) and token count M it times, back to back
// in one CUDA graph over rotating weight copies larger than L2 (so every launch reads DRAM):
//   read       a grid-stride loop of 16-byte loads over the weight (the read ceiling of a
//              kernel that does nothing else; no programmatic launch, so each boundary drains);
//   own sS pB  LaunchSmallMFp8Gemm in every configuration the runtime times
//              (SmallMFp8GemmConfigurations: S slices of K, and "rR" the wgmma kernel's R-row
//              tiles) and an L2 prefetch size of B bytes on its weight copies
//              (kernels/runtime/small_m_fp8_gemm.h), programmatic launch and the weight ring
//              filled before the wait, as in a plan; M > 16 runs the wgmma kernel, whose TMA
//              copies have their own L2 promotion (one column, "p-1").
// Prints µs per launch (median over replays of the graph) and TB/s of weight bytes, and the
// device copy rate measured the same way.
//   bazel build //examples/decode_step:weight_stream_bench (in the device bundle of
//   tests/runtime/stage_device.sh); ./weight_stream_bench [shapes=8b|70b|all|one name, e.g. gateup8b]
//   [Ms=1,8,16; at most 64]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "examples/decode_step/cuda_check.h"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace {

using fxfuse::runtime::LaunchSmallMFp8Gemm;
using fxfuse::runtime::SmallMFp8GemmParams;
using fxfuse::runtime::SmallMFp8GemmConfigurations;

constexpr int kLaunchesPerGraph = 24;
constexpr int kReplays = 15;
constexpr int64_t kMinRotatedBytes = int64_t{256} << 20;  // several times any L2

struct Shape {
  const char* name;
  int64_t n, k;
};

// e4m3 bytes with the exponent field at most 6 (|v| < 1, never NaN), so the MMAs time as in a plan.
__global__ void fillFp8(uint8_t* p, int64_t bytes, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < bytes; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = static_cast<uint8_t>(h & 0xb7u);
  }
}

// The read ceiling: every byte loaded once in 16-byte vectors, four in flight per thread.
__global__ void readOnly(const uint4* p, int64_t vecs, unsigned* sink) {
  unsigned acc = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < vecs; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < vecs; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads
}

__global__ void copyKernel(const uint4* src, uint4* dst, int64_t vecs) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vecs; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// Median µs per launch of `launch(i)` for i = 0..kLaunchesPerGraph-1, captured in one graph.
template <typename Launch>
double timeGraph(cudaStream_t stream, Launch&& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunchesPerGraph; ++i) CHECK(launch(i));
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int r = 0; r < kReplays + 2; ++r) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(stop, stream));
    CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, start, stop));
    if (r >= 2) ms.push_back(t);  // two warm-up replays
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return 1e3 * ms[ms.size() / 2] / kLaunchesPerGraph;
}

double copyRate(cudaStream_t stream, int sms) {
  const int64_t bytes = int64_t{1} << 30;
  uint4 *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  const double us = timeGraph(stream, [&](int) {
    copyKernel<<<sms * 8, 256, 0, stream>>>(a, b, bytes / 16);
    return cudaGetLastError();
  });
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e12;
}

void benchShape(const Shape& s, const std::vector<int64_t>& ms, cudaStream_t stream, int sms) {
  const int64_t w_bytes = s.n * s.k;
  const int copies = static_cast<int>(std::max<int64_t>(2, (kMinRotatedBytes + w_bytes - 1) / w_bytes));
  std::vector<uint8_t*> w(copies);
  for (int c = 0; c < copies; ++c) {
    CHECK(cudaMalloc(&w[c], w_bytes));
    fillFp8<<<sms * 4, 256, 0, stream>>>(w[c], w_bytes, 0x1234u + c);
  }
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  uint8_t* x = nullptr;
  float* scales = nullptr;
  void* out = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&x, max_m * s.k));
  fillFp8<<<sms, 256, 0, stream>>>(x, max_m * s.k, 0x99u);
  CHECK(cudaMalloc(&scales, 2 * sizeof(float)));
  const float ones[2] = {1.f / 64, 1.f / 64};
  CHECK(cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&out, max_m * s.n * 2));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK(cudaStreamSynchronize(stream));

  const double gb = static_cast<double>(w_bytes) / 1e12;
  const double read_us = timeGraph(stream, [&](int i) {
    readOnly<<<sms * 4, 512, 0, stream>>>(reinterpret_cast<const uint4*>(w[i % copies]), w_bytes / 16, sink);
    return cudaGetLastError();
  });
  std::printf("%-8s N=%lld K=%lld %.1f MB, %d copies: read %.2f us (%.2f TB/s)\n", s.name, static_cast<long long>(s.n),
              static_cast<long long>(s.k), w_bytes / 1e6, copies, read_us, gb / (read_us * 1e-6));
  for (const int64_t m : ms) {
    SmallMFp8GemmParams p;
    p.M = m, p.N = s.n, p.K = s.k;
    p.x = x, p.x_row_stride = s.k, p.w_row_stride = s.k, p.w_read_only = true;
    p.scale_x = scales, p.scale_w = scales + 1;
    p.out = out, p.out_row_stride = s.n;
    for (SmallMFp8GemmParams c : SmallMFp8GemmConfigurations(p)) {
      std::printf("  M=%-3lld s%d", static_cast<long long>(m), c.splits);
      if (c.wgmma_tile_rows) std::printf(" r%d", c.wgmma_tile_rows);
      const bool mma_sync = m <= fxfuse::runtime::kSmallMFp8MmaSyncMaxRows;
      for (const int prefetch : mma_sync ? std::vector<int>{0, 64, 128, 256} : std::vector<int>{-1}) {
        c.l2_prefetch_bytes = prefetch;
        const double us = timeGraph(stream, [&](int i) {
          SmallMFp8GemmParams q = c;
          q.w = w[i % copies];
          return LaunchSmallMFp8Gemm(q, stream);
        });
        std::printf("  p%-3d %7.2f us %.2f TB/s %.2fx", prefetch, us, gb / (us * 1e-6), read_us / us);
      }
      std::printf("\n");
    }
  }
  for (uint8_t* c : w) CHECK(cudaFree(c));
  CHECK(cudaFree(x));
  CHECK(cudaFree(scales));
  CHECK(cudaFree(out));
  CHECK(cudaFree(sink));
}

std::vector<int64_t> parseList(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, nullptr, 10));
    p = std::strchr(p, ',');
    if (!p) break;
    ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "8b";
  const std::vector<int64_t> ms = parseList(argc > 2 ? argv[2] : "1,8,16");
  for (const int64_t m : ms) {
    if (m < 1 || m > fxfuse::runtime::kSmallMFp8MaxRows) {
      std::fprintf(stderr, "weight_stream_bench: M must be 1..%lld (the small-M kernels)\n",
                   static_cast<long long>(fxfuse::runtime::kSmallMFp8MaxRows));
      return 2;
    }
  }
  const std::vector<Shape> b8 = {
      {"qkv8b", 6144, 4096}, {"o8b", 4096, 4096}, {"gateup8b", 28672, 4096}, {"down8b", 4096, 14336}};
  const std::vector<Shape> b70 = {
      {"qkv70b", 10240, 8192}, {"o70b", 8192, 8192}, {"gateup70b", 57344, 8192}, {"down70b", 8192, 28672}};
  std::vector<Shape> shapes;
  if (which == "8b" || which == "all") shapes.insert(shapes.end(), b8.begin(), b8.end());
  if (which == "70b" || which == "all") shapes.insert(shapes.end(), b70.begin(), b70.end());
  for (const std::vector<Shape>* set : {&b8, &b70})  // one shape by name, e.g. under a profiler
    for (const Shape& s : *set)
      if (which == s.name) shapes.push_back(s);
  if (shapes.empty()) {
    std::fprintf(stderr, "weight_stream_bench: shapes are 8b, 70b, all or one shape's name (qkv8b, ..., down70b)\n");
    return 2;
  }
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("%s, %d SMs, L2 %d MB; %d launches per graph, median of %d replays\n", prop.name, sms,
              prop.l2CacheSize >> 20, kLaunchesPerGraph, kReplays);
  std::printf("device copy rate %.2f TB/s (read + write)\n", copyRate(stream, sms));
  for (const Shape& s : shapes) benchShape(s, ms, stream, sms);
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
