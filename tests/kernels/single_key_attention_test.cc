// Which attentions the single-key kernel takes (kernels/runtime/attention.h,
// SingleKeyAttentionUnsupported), on the CPU: one key, no mask, 16-bit q/k/v, an output of their
// dtype or FP8 with a scale, head sizes up to 256, grouped heads, every operand present.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/runtime/attention.h"

namespace fxfuse::runtime {
namespace {

AttentionParams firstToken() {  // a Llama-3.1-8B layer's attention at T = 1
  static char q, k, v, out;
  static const float scale = 0.5f;
  AttentionParams p;
  p.q = &q, p.k = &k, p.v = &v, p.out = &out;
  p.B = 1, p.Hq = 32, p.Hk = 8, p.Sq = 1, p.Sk = 1, p.E = p.Ev = 128;
  p.causal = true;
  p.out_dtype = DType::F8E4M3FN, p.out_scale = &scale;
  return p;
}

TEST_CASE("single-key attention: what it takes and what it refuses") {
  CHECK(SingleKeyAttentionUnsupported(firstToken()) == nullptr);
  AttentionParams p = firstToken();
  p.Sq = 7, p.causal = false, p.out_dtype = DType::BF16;  // several queries, one key
  CHECK(SingleKeyAttentionUnsupported(p) == nullptr);
  auto refused = [](AttentionParams a, const std::string& why) {
    const char* got = SingleKeyAttentionUnsupported(a);
    REQUIRE(got != nullptr);
    CHECK(std::string(got).find(why) != std::string::npos);
  };
  p = firstToken(), p.Sk = 2;
  refused(p, "more than one key");
  p = firstToken(), p.mask_dtype = DType::BOOL;
  refused(p, "mask");
  p = firstToken(), p.dtype = DType::F32;
  refused(p, "bf16 or f16");
  p = firstToken(), p.out_dtype = DType::F16;
  refused(p, "output dtype");
  p = firstToken(), p.out_scale = nullptr;
  refused(p, "scale");
  p = firstToken(), p.E = 512;
  refused(p, "E or Ev");
  p = firstToken(), p.Hq = 30;
  refused(p, "multiple of key heads");
  p = firstToken(), p.v = nullptr;
  refused(p, "null operand");
}

}  // namespace
}  // namespace fxfuse::runtime
