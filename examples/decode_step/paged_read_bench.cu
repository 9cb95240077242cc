// The read rate of a paged KV cache's access orders, with no attention math: how fast can a
// decode attention stream `[num_blocks, 16, Hk, E]` bf16 caches at all? Each warp copies its
// keys' K and V rows into a 4-stage shared-memory ring with cp.async (as the tensor-core paged
// attention does, 8 keys per stage) and only waits for them. Orders:
//   head   one warp per (sequence, KV head, chunk): 256-byte rows Hk * 256 bytes apart (ours),
//          into ring rows packed (256 bytes apart) and padded (272 apart);
//   block  the Hk warps of a CTA take the Hk heads of one (sequence, chunk) together, so the
//          CTA reads each block's 16 * Hk * E * 2 contiguous bytes at about the same time;
//   flat   each warp a contiguous range of the same size (the ceiling of this copy loop).
// Prints GB/s per order (median of 20 runs, CUDA events) and the device copy rate.
//   bazel build //examples/decode_step:paged_read_bench (in the device bundle of
//   tests/runtime/stage_device.sh); ./paged_read_bench [batch=64] [context=4096] [chunks=3]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "examples/decode_step/cuda_check.h"

namespace {

constexpr int kHeads = 8, kRowBytes = 256, kBlock = 16, kStages = 4, kKeysPerStage = 8;
constexpr int kStageBytes = 2 * kKeysPerStage * kRowBytes;  // K and V rows

__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void waitGroups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

struct Args {
  const uint8_t *k, *v;
  const int32_t* table;  // [batch, blocks_per_seq]
  int blocks_per_seq, context, chunks;
  int64_t flat_bytes_per_warp;
};

// Copies keys [lo, hi) of (seq, head) through the warp's ring. Row address of key j:
// block table[j / 16], row j % 16, head: ((block * 16 + j % 16) * Hk + head) * 256.
// The copy loop every order shares: `steps` stages of 8 keys' K and V rows (256 pieces of 16
// bytes, 8 per lane) through a ring of S stages at `ring`, S - 1 in flight, rows kPitch bytes
// apart (256 packed; 272 as the tensor-core attention once padded them). source(step, piece)
// gives the global address of a piece: pieces 0..127 the 8 K rows, 128..255 the 8 V rows.
template <int S, int kPitch, typename Source>
__device__ void streamRing(int steps, uint32_t ring, int lane, unsigned* sink, Source&& source) {
  int stage = 0;
  for (int step = 0; step < steps; ++step) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int piece = lane + 32 * i;
      cpAsync16(ring + stage * 16 * kPitch + (piece / 16) * kPitch + (piece % 16) * 16, source(step, piece));
    }
    commit();
    stage = (stage + 1) % S;
    if (step + 1 >= S - 1) waitGroups<S - 2>();
  }
  waitGroups<0>();
  if (lane == 0) atomicAdd(sink, 1u);
}

// Keys [lo, hi) of (seq, head) through the warp's ring. Row of key j: block table[j / 16],
// row j % 16, head: ((block * 16 + j % 16) * Hk + head) * 256 bytes.
template <int S, int kPitch = kRowBytes>
__device__ void streamKeys(const Args& a, int seq, int head, int lo, int hi, uint32_t ring, int lane,
                           unsigned* sink) {
  const int32_t* table = a.table + static_cast<int64_t>(seq) * a.blocks_per_seq;
  const int steps = (hi - lo + kKeysPerStage - 1) / kKeysPerStage;
  streamRing<S, kPitch>(steps, ring, lane, sink, [&](int step, int piece) {
    const int key = lo + step * kKeysPerStage + (piece % 128) / 16, kk = key < hi ? key : hi - 1;
    const int64_t row = (static_cast<int64_t>(table[kk / kBlock]) * kBlock + kk % kBlock) * kHeads + head;
    return (piece < 128 ? a.k : a.v) + row * kRowBytes + (piece % 16) * 16;
  });
}

template <int kPitch>
__global__ void headOrder(Args a, unsigned* sink) {  // blockIdx.x = (seq, head, chunk group)
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int row = blockIdx.x, seq = row / kHeads, head = row % kHeads;
  const int chunk_keys = (a.context + a.chunks - 1) / a.chunks;
  for (int c = warp; c < a.chunks; c += warps) {
    const int lo = c * chunk_keys, hi = min(lo + chunk_keys, a.context);
    streamKeys<kStages, kPitch>(a, seq, head, lo, hi,
                                static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + warp * kStages * 16 * kPitch,
                                lane, sink);
  }
}

// 8 warps per SM instead of 12: a deeper ring keeps as many bytes in flight per SM.
constexpr int kBlockOrderStages = 6;
__global__ void blockOrder(Args a, unsigned* sink) {  // blockIdx.x = (seq, chunk), warp = head
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, head = threadIdx.x >> 5;
  const int seq = blockIdx.x / a.chunks, c = blockIdx.x % a.chunks;
  const int chunk_keys = (a.context + a.chunks - 1) / a.chunks;
  const int lo = c * chunk_keys, hi = min(lo + chunk_keys, a.context);
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + head * kBlockOrderStages * kStageBytes;
  streamKeys<kBlockOrderStages>(a, seq, head, lo, hi, ring, lane, sink);
}

