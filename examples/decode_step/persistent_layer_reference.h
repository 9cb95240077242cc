// The model shape of persistent_layer_bench.cu (Llama-3.1-8B, FP8 linears, a bf16 or FP8 paged
// cache) and the CPU reference its --check compares the kernel with: the same layers, with the
// rounding points of vLLM's ops (docs/vllm semantics) taken from kernels/reference. Plain C++.
#pragma once

#include <cstdint>
#include <vector>

namespace fxfuse::examples::persistent {

constexpr int kHidden = 4096, kInter = 14336, kHeads = 32, kKvHeads = 8, kHeadDim = 128;
constexpr int kQkv = (kHeads + 2 * kKvHeads) * kHeadDim;  // 6144
constexpr int kGroup = kHeads / kKvHeads;                  // query heads per KV head
constexpr int kBlockSize = 16;                             // cache block, tokens
constexpr float kEps = 1e-5f;

// The four GEMMs of a layer, their weights FP8 rows [N, K] (vLLM's column-major [K, N]).
enum Gemm { kGemmQkv, kGemmO, kGemmGateUp, kGemmDown, kGemms };
constexpr int gemmN(int g) { return g == kGemmQkv ? kQkv : g == kGemmGateUp ? 2 * kInter : kHidden; }
constexpr int gemmK(int g) { return g == kGemmDown ? kInter : kHidden; }

// Per-tensor scales, the same for every layer.
struct Scales {
  float w_qkv, w_o, w_gu, w_down;  // weights
  float x_qkv, x_o, x_gu, x_down;  // the FP8 activations each GEMM reads
  float k_cache, v_cache;          // an FP8 cache's k_scale / v_scale (vLLM's kv_cache_dtype=fp8)
};

// A cache element: bf16, or FP8 e4m3 written as fp8(x / scale) and read as f32(x8) * scale
// (docs/canonical-ops.md, fxfuse.paged_attention).
enum class CacheFormat { kBf16, kFp8 };
constexpr int cacheBytes(CacheFormat f) { return f == CacheFormat::kFp8 ? 1 : 2; }

// One layer on the host: weights, norm weights (bf16 bits) and caches (raw bytes of the
// format: little-endian bf16 pairs or e4m3 bytes).
struct HostLayer {
  std::vector<uint8_t> w[kGemms];
  std::vector<uint16_t> norm1, norm2;
  std::vector<uint8_t> k_cache, v_cache;  // [blocks, kBlockSize, kKvHeads, kHeadDim]
};

// The step's sequences: seq_lens[s] tokens of context including this step's one, block table
// rows of max_blocks, and the caches' format.
struct HostBatch {
  int batch = 0, max_blocks = 0;
  std::vector<int32_t> seq_lens, table;
  CacheFormat cache = CacheFormat::kBf16;
};

// What --check compares: the step's output and residual and its last layer's intermediates,
// bf16 ones as bits, FP8 ones as bytes.
struct Outputs {
  std::vector<uint16_t> hidden, residual, qkv, o;
  std::vector<uint8_t> attn, act;
};

// How far a kernel output is from the reference's: the relative RMS error of the values and the
// fraction of elements more than one representable step apart (bf16 ulps, or e4m3 steps).
struct Distance {
  double relative_rms = 0, beyond_one_step = 0;
};
Distance Bf16Distance(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want);
Distance Fp8Distance(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want);

// cos then sin of the 64 neox frequencies (base 500000) per position, rounded to bf16.
std::vector<float> CosSinTable(int positions);

// Runs the layers on `hidden` ([batch, kHidden]): per layer norm1 (+ the residual from layer 1
// on) and FP8 quant, qkv, rotary, the cache write of each sequence's new token and attention
// over its context, FP8 quant, o, norm2 + quant, gate/up, silu_and_mul_quant, down. The caches
// of `layers` are updated in place.
Outputs RunReference(std::vector<HostLayer>& layers, const HostBatch& b, const Scales& scales, std::vector<float> hidden,
                     const std::vector<float>& cos_sin);

}  // namespace fxfuse::examples::persistent
