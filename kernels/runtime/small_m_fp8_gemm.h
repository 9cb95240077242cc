// fxfuse's FP8 GEMM for a few rows (decode): out[M, N] = round(acc * scale_x * scale_w (+ bias))
// with acc = x[M, K] . w[N, K]^T in fp32, for M <= kSmallMFp8MaxRows. The weight is vLLM's
// column-major FP8 linear weight [K, N] seen as its rows [N, K] (K contiguous), the
// activations are a statically quantized FP8 row block. At these M the step is a stream of the
// weight bytes. Up to 16 rows, each warp streams a tile of 16 weight rows over a slice of K
// through its own cp.async ring into mma.sync m16n8k32 e4m3 (weight rows as A, tokens as B),
// and the slices' partial sums meet in shared memory (small_m_fp8_gemm.cu says how); 17..64
// rows, each CTA streams 64 or 128 weight rows over a slice of K into warpgroup MMA and the slices
// meet through a cluster's shared memory (small_m_fp8_gemm_wgmma.cu). The epilogue rounds
// as fxfuse's interpreter does (`scaledMmValues`: the scale product in f32, then acc * scale,
// then + bias, then the output dtype). The runtime times it against cuBLASLt's best algorithm
// on the step's own operands and keeps the faster (docs/runtime.md "Matmul algorithms").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/runtime/paged_attention.h"
#include "proto/dtype.h"

