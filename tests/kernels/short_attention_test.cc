// Which attentions the short attention takes (kernels/runtime/attention.h,
// ShortAttentionUnsupported) and how the runtime hands it a dense plan's rotary step
// (compiler/runtime/attention_prologue.h, RotatedAttentionOf), on the CPU: pointer and stride
// arithmetic only, on host buffers laid out as a Llama-3.1-8B layer's at T = 8.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/runtime/attention_prologue.h"
#include "kernels/runtime/attention.h"

namespace fxfuse::runtime {
namespace {

constexpr int64_t kT = 8, kHq = 32, kHk = 8, kE = 128, kQkvRow = (kHq + 2 * kHk) * kE, kRotRow = (kHq + kHk) * kE;

// The layer's buffers: qkv rows [T, 6144], the rotary step's rows [T, 5120], the output [T, 4096].
struct Layer {
  std::vector<uint16_t> qkv = std::vector<uint16_t>(kT * kQkvRow), rotated = std::vector<uint16_t>(kT * kRotRow),
                        out = std::vector<uint16_t>(kT * kHq * kE);
  int64_t positions[kT] = {};
  uint16_t table[16 * kE] = {};

  ReshapeAndCacheParams rotation() {
    ReshapeAndCacheParams r;
    r.num_tokens = kT, r.head_size = kE, r.block_size = 1, r.heads_q = kHq + kHk;
    r.query = qkv.data(), r.query_stride[0] = kQkvRow, r.query_stride[1] = kE;
    r.query_out = rotated.data(), r.query_out_stride[0] = kRotRow, r.query_out_stride[1] = kE;
    r.positions = positions, r.cos_sin_cache = table, r.cos_sin_rows = 16, r.cos_sin_stride = kE, r.rotary_dim = kE;
    return r;
  }
  AttentionParams attention() {  // q = rotated[:, :32], k = rotated[:, 32:], v = qkv[:, 40 * E:]
    AttentionParams a;
    a.q = rotated.data(), a.k = rotated.data() + kHq * kE, a.v = qkv.data() + (kHq + kHk) * kE, a.out = out.data();
    a.B = 1, a.Hq = kHq, a.Hk = kHk, a.Sq = a.Sk = kT, a.E = a.Ev = kE;
    for (auto* s : {&a.q_stride, &a.k_stride}) (*s)[0] = kT * kRotRow, (*s)[1] = kE, (*s)[2] = kRotRow, (*s)[3] = 1;
    a.v_stride[0] = kT * kQkvRow, a.v_stride[1] = kE, a.v_stride[2] = kQkvRow, a.v_stride[3] = 1;
    a.o_stride[0] = kT * kHq * kE, a.o_stride[1] = kE, a.o_stride[2] = kHq * kE, a.o_stride[3] = 1;
    a.causal = true, a.scale = 0.088f;
    return a;
  }
};

void refused(const AttentionParams& a, const AttentionRotary* r, const std::string& why) {
  const char* got = ShortAttentionUnsupported(a, r);
  REQUIRE(got != nullptr);
  CHECK(std::string(got).find(why) != std::string::npos);
}

TEST_CASE("short attention: what it takes and what it refuses") {
  Layer l;
  AttentionParams a = l.attention();
  CHECK(ShortAttentionUnsupported(a, nullptr) == nullptr);
  a.Sk = kShortAttentionMaxKeys + 1;
  refused(a, nullptr, "more keys");
  a = l.attention(), a.mask_dtype = DType::BOOL;
  refused(a, nullptr, "mask");
  a = l.attention(), a.dtype = DType::F32;
  refused(a, nullptr, "bf16 or f16");
  a = l.attention(), a.E = a.Ev = 256;
  refused(a, nullptr, "up to 128");
  a = l.attention(), a.Ev = 64;
  refused(a, nullptr, "up to 128");
  a = l.attention(), a.k_stride[3] = 2;
  refused(a, nullptr, "contiguous");
  a = l.attention(), a.v_stride[2] = kQkvRow + 1;
  refused(a, nullptr, "4-byte");
  a = l.attention(), a.out_dtype = DType::F8E4M3FN;
  refused(a, nullptr, "scale");
  a = l.attention(), a.v = l.qkv.data() + (kHq + kHk) * kE + 1;
  refused(a, nullptr, "4-byte");
  a = l.attention(), a.q_stride[2] = kRotRow + 1, a.Hq = 16 * kHk;  // odd rows, 16 query heads per KV head
  CHECK(ShortAttentionUnsupported(a, nullptr) == nullptr);
  AttentionRotary r;
  r.positions = l.positions, r.cos_sin_cache = l.table, r.cos_sin_rows = 16, r.cos_sin_stride = kE, r.rotary_dim = kE;
  CHECK(ShortAttentionUnsupported(l.attention(), &r) == nullptr);
  a = l.attention(), a.Sk = kT - 1;
  refused(a, &r, "other keys than queries");
  r.rotary_dim = kE + 2;
  refused(l.attention(), &r, "rotary_dim");
  r.rotary_dim = 6, r.neox = false;  // partial GPT-J rotary
  CHECK(ShortAttentionUnsupported(l.attention(), &r) == nullptr);
}

TEST_CASE("rotary prologue: the attention reads the rotation's sources") {
  Layer l;
  const auto fused = RotatedAttentionOf(l.rotation(), l.attention());
  REQUIRE(fused.has_value());
  const AttentionParams& f = fused->first;
  CHECK(f.q == l.qkv.data());
  CHECK(f.k == l.qkv.data() + kHq * kE);
  CHECK(f.v == l.qkv.data() + (kHq + kHk) * kE);
  CHECK(f.q_stride[1] == kE);
  CHECK(f.q_stride[2] == kQkvRow);
  CHECK(f.k_stride[2] == kQkvRow);
  CHECK(fused->second.positions == l.positions);
  CHECK(fused->second.rotary_dim == kE);
}

TEST_CASE("rotary prologue: views it does not take") {
  Layer l;
  AttentionParams a = l.attention();
  a.q = l.rotated.data() + 3;  // not at a head's start
  CHECK_FALSE(RotatedAttentionOf(l.rotation(), a));
  a = l.attention(), a.k = l.rotated.data() + (kHq + 1) * kE;  // its heads run past the rotated rows
  CHECK_FALSE(RotatedAttentionOf(l.rotation(), a));
  a = l.attention(), a.q_stride[2] = kRotRow * 2;  // every other token
  CHECK_FALSE(RotatedAttentionOf(l.rotation(), a));
  a = l.attention(), a.Sq = a.Sk = kT - 1;  // not the rotation's tokens
  CHECK_FALSE(RotatedAttentionOf(l.rotation(), a));
  a = l.attention(), a.k = l.qkv.data() + kHq * kE;  // k not rotated by this step
  CHECK_FALSE(RotatedAttentionOf(l.rotation(), a));
  a = l.attention(), a.out = l.qkv.data() + 5;  // the output would overwrite the sources it reads
  CHECK_FALSE(RotatedAttentionOf(l.rotation(), a));
  ReshapeAndCacheParams in_place = l.rotation();
  in_place.query_out = nullptr;
  CHECK_FALSE(RotatedAttentionOf(in_place, l.attention()));
}

}  // namespace
}  // namespace fxfuse::runtime
