// Fusing the step after a gate/up projection, or after a q/k/v projection, into the GEMM (the
// small-M FP8 kernel's gated-SiLU and rotary + KV-cache epilogues,
// kernels/runtime/small_m_fp8_gemm.h). The runtime does it when it
// prepares a plan, after each matmul step has chosen its kernel: it applies only where the
// GEMM runs fxfuse's own kernel (the gated-SiLU epilogue up to 64 rows, the rotary one up to 16:
// SmallMFp8GemmUnsupported), which depends on the bound batch and on measurement, so it is not
// the lowering's to decide.
//
//   step i:   gate/up matmul (own small-M kernel) ─► y [M, 2d] BF16/F16, read by step i+1 only
//   step i+1: lib.silu_and_mul, FP8 output        ─► x [M, d] FP8
//   becomes   step i: the GEMM writing x itself;  step i+1: nothing
//
//   step i:   q/k/v matmul (own small-M kernel) ─► qkv [M, (Hq + 2 Hk) E]
//   step i+1: rt.reshape_and_cache with rotary   ─► q rotated, key_cache, value_cache
//   becomes   step i: the GEMM doing both;       step i+1: nothing
//
// The rotary form leaves every byte as the two steps do (SmallMFp8GemmWithRotaryCache says
// when it applies), so it needs no condition on who else reads qkv.
//
// x is the chain's bytes wherever the fused GEMM splits K as the plain one would (it takes at
// most 4 slices so a block holds a gate/up pair; where the plain one takes 8, e.g. Llama-3.1-70B
// gate/up, the sums add in another order, within the FP8 GEMM's accumulation bound).
//
// docs/runtime.md "GEMM epilogues" says what it measured, and why the other direction (the
// producer recomputed in the consumer GEMM's prologue) was dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/runtime/small_m_fp8_gemm.h"
#include "kernels/silu_and_mul.h"

namespace fxfuse::runtime {

// What a lib.silu_and_mul step would let the gate/up GEMM before it do instead.
struct GatedSiluStep {
  SmallMFp8GatedSilu epilogue;   // its FP8 output, scale and scale application
  const void* input = nullptr;   // the [M, 2d] gate/up rows it reads
  int64_t input_row_stride = 0;  // elements
  int64_t num_tokens = 0, d = 0;
  DType dtype = DType::BF16;
  int input_tensor = -1, output_tensor = -1;  // plan tensors
};

// The step's epilogue form, or nullopt when it has none (a D16 output).
std::optional<GatedSiluStep> GatedSiluOf(const kernels::SiluAndMulParams& q, int input_tensor, int output_tensor);

// A step a session fused into the GEMM before it: which epilogue, and "step i+1 (node) into
// step i (node)".
struct FusedEpilogue {
  enum Kind { kGatedSilu, kRotaryCache } kind = kGatedSilu;
  std::string steps;
  bool fused = true;  // false: the GEMM could take the step, but that epilogue is switched off
};

// Which epilogues sessions fuse: the gated-SiLU one; $FXFUSE_GEMM_EPILOGUE=all adds the rotary
// cache write (off by default: measured, the attention after the fused GEMM starts later and
// the step is no faster; docs/runtime.md "GEMM epilogues"),
// "rotary" keeps that one only, 0 fuses none.
struct GemmEpilogues {
  bool gated_silu = true, rotary_cache = false;
};
GemmEpilogues GemmEpiloguesFromEnv();

}  // namespace fxfuse::runtime