__global__ void flatOrder(Args a, unsigned* sink) {  // each warp a contiguous range of K and V
  extern __shared__ __align__(128) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + warp;
  const uint8_t* k = a.k + w * a.flat_bytes_per_warp / 2;
  const uint8_t* v = a.v + w * a.flat_bytes_per_warp / 2;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + warp * kStages * kStageBytes;
  const int64_t stage_bytes = kKeysPerStage * kRowBytes;  // of K, and of V
  streamRing<kStages, kRowBytes>(static_cast<int>(a.flat_bytes_per_warp / 2 / stage_bytes), ring, lane, sink,
                                 [&](int step, int piece) {
                                   return (piece < 128 ? k : v) + step * stage_bytes + (piece % 128) * 16;
                                 });
}

template <typename F>
float medianMs(F launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 64, context = argc > 2 ? std::atoi(argv[2]) : 4096;
  const int chunks = argc > 3 ? std::atoi(argv[3]) : 3;
  const int blocks_per_seq = (context + kBlock - 1) / kBlock, num_blocks = batch * blocks_per_seq;
  const int64_t cache_bytes = static_cast<int64_t>(num_blocks) * kBlock * kHeads * kRowBytes;
  uint8_t *k, *v, *copy_dst;
  int32_t* table;
  unsigned* sink;
  CHECK(cudaMalloc(&k, cache_bytes));
  CHECK(cudaMalloc(&v, cache_bytes));
  CHECK(cudaMalloc(&copy_dst, cache_bytes));
  CHECK(cudaMalloc(&table, sizeof(int32_t) * num_blocks));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK(cudaMemset(k, 1, cache_bytes));
  CHECK(cudaMemset(v, 2, cache_bytes));
  const int smem = 8 * kBlockOrderStages * kStageBytes;
  CHECK(cudaFuncSetAttribute(headOrder<kRowBytes>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(headOrder<kRowBytes + 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(blockOrder, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(flatOrder, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const double read_gb = 2.0 * cache_bytes / 1e9;
  const float copy_ms = medianMs([&] { CHECK(cudaMemcpyAsync(copy_dst, k, cache_bytes, cudaMemcpyDeviceToDevice)); });
  std::printf("batch %d context %d chunks %d: K+V %.3f GB; device copy %.0f GB/s (read+write)\n", batch, context,
              chunks, read_gb, 2.0 * cache_bytes / 1e9 / (copy_ms / 1e3));
  for (const char* tables : {"sequential", "shuffled"}) {
    std::vector<int32_t> t(num_blocks);
    std::iota(t.begin(), t.end(), 0);
    if (tables[1] == 'h') std::shuffle(t.begin(), t.end(), std::mt19937(7));
    CHECK(cudaMemcpy(table, t.data(), sizeof(int32_t) * num_blocks, cudaMemcpyHostToDevice));
    Args a{k, v, table, blocks_per_seq, context, chunks, 0};
    Args b = a;  // one CTA of 8 warps per SM: the most chunks that keep the grid in one wave
    b.chunks = std::max(1, 132 / batch);
    const int head_warps = chunks % 3 == 0 ? 3 : chunks % 2 == 0 ? 2 : 1;
    const float head_ms = medianMs([&] {
      headOrder<kRowBytes><<<batch * kHeads, 32 * head_warps, head_warps * kStages * kStageBytes>>>(a, sink);
    });
    const float padded_ms = medianMs([&] {
      const int bytes = head_warps * kStages * 16 * (kRowBytes + 16);
      headOrder<kRowBytes + 16><<<batch * kHeads, 32 * head_warps, bytes>>>(a, sink);
    });
    const float block_ms = medianMs([&] {
      blockOrder<<<batch * b.chunks, 32 * kHeads, kHeads * kBlockOrderStages * kStageBytes>>>(b, sink);
    });
    std::printf("  %-10s tables: head order %.0f GB/s (%d warps per CTA; rows 272 bytes apart in the ring %.0f GB/s), "
                "block order %.0f GB/s (%d chunks)\n",
                tables, read_gb / (head_ms / 1e3), head_warps, read_gb / (padded_ms / 1e3), read_gb / (block_ms / 1e3),
                b.chunks);
  }
  const int64_t warps = static_cast<int64_t>(batch) * kHeads * chunks;
  Args f{k, v, table, blocks_per_seq, context, chunks, 2 * cache_bytes / warps / 4096 * 4096};
  const float flat_ms = medianMs([&] {
    flatOrder<<<static_cast<unsigned>(warps / 8), 256, 8 * kStages * kStageBytes>>>(f, sink);
  });
  std::printf("  flat ranges: %.0f GB/s\n", static_cast<double>(f.flat_bytes_per_warp) * warps / 1e9 / (flat_ms / 1e3));
  return 0;
}
