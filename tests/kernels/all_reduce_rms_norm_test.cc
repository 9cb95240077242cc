// CPU tests (CI, no GPU) of the fused all-reduce + RMSNorm API: Check(), the thresholds table,
// algorithm resolution, the workspace size, and the CPU reference of the simulated all-reduce.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/all_reduce_rms_norm.h"
#include "kernels/allreduce/workspace_layout.h"
#include "kernels/reference/all_reduce_rms_norm_reference.h"
#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"

namespace fxfuse::kernels {
namespace {

alignas(16) uint16_t g_in[8 * 4096];
alignas(16) uint16_t g_out[8 * 4096];
alignas(16) uint16_t g_res[8 * 4096];
alignas(16) uint8_t g_ws[4][1024];

bool Mentions(const Status& s, const std::string& text) {
  return !s.ok() && s.code() == StatusCode::kInvalidArgument && s.message().find(text) != std::string::npos;
}

AllReduceRmsNormParams Valid(int world_size = 2) {
  AllReduceRmsNormParams p;
  p.num_tokens = 8;
  p.hidden_size = 4096;
  p.input = g_in;
  p.residual = g_res;
  p.norm_out = g_out;
  p.workspace.world_size = world_size;
  p.workspace.rank = world_size - 1;
  for (int r = 0; r < world_size; ++r) p.workspace.peers[r] = g_ws[r % 4];
  p.workspace.max_tokens = 8;
  p.workspace.hidden_size = 4096;
  p.workspace.bytes = AllReduceWorkspaceBytes(world_size, 8, 4096);
  return p;
}

TEST_CASE("AllReduceRmsNormParams::Check") {
  CHECK(Valid().Check().ok());
  CHECK(Valid(1).Check().ok());
  AllReduceRmsNormParams p = Valid();
  p.workspace.world_size = 9;
  CHECK(Mentions(p.Check(), "world_size"));
  p = Valid();
  p.workspace.rank = 2;
  CHECK(Mentions(p.Check(), "rank"));
  p = Valid();
  p.workspace.peers[1] = nullptr;
  CHECK(Mentions(p.Check(), "peers[1] is null"));
  p = Valid();
  p.workspace.peers[0] = g_ws[0] + 2;
  CHECK(Mentions(p.Check(), "16-byte aligned"));
  p = Valid();
  p.workspace.bytes -= 1;
  CHECK(Mentions(p.Check(), "AllReduceWorkspaceBytes"));
  p = Valid();
  p.dtype = DType::F32;
  CHECK(Mentions(p.Check(), "dtype"));
  p = Valid();
  p.quant_out = g_out;
  CHECK(Mentions(p.Check(), "needs scale"));
  p = Valid();
  p.input = nullptr;
  CHECK(Mentions(p.Check(), "input is null"));
  p.num_tokens = 0;
  CHECK(p.Check().ok());
  p = Valid();
  p.epsilon = -1.0f;
  CHECK(Mentions(p.Check(), "epsilon"));
  p = Valid();
  p.residual = g_in;
  CHECK(Mentions(p.Check(), "alias"));
  p = Valid();
  p.norm_out = g_res;  // the new residual and n would overwrite each other
  CHECK(Mentions(p.Check(), "alias"));
  p = Valid();
  p.allreduce_out = g_res;
  CHECK(Mentions(p.Check(), "alias"));
  p = Valid();
  p.norm_out = g_in;  // n into the input: allowed (vLLM's fused-add pattern)
  p.allreduce_out = nullptr;
  CHECK(p.Check().ok());
  p = Valid();
  p.hidden_size = 0;
  CHECK(Mentions(p.Check(), "hidden_size"));
  p = Valid();
  p.num_tokens = -1;
  CHECK(Mentions(p.Check(), "num_tokens"));
  p = Valid();
  p.max_ctas = -1;
  CHECK(Mentions(p.Check(), "max_ctas"));
  // World size 1 needs no workspace at all.
  p = Valid(1);
  p.workspace = AllReduceWorkspace();
  CHECK(p.Check().ok());
}

TEST_CASE("thresholds table: one-shot, then two-shot, then NCCL, per world size") {
  for (int ws = 1; ws <= kMaxAllReduceRanks; ++ws) {
    for (int64_t h : {4096, 8192}) {
      int stage = 0;  // 0 one-shot, 1 two-shot, 2 fallback: never goes back as T grows
      bool saw_one_shot = false;
      for (int64_t t = 1; t <= 65536; t *= 2) {
        const AllReduceAlgorithm a = ChooseAllReduceAlgorithm(ws, t, h, DType::BF16);
        REQUIRE(a != AllReduceAlgorithm::kAuto);
        const int s = a == AllReduceAlgorithm::kOneShot ? 0 : a == AllReduceAlgorithm::kTwoShot ? 1 : 2;
        INFO("ws=" << ws << " H=" << h << " T=" << t << " " << AllReduceAlgorithmName(a));
        CHECK(s >= stage);
        stage = s;
        saw_one_shot = saw_one_shot || s == 0;
        if (ws == 1) CHECK(a == AllReduceAlgorithm::kOneShot);
      }
      CHECK(saw_one_shot);
      if (ws > 1) CHECK(stage == 2);  // large messages go to NCCL
    }
  }
  // Spot values (kernels/allreduce/thresholds.cc): decode-sized calls are one-shot; at 8 ranks
  // the fused kernels stop at vLLM's 0.5 MB (32 tokens of H = 8192); at 2 ranks (measured on
  // two H200s, docs/benchmarks/allreduce_multigpu.md) one-shot up to 4 MiB, two-shot up to
  // 128 MiB (8192 tokens of H = 8192, where two-shot beat NCCL + add-norm 508 vs 593 us).
  CHECK(ChooseAllReduceAlgorithm(2, 1, 8192, DType::BF16) == AllReduceAlgorithm::kOneShot);
  CHECK(ChooseAllReduceAlgorithm(8, 8, 8192, DType::BF16) == AllReduceAlgorithm::kOneShot);
  CHECK(ChooseAllReduceAlgorithm(8, 32, 8192, DType::BF16) == AllReduceAlgorithm::kTwoShot);
  CHECK(ChooseAllReduceAlgorithm(8, 33, 8192, DType::BF16) == AllReduceAlgorithm::kNcclFallback);
  CHECK(ChooseAllReduceAlgorithm(2, 256, 8192, DType::BF16) == AllReduceAlgorithm::kOneShot);
  CHECK(ChooseAllReduceAlgorithm(2, 257, 8192, DType::BF16) == AllReduceAlgorithm::kTwoShot);
  CHECK(ChooseAllReduceAlgorithm(2, 8192, 8192, DType::BF16) == AllReduceAlgorithm::kTwoShot);
  CHECK(ChooseAllReduceAlgorithm(2, 8193, 8192, DType::BF16) == AllReduceAlgorithm::kNcclFallback);
  CHECK(std::string(AllReduceAlgorithmName(AllReduceAlgorithm::kTwoShot)) == "two_shot");
}

TEST_CASE("ResolveAllReduceAlgorithm: capacity, layout and world size 1") {
  AllReduceRmsNormParams p = Valid();
  p.workspace.max_tokens = 4096;
  p.workspace.bytes = AllReduceWorkspaceBytes(2, 4096, 4096);
  p.num_tokens = 1;
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kOneShot);
  p.num_tokens = 1024;  // 8 MiB: two-shot by the table
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kTwoShot);
  p.num_tokens = 4097;  // beyond the workspace rows
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kNcclFallback);
  p.num_tokens = 1024;
  p.algorithm = AllReduceAlgorithm::kOneShot;  // explicit, but 8 MiB exceed the one-shot region
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kNcclFallback);
  p.num_tokens = 512;  // 4 MiB: fits
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kOneShot);
  p = Valid();
  p.hidden_size = 4100;  // not a multiple of 8
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kNcclFallback);
  p = Valid();
  p.norm_out = g_out + 1;  // not 16-byte aligned
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kNcclFallback);
  p = Valid();
  p.algorithm = AllReduceAlgorithm::kNcclFallback;
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kNcclFallback);
  p = Valid(1);
  p.num_tokens = 1 << 20;  // world size 1: no capacity limit
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kOneShot);
}

