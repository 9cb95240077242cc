// GPU tests of the sm90 attention kernels against the float64 CPU reference on fresh random
// inputs: prefill (dense in two layouts, varlen, causal top-left and bottom-right, GQA 1/4/8,
// head sizes 64/128, lengths off the 128-row tiles) and decode (contiguous and paged caches,
// 1..several query tokens, forced and automatic splits), bf16/fp16 outputs and FP8 outputs with
// saturation. Outputs (and a guard region after them) are poisoned with NaN bytes first.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention/attention.h"
#include "tests/kernels/attention/reference_attention.h"
#include "kernels/reference/numerics.h"

namespace {

using fxfuse::attention::DecodeParams;
using fxfuse::attention::DType;
using fxfuse::attention::PrefillParams;
using fxfuse::attention::testing::AttendRow;
namespace nref = fxfuse::kernels::reference;

#define CUDA_REQUIRE(expr)                                                          \
  do {                                                                              \
    const cudaError_t err_ = (expr);                                                \
    INFO(#expr << ": " << cudaGetErrorName(err_) << ": " << cudaGetErrorString(err_)); \
    REQUIRE(err_ == cudaSuccess);                                                   \
  } while (0)

constexpr size_t kGuard = 256;

struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(n) { CUDA_REQUIRE(cudaMalloc(&p, n + kGuard)); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

uint64_t nextSeed() {
  static uint64_t s = 0xA77E0000;
  return ++s;
}

// Random normal D16 tensor: host floats (exactly representable) and device copy.
struct D16Tensor {
  std::vector<float> host;
  DevBuf dev;
  D16Tensor(size_t n, DType dt, std::mt19937_64& rng) : host(n), dev(n * 2) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) {
      const float x = nd(rng);
      bits[i] = dt == DType::BF16 ? nref::FloatToBFloat16Bits(x) : nref::FloatToHalfBits(x);
      host[i] = dt == DType::BF16 ? nref::BFloat16BitsToFloat(bits[i]) : nref::HalfBitsToFloat(bits[i]);
    }
    CUDA_REQUIRE(cudaMemcpy(dev.p, bits.data(), n * 2, cudaMemcpyHostToDevice));
  }
};

// Compares the device output with the reference rows. out_index(row) gives the element offset
// of row `row`'s first element; every element must be written and the guard stay poisoned.
void compareOutput(const DevBuf& out, size_t out_elems, DType in_dt, bool fp8, float out_scale,
                   const std::vector<double>& ref, const std::vector<int64_t>& row_offsets, int head_size,
                   const std::string& what) {
  const size_t esz = fp8 ? 1 : 2;
  std::vector<uint8_t> raw(out_elems * esz + kGuard);
  CUDA_REQUIRE(cudaMemcpy(raw.data(), out.p, raw.size(), cudaMemcpyDeviceToHost));
  for (size_t i = out_elems * esz; i < raw.size(); ++i) {
    INFO(what << ": guard byte " << i - out_elems * esz << " overwritten");
    REQUIRE(raw[i] == 0xFF);
  }
  double err2 = 0, ref2 = 0;
  int bad = 0, saturated = 0;
  std::ostringstream first;
  for (size_t r = 0; r < row_offsets.size(); ++r) {
    for (int e = 0; e < head_size; ++e) {
      const double want = ref[r * static_cast<size_t>(head_size) + static_cast<size_t>(e)];
      const size_t idx = static_cast<size_t>(row_offsets[r] + e);
      double got;
      if (fp8) {
        got = nref::E4m3BitsToFloat(raw[idx]);
      } else {
        uint16_t b;
        std::memcpy(&b, &raw[idx * 2], 2);
        got = in_dt == DType::BF16 ? nref::BFloat16BitsToFloat(b) : nref::HalfBitsToFloat(b);
      }
      bool ok;
      if (fp8) {
        // The kernel's own error (P rounded to 16 bits) is ~0.01 in o units, i.e. 0.01 / scale
        // after scaling; e4m3 rounding adds up to 1/16 relative.
        const double q = want / out_scale;
        const double expect = std::max(-448.0, std::min(448.0, q));
        const double tol_q = (0.01 + 0.01 * std::fabs(want)) / out_scale;
        if (std::fabs(q) - tol_q > 448) {
          ++saturated;
          ok = got == expect;
        } else {
          ok = std::isfinite(got) && std::fabs(got - expect) <= 0.07 * std::fabs(expect) + tol_q;
        }
        err2 += (got - expect) * (got - expect);
        ref2 += expect * expect;
      } else {
        const double tol = in_dt == DType::BF16 ? 0.02 + 0.02 * std::fabs(want) : 0.005 + 0.005 * std::fabs(want);
        ok = std::isfinite(got) && std::fabs(got - want) <= tol;
        err2 += (got - want) * (got - want);
        ref2 += want * want;
      }
      if (!ok && bad++ < 5) first << " [row " << r << " col " << e << " got " << got << " want " << want << "]";
    }
  }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  INFO(what << ": " << bad << " bad elements" << first.str() << "; rel L2 " << rel << "; saturated " << saturated);
  CHECK(bad == 0);
  CHECK(rel < (fp8 ? 4e-2 : in_dt == DType::BF16 ? 1e-2 : 3e-3));
}

// ------------------------------------------------------------------------------- prefill

enum class Layout { kBSHD, kBHSD, kVarlen };

struct PrefillCase {
  DType dt = DType::BF16;
  Layout layout = Layout::kBSHD;
  int hq = 8, hk = 8, E = 128;
  std::vector<int> sq, sk;  // per sequence (dense: all equal)
  bool causal = false, bottom_right = false, fp8 = false;
  float out_scale = 1.0f;
};

std::string describe(const PrefillCase& c) {
  std::ostringstream s;
  s << (c.dt == DType::BF16 ? "bf16" : "fp16") << " layout " << static_cast<int>(c.layout) << " hq " << c.hq << " hk "
    << c.hk << " E " << c.E << " sq";
  for (int x : c.sq) s << " " << x;
  s << " sk";
  for (int x : c.sk) s << " " << x;
  s << (c.causal ? (c.bottom_right ? " causal-br" : " causal") : "") << (c.fp8 ? " fp8" : "");
  return s.str();
}

void runPrefill(const PrefillCase& c) {
  const uint64_t seed = nextSeed();
  INFO("seed " << seed << " case " << describe(c));
  std::mt19937_64 rng(seed);
  const int B = static_cast<int>(c.sq.size());
  const int E = c.E;
  const bool varlen = c.layout == Layout::kVarlen;
  const int max_q = *std::max_element(c.sq.begin(), c.sq.end());
  const int max_k = *std::max_element(c.sk.begin(), c.sk.end());
  std::vector<int> cu_q(B + 1, 0), cu_k(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    cu_q[b + 1] = cu_q[b] + c.sq[b];
    cu_k[b + 1] = cu_k[b] + c.sk[b];
  }
  // Token extents per batch entry (dense: max; varlen: one packed sequence).
  const int64_t tq = varlen ? cu_q[B] : max_q, tk = varlen ? cu_k[B] : max_k;
  const int64_t nb = varlen ? 1 : B;
  auto strides = [&](int H, int64_t T, int64_t (&st)[3]) {
    if (c.layout == Layout::kBHSD) {
      st[0] = H * T * E, st[1] = T * E, st[2] = E;
    } else {
      st[0] = T * H * E, st[1] = E, st[2] = static_cast<int64_t>(H) * E;
    }
    if (varlen) st[0] = 0;
  };
  PrefillParams p;
  strides(c.hq, tq, p.q_stride);
  strides(c.hk, tk, p.k_stride);
  strides(c.hk, tk, p.v_stride);
  strides(c.hq, tq, p.o_stride);
  D16Tensor q(static_cast<size_t>(nb * c.hq * tq * E), c.dt, rng);
  D16Tensor k(static_cast<size_t>(nb * c.hk * tk * E), c.dt, rng);
  D16Tensor v(static_cast<size_t>(nb * c.hk * tk * E), c.dt, rng);
  const size_t out_elems = static_cast<size_t>(nb * c.hq * tq * E);
  DevBuf out(out_elems * (c.fp8 ? 1 : 2));
  CUDA_REQUIRE(cudaMemset(out.p, 0xFF, out.bytes + kGuard));
  DevBuf d_cu(2 * (B + 1) * sizeof(int));
  CUDA_REQUIRE(cudaMemcpy(d_cu.p, cu_q.data(), (B + 1) * sizeof(int), cudaMemcpyHostToDevice));
  CUDA_REQUIRE(cudaMemcpy(static_cast<int*>(d_cu.p) + B + 1, cu_k.data(), (B + 1) * sizeof(int), cudaMemcpyHostToDevice));
  DevBuf d_scale(sizeof(float));
  CUDA_REQUIRE(cudaMemcpy(d_scale.p, &c.out_scale, sizeof(float), cudaMemcpyHostToDevice));

  p.dtype = c.dt;
  p.q = q.dev.p;
  p.k = k.dev.p;
  p.v = v.dev.p;
  p.out = out.p;
  p.batch = B;
  p.heads_q = c.hq;
  p.heads_kv = c.hk;
  p.head_size = E;
  p.seqlen_q = max_q;
  p.seqlen_k = max_k;
  if (varlen) {
    p.cu_seqlens_q = static_cast<const int*>(d_cu.p);
    p.cu_seqlens_k = static_cast<const int*>(d_cu.p) + B + 1;
    p.total_q = tq;
    p.total_k = tk;
  }
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  p.causal = c.causal;
  p.causal_bottom_right = c.bottom_right;
  p.out_dtype = c.fp8 ? DType::F8E4M3FN : c.dt;
  p.out_scale = c.fp8 ? static_cast<const float*>(d_scale.p) : nullptr;
  INFO("check: " << fxfuse::attention::CheckPrefill(p));
  REQUIRE(fxfuse::attention::CheckPrefill(p).empty());
  CUDA_REQUIRE(fxfuse::attention::LaunchPrefill(p, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());

  // Reference rows in the order (b, h, i); element offsets from the layout.
  std::vector<double> ref;
  std::vector<int64_t> offs;
  std::vector<double> row(static_cast<size_t>(E));
  const int group = c.hq / c.hk;
  for (int b = 0; b < B; ++b) {
    const int64_t qb = varlen ? 0 : b, qt0 = varlen ? cu_q[b] : 0, kt0 = varlen ? cu_k[b] : 0;
    for (int h = 0; h < c.hq; ++h) {
      const int hk = h / group;
      for (int i = 0; i < c.sq[b]; ++i) {
        std::vector<const float*> keys, vals;
        const int shift = c.causal && c.bottom_right ? c.sk[b] - c.sq[b] : 0;
        for (int j = 0; j < c.sk[b]; ++j) {
          if (c.causal && j > i + shift) break;
          const int64_t ko = qb * p.k_stride[0] + hk * p.k_stride[1] + (kt0 + j) * p.k_stride[2];
          keys.push_back(&k.host[static_cast<size_t>(ko)]);
          vals.push_back(&v.host[static_cast<size_t>(ko)]);
        }
        const int64_t qo = qb * p.q_stride[0] + h * p.q_stride[1] + (qt0 + i) * p.q_stride[2];
        AttendRow(&q.host[static_cast<size_t>(qo)], keys, vals, E, p.softmax_scale, row.data());
        ref.insert(ref.end(), row.begin(), row.end());
        offs.push_back(qb * p.o_stride[0] + h * p.o_stride[1] + (qt0 + i) * p.o_stride[2]);
      }
    }
  }
  // Dense batches shorter than the max leave rows unwritten: only full batches are used here.
  compareOutput(out, out_elems, c.dt, c.fp8, c.out_scale, ref, offs, E, describe(c));
}

TEST_CASE("prefill: dense, GQA 1/4/8, head 64/128, odd lengths, causal and not") {
  struct Shape {
    int hq, hk, E, s;
  };
  const Shape shapes[] = {{4, 4, 128, 1}, {8, 2, 128, 77}, {8, 1, 64, 128}, {8, 8, 64, 300}, {16, 2, 128, 257}, {8, 1, 128, 129}};
  for (const Shape& s : shapes)
    for (bool causal : {false, true})
      for (Layout layout : {Layout::kBSHD, Layout::kBHSD}) {
        PrefillCase c;
        c.layout = layout;
        c.hq = s.hq;
        c.hk = s.hk;
        c.E = s.E;
        c.sq = c.sk = {s.s, s.s};
        c.causal = causal;
        runPrefill(c);
      }
}

TEST_CASE("prefill: fp16 inputs") {
  for (bool causal : {false, true}) {
    PrefillCase c;
    c.dt = DType::F16;
    c.hq = 8;
    c.hk = 2;
    c.E = 128;
    c.sq = c.sk = {200};
    c.causal = causal;
    runPrefill(c);
    c.E = 64;
    runPrefill(c);
  }
}

TEST_CASE("prefill: varlen batch, causal across tile boundaries, bottom-right with a cached prefix") {
  PrefillCase c;
  c.layout = Layout::kVarlen;
  c.hq = 8;
  c.hk = 2;
  c.sq = c.sk = {1, 130, 257, 64, 384};
  for (int E : {64, 128})
    for (bool causal : {false, true}) {
      c.E = E;
      c.causal = causal;
      runPrefill(c);
    }
  c.E = 128;
  c.causal = true;
  c.bottom_right = true;
  c.sq = {5, 100, 129};
  c.sk = {300, 100, 700};
  runPrefill(c);
}

TEST_CASE("prefill: FP8 output, in range and saturated") {
  PrefillCase c;
  c.hq = 8;
  c.hk = 1;
  c.sq = c.sk = {150};
  c.fp8 = true;
  c.out_scale = 0.01f;  // |o| up to ~1-2: q = o / 0.01 in range for small values, some > 448
  for (bool causal : {false, true}) {
    c.causal = causal;
    runPrefill(c);
  }
  c.out_scale = 0.0005f;  // nearly everything saturates
  runPrefill(c);
  c.layout = Layout::kVarlen;
  c.sq = c.sk = {33, 200};
  c.out_scale = 0.004f;
  runPrefill(c);
}

// -------------------------------------------------------------------------------- decode

struct DecodeCase {
  DType dt = DType::BF16;
  int hq = 32, hk = 8, E = 128, nq = 1;
  std::vector<int> ctx;
  bool paged = false;
  int block_size = 16;
  int splits = 0;
  bool causal = true, fp8 = false;
  float out_scale = 1.0f;
};

void runDecode(const DecodeCase& c) {
  const uint64_t seed = nextSeed();
  std::ostringstream what;
  what << "decode hq " << c.hq << " hk " << c.hk << " E " << c.E << " nq " << c.nq << (c.paged ? " paged" : "")
       << " splits " << c.splits << (c.fp8 ? " fp8" : "") << " ctx";
  for (int x : c.ctx) what << " " << x;
  INFO("seed " << seed << " " << what.str());
  std::mt19937_64 rng(seed);
  const int B = static_cast<int>(c.ctx.size()), E = c.E;
  const int max_ctx = *std::max_element(c.ctx.begin(), c.ctx.end());
  DecodeParams p;
  p.dtype = c.dt;
  p.batch = B;
  p.heads_q = c.hq;
  p.heads_kv = c.hk;
  p.head_size = E;
  p.num_query_tokens = c.nq;
  // q/out [B, nq, Hq, E]; strides (batch, head, token).
  p.q_stride[0] = p.o_stride[0] = static_cast<int64_t>(c.nq) * c.hq * E;
  p.q_stride[1] = p.o_stride[1] = E;
  p.q_stride[2] = p.o_stride[2] = static_cast<int64_t>(c.hq) * E;
  std::vector<int> table;
  int64_t cache_tokens;
  int max_blocks = 0;
  if (c.paged) {
    max_blocks = (max_ctx + c.block_size - 1) / c.block_size;
    const int nblocks = B * max_blocks + 3;
    std::vector<int> perm(static_cast<size_t>(nblocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(perm.begin(), perm.begin() + B * max_blocks);
    cache_tokens = static_cast<int64_t>(nblocks) * c.block_size;
    p.k_stride[0] = static_cast<int64_t>(c.block_size) * c.hk * E;
  } else {
    cache_tokens = static_cast<int64_t>(B) * max_ctx;
    p.k_stride[0] = static_cast<int64_t>(max_ctx) * c.hk * E;
  }
  p.k_stride[1] = static_cast<int64_t>(c.hk) * E;
  p.k_stride[2] = E;
  std::copy(p.k_stride, p.k_stride + 3, p.v_stride);
  D16Tensor q(static_cast<size_t>(B) * c.nq * c.hq * E, c.dt, rng);
  D16Tensor k(static_cast<size_t>(cache_tokens) * c.hk * E, c.dt, rng);
  D16Tensor v(static_cast<size_t>(cache_tokens) * c.hk * E, c.dt, rng);
  const size_t out_elems = static_cast<size_t>(B) * c.nq * c.hq * E;
  DevBuf out(out_elems * (c.fp8 ? 1 : 2));
  CUDA_REQUIRE(cudaMemset(out.p, 0xFF, out.bytes + kGuard));
  DevBuf d_table(std::max<size_t>(table.size(), 1) * sizeof(int));
  if (!table.empty()) CUDA_REQUIRE(cudaMemcpy(d_table.p, table.data(), table.size() * sizeof(int), cudaMemcpyHostToDevice));
  DevBuf d_ctx(static_cast<size_t>(B) * sizeof(int));
  CUDA_REQUIRE(cudaMemcpy(d_ctx.p, c.ctx.data(), B * sizeof(int), cudaMemcpyHostToDevice));
  DevBuf d_scale(sizeof(float));
  CUDA_REQUIRE(cudaMemcpy(d_scale.p, &c.out_scale, sizeof(float), cudaMemcpyHostToDevice));
  p.q = q.dev.p;
  p.k_cache = k.dev.p;
  p.v_cache = v.dev.p;
  p.out = out.p;
  if (c.paged) {
    p.block_table = static_cast<const int*>(d_table.p);
    p.block_table_stride = max_blocks;
    p.block_size = c.block_size;
  }
  p.context_lens = static_cast<const int*>(d_ctx.p);
  p.max_context_len = max_ctx;
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  p.causal = c.causal;
  p.out_dtype = c.fp8 ? DType::F8E4M3FN : c.dt;
  p.out_scale = c.fp8 ? static_cast<const float*>(d_scale.p) : nullptr;
  p.num_splits = c.splits;
  int dev = 0, sms = 0;
  CUDA_REQUIRE(cudaGetDevice(&dev));
  CUDA_REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t ws_bytes = fxfuse::attention::DecodeWorkspaceBytes(p, sms);
  DevBuf ws(std::max<size_t>(ws_bytes, 16));
  CUDA_REQUIRE(cudaMemset(ws.p, 0xFF, ws.bytes));
  p.workspace = ws_bytes ? ws.p : nullptr;
  INFO("check: " << fxfuse::attention::CheckDecode(p) << " splits " << fxfuse::attention::DecodeSplits(p, sms));
  REQUIRE(fxfuse::attention::CheckDecode(p).empty());
  CUDA_REQUIRE(fxfuse::attention::LaunchDecode(p, nullptr));
  CUDA_REQUIRE(cudaDeviceSynchronize());

  auto tokenOffset = [&](int b, int tok, int h) -> int64_t {
    if (c.paged) {
      const int blk = table[static_cast<size_t>(b * max_blocks + tok / c.block_size)];
      return static_cast<int64_t>(blk) * p.k_stride[0] + (tok % c.block_size) * p.k_stride[1] + h * p.k_stride[2];
    }
    return b * p.k_stride[0] + tok * p.k_stride[1] + h * p.k_stride[2];
  };
  std::vector<double> ref, row(static_cast<size_t>(E));
  std::vector<int64_t> offs;
  const int group = c.hq / c.hk;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < c.hq; ++h)
      for (int t = 0; t < c.nq; ++t) {
        const int last = c.causal ? c.ctx[b] - c.nq + t : c.ctx[b] - 1;
        std::vector<const float*> keys, vals;
        for (int j = 0; j <= last && j < c.ctx[b]; ++j) {
          const int64_t o = tokenOffset(b, j, h / group);
          keys.push_back(&k.host[static_cast<size_t>(o)]);
          vals.push_back(&v.host[static_cast<size_t>(o)]);
        }
        const int64_t qo = b * p.q_stride[0] + h * p.q_stride[1] + t * p.q_stride[2];
        AttendRow(&q.host[static_cast<size_t>(qo)], keys, vals, E, p.softmax_scale, row.data());
        ref.insert(ref.end(), row.begin(), row.end());
        offs.push_back(b * p.o_stride[0] + h * p.o_stride[1] + t * p.o_stride[2]);
      }
  compareOutput(out, out_elems, c.dt, c.fp8, c.out_scale, ref, offs, E, what.str());
}

TEST_CASE("decode: contiguous cache, GQA 1/4/8, forced and automatic splits") {
  struct Shape {
    int hq, hk, E;
  };
  for (const Shape& s : {Shape{8, 8, 128}, Shape{32, 8, 128}, Shape{16, 2, 64}})
    for (int splits : {1, 0, 7}) {
      DecodeCase c;
      c.hq = s.hq;
      c.hk = s.hk;
      c.E = s.E;
      c.ctx = {1, 100, 2049, 5000};
      c.splits = splits;
      runDecode(c);
    }
}

TEST_CASE("decode: paged cache, several query tokens, causal among them") {
  DecodeCase c;
  c.paged = true;
  c.ctx = {3, 700, 1500};
  for (int nq : {1, 3}) {
    c.nq = nq;
    for (int splits : {1, 0, 5}) {
      c.splits = splits;
      runDecode(c);
    }
  }
  c.block_size = 64;
  c.E = 64;
  c.hq = 16;
  c.hk = 2;
  c.nq = 2;
  c.causal = false;
  runDecode(c);
  c.E = 128;  // 64 rows per KV head (the largest row bucket)
  c.hq = 32;
  c.hk = 1;
  c.causal = true;
  c.splits = 0;
  runDecode(c);
}

TEST_CASE("decode: fp16 and FP8 output with saturation") {
  DecodeCase c;
  c.dt = DType::F16;
  c.ctx = {513, 3000};
  runDecode(c);
  c.dt = DType::BF16;
  c.fp8 = true;
  c.out_scale = 0.005f;
  for (int splits : {1, 0}) {
    c.splits = splits;
    runDecode(c);
  }
  c.out_scale = 0.0002f;
  runDecode(c);
}

}  // namespace
