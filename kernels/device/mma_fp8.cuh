// Warp-level FP8 tensor-core MMA (sm_89+): c[16 x 8] += a[16 x 32] . b[32 x 8], e4m3 inputs,
// fp32 accumulators. Fragments (PTX ISA, mma.m16n8k32 for 8-bit types), lane (g, t) = (lane / 4,
// lane % 4): a0/a1 hold rows g / g + 8 at K bytes 4t..4t+3, a2/a3 the same rows at 16 + 4t..;
// b0/b1 column g at K bytes 4t.. and 16 + 4t..; c[j] is row g + 8 * (j / 2), column 2t + j % 2.
// The mma sums over K, so callers may permute K freely as long as A and B use the same order
// (the small-M GEMMs load 16 contiguous bytes per lane and split them over a0/a2 and b0/b1).
#pragma once

#include <cstdint>

namespace fxfuse::kernels::device {

__device__ __forceinline__ void mmaE4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace fxfuse::kernels::device