namespace fxfuse::runtime {

using ::fxfuse::DType;

// The most rows (tokens) the kernels take, and the most the mma.sync kernel takes (two mma
// tiles of 8 tokens per warp); 17..64 rows run on the wgmma kernel (small_m_fp8_gemm_wgmma.cu).
inline constexpr int64_t kSmallMFp8MaxRows = 64;
inline constexpr int64_t kSmallMFp8MmaSyncMaxRows = 16;
// The mma.sync kernel's default L2 prefetch size: 256 bytes made the 8B decode step 0.8–3.0 %
// faster than none on an H100, 128 bytes changed nothing (docs/runtime.md "The small-M FP8 GEMM").
inline constexpr int kSmallMFp8L2PrefetchBytes = 256;
// The mma.sync kernel's cp.async ring stages per warp (each one 128-byte K step of 16 weight
// rows), all filled before the grid wait; the deep ring for A/B runs (at most 8 rows) fills the
// same number before the wait and the rest after it (docs/runtime.md "The small-M FP8 GEMM").
inline constexpr int kSmallMFp8RingStages = 2;
inline constexpr int kSmallMFp8DeepRingStages = 4;
// The most CTAs of the wgmma kernel per weight tile (its cluster): 8 measured slower than 4.
inline constexpr int kSmallMFp8WgmmaMaxSplits = 4;
// Weight rows per CTA of the wgmma kernel: one warpgroup (64) or two sharing the activation
// loads (128). Under the gated-SiLU epilogue half of a tile's rows are gates, half their ups.
inline constexpr int kSmallMFp8WgmmaTileRows = 64;
inline constexpr int kSmallMFp8WgmmaWideTileRows = 128;

// The gated-SiLU epilogue of both kernels: the step after a
// gate/up projection, vLLM's silu_and_mul_quant, done by the GEMM on its own output. With N =
// 2d, output columns n < d are the gates and d + n the ups; the GEMM's outputs are rounded to
// out_dtype (BF16 or F16) as the unfused GEMM would write them, then
//   silu[token, n] = fp8(round16(round16(silu(gate)) * up) op scale)
// as silu_and_mul_quant computes it (kernels/device/numeric.cuh), and `out` is not written. A
// CTA holds matching gate and up rows, so nothing is computed twice. The mma.sync kernel takes
// at most 4 K slices (a CTA of 8 warps holds a pair), so where the plain kernel takes 8 its sums
// add in another order; the wgmma kernel's tiles are 32 (or 64) gate rows and as many up rows,
// with the plain kernel's slices (its sums add in the same order).
struct SmallMFp8GatedSilu {
  void* out = nullptr;         // F8E4M3FN [M, d]; null: no epilogue
  int64_t out_row_stride = 0;  // bytes, >= d
  const float* scale = nullptr;  // [1] fp32
  bool divide = false;           // fp8(h / scale) instead of fp8(h * (1 / scale))
};

// The rotary + KV-cache epilogue of the mma.sync kernel (at most 16 rows): the step after a
// q/k/v projection, rt.reshape_and_cache with vLLM's neox rotary (cache_write.cu, the same
// rounding), done by the GEMM on its own rows. `cache` is that step's operands: its query, key
// and value are the q, k and v column blocks of `out` (heads_q, heads_kv, heads_kv heads of E;
// N = (heads_q + 2 heads_kv) E, rotary_dim = E). The GEMM leaves `out` as the two steps would
// (q rotated in place, or raw with the rotated q in query_out; k and v raw) and writes the
// rotated k and the v rows into their cache slots:
//
//   x ─► GEMM ─► out [M, N] ─► rotary + cache write ─► q (rotated), key_cache, value_cache
//   becomes  x ─► GEMM + epilogue ─► out, q (rotated), key_cache, value_cache
//
// A tile then takes rows 8j .. 8j + 7 of a head and their rotary partners E/2 + 8j .., so the
// lane that holds an output element holds its partner too. Unset: cache.positions == nullptr.
struct SmallMFp8RotaryCache {
  ReshapeAndCacheParams cache;
};

#ifdef __CUDACC__
#define FXFUSE_SMALL_M_HOST_DEVICE __host__ __device__
#else
#define FXFUSE_SMALL_M_HOST_DEVICE
#endif

// The weight row (output column) that row `row` (0..15) of 16-row tile `tile` computes under the
// rotary epilogue: rows 8j .. 8j + 7 of head h for rows 0..7 and their neox partners E/2 on for
// rows 8..15 (h = tile / (E / 16), j = tile % (E / 16)), so rows r and r + 8 of a tile are a
// rotary pair. Host and device (the CPU test checks it is a permutation of the heads' rows).
FXFUSE_SMALL_M_HOST_DEVICE inline int64_t SmallMFp8RotaryWeightRow(int64_t head_size, int64_t tile, int row) {
  const int64_t tiles_per_head = head_size / 16, head = tile / tiles_per_head, j = tile % tiles_per_head;
  return head * head_size + (row < 8 ? 0 : head_size / 2) + 8 * j + (row & 7);
}

struct SmallMFp8GemmParams {
  int64_t M = 0, N = 0, K = 0;
  const void* x = nullptr;  // F8E4M3FN [M, K], row stride x_row_stride elements (bytes)
  int64_t x_row_stride = 0;
  const void* w = nullptr;  // F8E4M3FN [N, K]: the weight's columns, row stride w_row_stride
  int64_t w_row_stride = 0;
  // Whether no kernel that may still be running writes w (a plan input the plan does not update:
  // the runtime sets it from lowering::readOnlyInPlan). With programmatic dependent launch the kernels then fill
  // their rings with weight bytes before they wait for the preceding grid, so the weight stream
  // starts while that grid drains; otherwise they wait first (a w computed by an earlier step,
  // e.g. a weight quantized in the graph, could still be being written).
  bool w_read_only = false;
  const float* scale_x = nullptr;  // [1] fp32 on the device (per-tensor)
  const float* scale_w = nullptr;  // [1]
  const void* bias = nullptr;      // optional [N] of bias_dtype
  DType bias_dtype = DType::BF16;  // BF16, F16 or F32
  void* out = nullptr;             // [M, N] of out_dtype, row stride out_row_stride elements
  int64_t out_row_stride = 0;
  DType out_dtype = DType::BF16;   // BF16, F16 or F32
  SmallMFp8GatedSilu gated_silu;   // set: the epilogue above (out_dtype BF16 or F16, no bias)
  SmallMFp8RotaryCache rotary;     // set: the rotary + KV-cache epilogue above (not with gated_silu)
  // Slices of K per weight tile: 0 = the kernel's rule for this GPU (SmallMFp8GemmSplits,
  // SmallMFp8GemmWgmmaSplits), else one of SmallMFp8GemmSplitChoices(*this). The rules model
  // waves of equal CTAs; the runtime times every choice on the step's operands instead and
  // keeps the fastest (docs/runtime.md "Matmul algorithms").
  int splits = 0;
  // L2 prefetch size of the mma.sync kernel's weight copies (cpAsync16Prefetch): -1 = the
  // default ($FXFUSE_SMALLM_L2_PREFETCH when set, else kSmallMFp8L2PrefetchBytes), or 0, 64,
  // 128 or 256 bytes.
  int l2_prefetch_bytes = -1;
  // The mma.sync kernel's ring stages per warp: 0 = SmallMFp8GemmRingStages' rule, or
  // kSmallMFp8RingStages, or kSmallMFp8DeepRingStages (M <= 8 only).
  int ring_stages = 0;
  // The wgmma kernel's weight rows per CTA: 0 = SmallMFp8GemmWgmmaTileRows' rule, or one of
  // SmallMFp8GemmWgmmaTileChoices(*this). The mma.sync kernel ignores it.
  int wgmma_tile_rows = 0;
};

// The weight rows per CTA the wgmma kernel runs `p` with: p.wgmma_tile_rows when set; else
// $FXFUSE_WGMMA_TILE_ROWS (64 or 128) where `p` can take it, for A/B runs; else
// kSmallMFp8WgmmaTileRows. Host-only.
int SmallMFp8GemmWgmmaTileRows(const SmallMFp8GemmParams& p);

// The tile heights the wgmma kernel can run `p` with, for the runtime to time: 64, and 128
// unless the gated-SiLU epilogue's d is not a multiple of 64; only the one
// $FXFUSE_WGMMA_TILE_ROWS names where it is set and can be taken. Host-only.
std::vector<int> SmallMFp8GemmWgmmaTileChoices(const SmallMFp8GemmParams& p);

// The ring stages the mma.sync kernel runs `p` with: p.ring_stages when set; else
// kSmallMFp8DeepRingStages where $FXFUSE_SMALLM_STAGES=4 asks for it and the weight has at least
// $FXFUSE_SMALLM_STAGES_MIN_MB MiB (unset: any), else kSmallMFp8RingStages; always the latter
// above 8 rows. Host-only.
int SmallMFp8GemmRingStages(const SmallMFp8GemmParams& p);

// The L2 prefetch size of the weight copies where SmallMFp8GemmParams leaves it to the kernel:
// kSmallMFp8L2PrefetchBytes, or $FXFUSE_SMALLM_L2_PREFETCH (64, 128 or 256; any other value:
// none, returned as 0) for A/B runs. Host-only.
int SmallMFp8DefaultL2PrefetchBytes();

// Why the kernel cannot take `p` (sizes, dtypes, alignment: K, the row strides and the x/w
// pointers must be multiples of 16 bytes; the gated-SiLU epilogue an N of two halves of whole
// 16-row tiles (32-row tiles above 16 rows, 64 with wgmma_tile_rows 128), a D16 output and no bias;
// wgmma_tile_rows 0, 64 or 128; the rotary epilogue at most 16
// rows, neox pairs over whole heads of a multiple of 16, N the q, k and v heads, a D16 output and
// cache operands as LaunchReshapeAndCache takes them; splits 0 or one of
// SmallMFp8GemmSplitChoices(p)), or nullptr when it can.
// Host-only; no GPU needed.
const char* SmallMFp8GemmUnsupported(const SmallMFp8GemmParams& p);

// `p` with the rotary cache write `write` (rt.reshape_and_cache with positions and caches) as its
// rotary epilogue, where write's query, key and value are the q, k and v column blocks of p's
// output rows (query at column 0, key heads_q heads on, value heads_kv more; row strides
// out_row_stride, heads E apart) and the kernel takes the pair (SmallMFp8GemmUnsupported);
// nullopt otherwise. Host-only.
std::optional<SmallMFp8GemmParams> SmallMFp8GemmWithRotaryCache(const SmallMFp8GemmParams& p,
                                                                const ReshapeAndCacheParams& write);

// Warps per tile of 16 weight rows (each takes one slice of K) for an N x K weight when
// `block_slots` blocks fit on the GPU at once: the most of 1, 2, 4 and 8 (at most one per
// 128-byte K step) whose blocks of 8 warps all fit in one wave (no tail: every block streams
// from start to end), else the one whose last wave is fullest (ties: more). Host-only.
int SmallMFp8GemmSplits(int64_t N, int64_t K, int64_t block_slots);

// CTAs per tile of `tile_rows` weight rows for the wgmma kernel (each takes one slice of K; a
// tile's CTAs form a cluster) when `cta_slots` CTAs fit on the GPU at once: the most of 1, 2 and
// 4 whose CTAs all fit in one wave with at least two 128-byte K steps each, else 1. Host-only.
int SmallMFp8GemmWgmmaSplits(int64_t N, int64_t K, int64_t cta_slots, int tile_rows = kSmallMFp8WgmmaTileRows);

// The slice counts the kernel that LaunchSmallMFp8Gemm picks for p.M can run, in increasing
// order: the mma.sync kernel (M <= 16) 1, 2, 4 and 8 warps per tile, at most one per 128-byte K
// step and at most 4 with the gated-SiLU epilogue; the wgmma kernel 1, 2 and 4 CTAs per
// cluster, at least two 128-byte K steps each. Host-only.
std::vector<int> SmallMFp8GemmSplitChoices(const SmallMFp8GemmParams& p);
// The wgmma kernel's part of it, for any M: 1, then 2 and 4 where K has two steps per slice.
std::vector<int> SmallMFp8GemmWgmmaSplitChoices(int64_t K);

// Every configuration the kernel that LaunchSmallMFp8Gemm picks for p.M can run `p` with, for
// the runtime to time: p with each of SmallMFp8GemmSplitChoices(p), above 16 rows for each of
// SmallMFp8GemmWgmmaTileChoices(p) (tile heights first). Host-only.
std::vector<SmallMFp8GemmParams> SmallMFp8GemmConfigurations(const SmallMFp8GemmParams& p);
// A configuration's name for the runtime's reports: "4 K slices", "128-row tiles, 2 K slices".
std::string SmallMFp8GemmConfigurationName(const SmallMFp8GemmParams& p);

// cudaErrorInvalidValue when SmallMFp8GemmUnsupported(p) says why, else the launch error. Up to
// kSmallMFp8MmaSyncMaxRows rows run on the mma.sync kernel, more on the wgmma kernel.
cudaError_t LaunchSmallMFp8Gemm(const SmallMFp8GemmParams& p, cudaStream_t stream);

// The wgmma kernel alone, for any M the launcher takes (the GPU test runs it at M <= 16 too);
// the caller has checked SmallMFp8GemmUnsupported(p) (p.splits, when set, one of 1, 2, 4 with
// two K steps per slice, and p.wgmma_tile_rows, else cudaErrorInvalidValue).
// cudaErrorNotSupported when the driver cannot encode its tensor maps.
cudaError_t LaunchSmallMFp8GemmWgmma(const SmallMFp8GemmParams& p, cudaStream_t stream);

}  // namespace fxfuse::runtime