TEST_CASE("workspace layout: regions fit and grow with the capacity") {
  const auto l = allreduce::WorkspaceLayout::For(8, 1024, 8192);
  CHECK(l.one_shot_offset % 16 == 0);
  CHECK(l.scatter_offset % 16 == 0);
  CHECK(l.gather_offset % 16 == 0);
  CHECK(l.FitsOneShot(256, 8192));   // 4 MiB
  CHECK(!l.FitsOneShot(257, 8192));
  CHECK(l.FitsTwoShot(1024, 8192));
  CHECK(!l.FitsTwoShot(1025, 8192));
  CHECK(AllReduceWorkspaceBytes(8, 2048, 8192) > AllReduceWorkspaceBytes(8, 1024, 8192));
  CHECK(AllReduceWorkspaceBytes(1, 1024, 8192) == allreduce::kControlBytes);
  // Every owner's rows fit its scatter region, for every T up to the capacity.
  for (int ws : {2, 3, 8}) {
    for (int64_t t = 0; t <= 100; ++t) {
      for (int o = 0; o < ws; ++o) {
        const int64_t rows = allreduce::OwnedRowBegin(t, ws, o + 1) - allreduce::OwnedRowBegin(t, ws, o);
        CHECK(rows <= (t + ws - 1) / ws);
      }
      CHECK(allreduce::OwnedRowBegin(t, ws, ws) == t);
    }
  }
}

