// CPU tests of the sm90 attention parameter checks, the decode split choice and the plan-time
// selection (FitsSm90): each rejection names its reason.
#include <catch2/catch.hpp>

#include <string>

#include "kernels/attention/attention.h"

using namespace fxfuse::attention;

namespace {

alignas(16) char g_buf[4096];

PrefillParams goodPrefill() {
  PrefillParams p;
  p.q = p.k = p.v = g_buf;
  p.out = g_buf;
  p.batch = 2;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_size = 128;
  p.seqlen_q = p.seqlen_k = 1000;
  for (auto* s : {p.q_stride, p.k_stride, p.v_stride, p.o_stride}) {
    s[0] = 1000 * 32 * 128;
    s[1] = 128;
    s[2] = 32 * 128;
  }
  p.softmax_scale = 0.088f;
  return p;
}

DecodeParams goodDecode() {
  DecodeParams p;
  p.q = p.k_cache = p.v_cache = g_buf;
  p.out = g_buf;
  p.batch = 4;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_size = 128;
  p.max_context_len = 4096;
  p.k_stride[0] = p.v_stride[0] = 4096 * 8 * 128;
  p.k_stride[1] = p.v_stride[1] = 8 * 128;
  p.k_stride[2] = p.v_stride[2] = 128;
  p.softmax_scale = 0.088f;
  return p;
}

}  // namespace

TEST_CASE("CheckPrefill accepts a GQA bf16 problem and names each rejection") {
  CHECK(CheckPrefill(goodPrefill()) == "");
  PrefillParams p = goodPrefill();
  p.head_size = 96;
  CHECK(CheckPrefill(p).find("head size 96") != std::string::npos);
  p = goodPrefill();
  p.heads_kv = 5;
  CHECK(CheckPrefill(p).find("multiple of heads_kv") != std::string::npos);
  p = goodPrefill();
  p.q = g_buf + 2;
  CHECK(CheckPrefill(p).find("16-byte aligned") != std::string::npos);
  p = goodPrefill();
  p.k_stride[2] = 130;
  CHECK(CheckPrefill(p).find("k stride 130") != std::string::npos);
  p = goodPrefill();
  p.out_dtype = DType::F8E4M3FN;
  CHECK(CheckPrefill(p).find("out_scale") != std::string::npos);
  p.out_scale = reinterpret_cast<const float*>(g_buf);
  CHECK(CheckPrefill(p) == "");
  p = goodPrefill();
  p.out_dtype = DType::F16;
  CHECK(CheckPrefill(p).find("differs") != std::string::npos);
  p = goodPrefill();
  p.cu_seqlens_q = reinterpret_cast<const int*>(g_buf);
  CHECK(CheckPrefill(p).find("go together") != std::string::npos);
  p.cu_seqlens_k = reinterpret_cast<const int*>(g_buf);
  CHECK(CheckPrefill(p).find("total_q") != std::string::npos);
  p.total_q = p.total_k = 5000;
  CHECK(CheckPrefill(p) == "");
  p = goodPrefill();
  p.o_stride[2] = 4095;
  CHECK(CheckPrefill(p).find("multiple of 16 bytes") != std::string::npos);
}

TEST_CASE("LaunchPrefill and LaunchDecode refuse bad params without touching the GPU") {
  PrefillParams p = goodPrefill();
  p.head_size = 80;
  CHECK(LaunchPrefill(p, nullptr) == cudaErrorInvalidValue);
  DecodeParams d = goodDecode();
  d.heads_q = 7;
  CHECK(LaunchDecode(d, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("CheckDecode: rows per KV head, paging and strides") {
  CHECK(CheckDecode(goodDecode()) == "");
  DecodeParams p = goodDecode();
  p.num_query_tokens = 17;  // 4 * 17 rows > 64
  CHECK(CheckDecode(p).find("exceeds 64") != std::string::npos);
  p = goodDecode();
  p.block_table = reinterpret_cast<const int*>(g_buf);
  CHECK(CheckDecode(p).find("block_size") != std::string::npos);
  p.block_size = 16;
  CHECK(CheckDecode(p) == "");
  p = goodDecode();
  p.k_stride[2] = 100;
  CHECK(CheckDecode(p).find("multiples of 8") != std::string::npos);
}

TEST_CASE("DecodeSplits fills the machine and keeps >= 256 keys per split") {
  DecodeParams p = goodDecode();  // 4 rows per KV head: three CTAs per SM, 396 slots
  p.batch = 1;
  p.max_context_len = 32768;
  CHECK(DecodeSplits(p, 132) == 47);  // 376 CTAs of 704 keys in one wave
  p.max_context_len = 1024;
  CHECK(DecodeSplits(p, 132) == 4);  // 256 keys per split at least
  p.batch = 16;
  p.max_context_len = 8192;
  CHECK(DecodeSplits(p, 132) == 3);  // 384 CTAs: one wave
  p.batch = 64;
  p.max_context_len = 32768;
  CHECK(DecodeSplits(p, 132) == 3);  // 4 waves of 1536 CTAs beat 2 waves of 512
  p.batch = 33;
  p.max_context_len = 512;
  CHECK(DecodeSplits(p, 132) == 1);  // 264 CTAs fit one wave unsplit
  CHECK(DecodeWorkspaceBytes(p, 132) == 0);
  p.num_splits = 3;
  CHECK(DecodeSplits(p, 132) == 3);
  CHECK(DecodeWorkspaceBytes(p, 132) == size_t{3} * 33 * 32 * 1 * 130 * 4);
}

TEST_CASE("FitsSm90: the plan-time choice and its reasons") {
  AttentionShapeFacts f;
  f.head_size = f.head_size_v = 128;
  f.d16_inputs = true;
  f.last_dim_contiguous = true;
  f.stride_gcd_elems = 128;
  f.out_ok = true;
  std::string why;
  CHECK(FitsSm90(f, &why));
  CHECK(why.empty());
  AttentionShapeFacts g = f;
  g.has_mask = true;
  CHECK_FALSE(FitsSm90(g, &why));
  CHECK(why == "arbitrary attention mask");
  g = f;
  g.head_size = g.head_size_v = 256;
  CHECK_FALSE(FitsSm90(g, &why));
  CHECK(why == "head size is not 64 or 128");
  g = f;
  g.stride_gcd_elems = 100;
  CHECK_FALSE(FitsSm90(g, &why));
  g = f;
  g.stride_gcd_elems = -1;  // unknown (symbolic): decided at run time
  CHECK(FitsSm90(g, &why));
  g = f;
  g.d16_inputs = false;
  CHECK_FALSE(FitsSm90(g, &why));
  CHECK(why == "inputs are not all bf16 or all fp16");
}