TEST_CASE("reference all-reduce: fp32 sum in rank order, rounded once") {
  const DType bf16 = DType::BF16;
  const auto b = [](float v) { return reference::FloatToBFloat16Bits(v); };
  // 1 + 2^-8 + 2^-8: exact in fp32 (1 + 2^-7, a bf16 value); a bf16 running sum would stay at 1.
  const uint16_t r0[] = {b(1.0f), 0x8000, b(3.0f)};
  const uint16_t r1[] = {b(1.0f / 256), 0x8000, b(-3.0f)};
  const uint16_t r2[] = {b(1.0f / 256), 0x8000, 0x8000};
  const std::vector<uint16_t> a = reference::AllReduceSum({r0, r1, r2}, 3, bf16);
  CHECK(reference::BFloat16BitsToFloat(a[0]) == 1.0f + 1.0f / 128);
  CHECK(a[1] == 0x8000);  // -0 + -0 + -0 = -0: the sum starts from rank 0's value, not +0
  CHECK(a[2] == 0x0000);  // 3 - 3 = +0, then + -0 = +0
}

TEST_CASE("reference fused all-reduce == all-reduce then the RmsNorm and quant references") {
  const int64_t t = 3, h = 64;
  const DType dtype = DType::F16;
  std::vector<std::vector<uint16_t>> ins(4, std::vector<uint16_t>(t * h));
  std::vector<uint16_t> res(t * h), w(h);
  for (int r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < t * h; ++i) {
      ins[r][i] = reference::FloatToHalfBits(0.01f * static_cast<float>((i * 7 + r * 13) % 41) - 0.2f);
    }
  }
  for (int64_t i = 0; i < t * h; ++i) res[i] = reference::FloatToHalfBits(0.03f * static_cast<float>(i % 17) - 0.25f);
  for (int64_t j = 0; j < h; ++j) w[j] = reference::FloatToHalfBits(0.5f + 0.01f * static_cast<float>(j));
  const float scale = 0.002f;  // saturates some values

  std::vector<uint16_t> res_fused = res, a(t * h), n(t * h);
  std::vector<uint8_t> q(t * h);
  AllReduceRmsNormParams p;
  p.num_tokens = t;
  p.hidden_size = h;
  p.dtype = dtype;
  p.residual = res_fused.data();
  p.allreduce_out = a.data();
  p.weight = w.data();
  p.norm_out = n.data();
  p.quant_out = q.data();
  p.scale = &scale;
  REQUIRE(reference::AllReduceRmsNorm(p, {ins[0].data(), ins[1].data(), ins[2].data(), ins[3].data()}).ok());

  const std::vector<uint16_t> a_want =
      reference::AllReduceSum({ins[0].data(), ins[1].data(), ins[2].data(), ins[3].data()}, t * h, dtype);
  CHECK(a == a_want);
  std::vector<uint16_t> res_chain = res, n_chain(t * h);
  RmsNormParams norm;
  norm.num_tokens = t;
  norm.hidden_size = h;
  norm.dtype = dtype;
  norm.weight_dtype = dtype;
  norm.input = a_want.data();
  norm.weight = w.data();
  norm.output = n_chain.data();
  norm.residual = res_chain.data();
  norm.residual_variance = ResidualVariance::kRoundedSum;
  REQUIRE(reference::RmsNorm(norm).ok());
  CHECK(res_fused == res_chain);
  CHECK(n == n_chain);
  bool saturated = false;
  for (int64_t i = 0; i < t * h; ++i) {
    CHECK(q[i] == reference::QuantizeToE4m3(reference::HalfBitsToFloat(n[i]), scale, false));
    saturated = saturated || (q[i] & 0x7F) == 0x7E;  // ±448
  }
  CHECK(saturated);
}

}  // namespace
}  // namespace fxfuse::kernels
