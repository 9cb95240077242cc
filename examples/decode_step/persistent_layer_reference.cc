// The CPU reference of persistent_layer_bench.cu (persistent_layer_reference.h).
#include "examples/decode_step/persistent_layer_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"

namespace fxfuse::examples::persistent {
namespace {

namespace num = ::fxfuse::kernels::reference;

float bf16(uint16_t bits) { return num::BFloat16BitsToFloat(bits); }
float round16(float v) { return num::Round16(v, DType::BF16); }
uint8_t fp8(float v, float scale) { return num::QuantizeToE4m3(v, scale, /*divide=*/false); }

std::vector<uint16_t> bits(const std::vector<float>& values) {
  std::vector<uint16_t> b(values.size());
  for (size_t i = 0; i < values.size(); ++i) b[i] = num::FloatToBFloat16Bits(values[i]);  // exact: bf16 values
  return b;
}

template <typename T, typename ToFloat, typename Steps>
Distance distance(const std::vector<T>& got, const std::vector<T>& want, ToFloat&& value, Steps&& steps) {
  double err = 0, norm = 0;
  size_t far = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double g = value(got[i]), w = value(want[i]);
    err += (g - w) * (g - w), norm += w * w;
    far += std::llabs(steps(got[i], want[i])) > 1;
  }
  Distance d;
  d.relative_rms = got.size() == want.size() ? std::sqrt(err / std::max(norm, 1e-30)) : INFINITY;
  d.beyond_one_step = want.empty() ? 0 : static_cast<double>(far) / static_cast<double>(want.size());
  return d;
}

// out[m][n] = round16(sum_k x[m][k] * w[n][k] * (sx * sw)), x and w FP8, the sum in fp32.
std::vector<float> gemm(const std::vector<uint8_t>& x, const std::vector<uint8_t>& w, int batch, int g, float scale) {
  const int n = gemmN(g), k = gemmK(g);
  std::vector<float> lut(256), xf(x.size()), out(static_cast<size_t>(batch) * n);
  for (int i = 0; i < 256; ++i) lut[i] = num::E4m3BitsToFloat(static_cast<uint8_t>(i));
  for (size_t i = 0; i < x.size(); ++i) xf[i] = lut[x[i]];
  for (int r = 0; r < n; ++r) {
    const uint8_t* wr = w.data() + static_cast<int64_t>(r) * k;
    for (int m = 0; m < batch; ++m) {
      const float* xr = xf.data() + static_cast<int64_t>(m) * k;
      float acc = 0.f;
      for (int i = 0; i < k; ++i) acc += xr[i] * lut[wr[i]];
      out[static_cast<size_t>(m) * n + r] = round16(acc * scale);
    }
  }
  return out;
}

// residual = round16(x + residual) (add false: x), then the rows' FP8 normalized values
// fp8(round16(round16(z * inv) * w) * (1 / scale)).
std::vector<uint8_t> norm(const std::vector<float>& x, std::vector<float>& residual, bool add,
                          const std::vector<uint16_t>& w, int batch, float scale) {
  std::vector<uint8_t> q(static_cast<size_t>(batch) * kHidden);
  for (int m = 0; m < batch; ++m) {
    float* z = residual.data() + static_cast<int64_t>(m) * kHidden;
    for (int i = 0; i < kHidden; ++i) z[i] = round16(x[m * kHidden + i] + (add ? z[i] : 0.f));
    const float inv = num::RmsInverse(z, kHidden, kEps);
    for (int i = 0; i < kHidden; ++i) q[m * kHidden + i] = fp8(round16(round16(z[i] * inv) * bf16(w[i])), scale);
  }
  return q;
}

void rotate(float* head, const float* cs) {
  const int half = kHeadDim / 2;
  for (int f = 0; f < half; ++f) {
    const float x = head[f], y = head[f + half], c = cs[f], s = cs[half + f];
    head[f] = round16(x * c - y * s), head[f + half] = round16(y * c + x * s);
  }
}

// Element e of a cache in format f, and the write of value x there.
float cacheValue(const std::vector<uint8_t>& c, int64_t e, CacheFormat f, float scale) {
  if (f == CacheFormat::kFp8) return num::E4m3BitsToFloat(c[e]) * scale;
  return bf16(static_cast<uint16_t>(c[2 * e] | c[2 * e + 1] << 8));
}
void storeCache(std::vector<uint8_t>& c, int64_t e, CacheFormat f, float scale, float x) {
  if (f == CacheFormat::kFp8) {
    c[e] = num::QuantizeToE4m3(x, scale, /*divide=*/true);
    return;
  }
  const uint16_t bits = num::FloatToBFloat16Bits(x);
  c[2 * e] = static_cast<uint8_t>(bits & 0xff), c[2 * e + 1] = static_cast<uint8_t>(bits >> 8);
}

// One sequence: rotates q and k of its token in `tok`, writes k and v into the caches at its
// position (FP8: quantized, and attended as such) and returns the attention output rows of every
// head (fp32, unrounded).
std::vector<float> attendSequence(float* tok, HostLayer& l, const HostBatch& b, int s, const Scales& sc,
                                  const std::vector<float>& cs) {
  const int ctx = b.seq_lens[s], pos = ctx - 1;
  for (int h = 0; h < kHeads + kKvHeads; ++h) rotate(tok + h * kHeadDim, cs.data() + static_cast<int64_t>(pos) * kHeadDim);
  auto row = [&](int p, int hk) {
    const int64_t block = b.table[static_cast<size_t>(s) * b.max_blocks + p / kBlockSize];
    return ((block * kBlockSize + p % kBlockSize) * kKvHeads + hk) * kHeadDim;
  };
  for (int hk = 0; hk < kKvHeads; ++hk)
    for (int d = 0; d < kHeadDim; ++d) {
      storeCache(l.k_cache, row(pos, hk) + d, b.cache, sc.k_cache, tok[(kHeads + hk) * kHeadDim + d]);
      storeCache(l.v_cache, row(pos, hk) + d, b.cache, sc.v_cache, tok[(kHeads + kKvHeads + hk) * kHeadDim + d]);
    }
  std::vector<float> out(static_cast<size_t>(kHeads) * kHeadDim), score(ctx);
  for (int h = 0; h < kHeads; ++h) {
    const int hk = h / kGroup;
    float mx = -INFINITY, sum = 0.f;
    for (int p = 0; p < ctx; ++p) {
      float dot = 0.f;
      for (int d = 0; d < kHeadDim; ++d) dot += tok[h * kHeadDim + d] * cacheValue(l.k_cache, row(p, hk) + d, b.cache, sc.k_cache);
      score[p] = dot / std::sqrt(static_cast<float>(kHeadDim));
      mx = std::max(mx, score[p]);
    }
    for (float& v : score) v = std::exp(v - mx), sum += v;
    for (int d = 0; d < kHeadDim; ++d) {
      float o = 0.f;
      for (int p = 0; p < ctx; ++p) o += score[p] * cacheValue(l.v_cache, row(p, hk) + d, b.cache, sc.v_cache);
      out[static_cast<size_t>(h) * kHeadDim + d] = o / sum;
    }
  }
  return out;
}

// Attention of every sequence, quantized as attention_quant: fp8(round16(o) * (1 / scale)).
std::vector<uint8_t> attention(std::vector<float>& qkv, HostLayer& l, const HostBatch& b, const Scales& sc,
                               const std::vector<float>& cs) {
  std::vector<uint8_t> out(static_cast<size_t>(b.batch) * kHidden);
  for (int s = 0; s < b.batch; ++s) {
    const std::vector<float> o = attendSequence(qkv.data() + static_cast<int64_t>(s) * kQkv, l, b, s, sc, cs);
    for (int i = 0; i < kHidden; ++i) out[static_cast<size_t>(s) * kHidden + i] = fp8(round16(o[i]), sc.x_o);
  }
  return out;
}

// silu_and_mul_quant of gate/up rows [batch, 2 * kInter]: fp8(round16(round16(silu(g)) * u) * (1 / s)).
std::vector<uint8_t> siluMulQuant(const std::vector<float>& gu, int batch, float scale) {
  std::vector<uint8_t> act(static_cast<size_t>(batch) * kInter);
  for (int m = 0; m < batch; ++m)
    for (int n = 0; n < kInter; ++n) {
      const float gate = gu[static_cast<size_t>(m) * 2 * kInter + n], up = gu[static_cast<size_t>(m) * 2 * kInter + kInter + n];
      act[static_cast<size_t>(m) * kInter + n] = fp8(round16(round16(num::Silu(gate)) * up), scale);
    }
  return act;
}

}  // namespace

Distance Bf16Distance(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  return distance(got, want, num::BFloat16BitsToFloat, [](uint16_t a, uint16_t b) { return num::D16UlpDistance(a, b); });
}

Distance Fp8Distance(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  return distance(got, want, num::E4m3BitsToFloat, num::E4m3StepDistance);
}

std::vector<float> CosSinTable(int positions) {
  std::vector<float> t(static_cast<size_t>(positions) * kHeadDim);
  for (int pos = 0; pos < positions; ++pos)
    for (int f = 0; f < kHeadDim / 2; ++f) {
      const double theta = pos * std::pow(500000.0, -2.0 * f / kHeadDim);
      t[static_cast<size_t>(pos) * kHeadDim + f] = round16(static_cast<float>(std::cos(theta)));
      t[static_cast<size_t>(pos) * kHeadDim + kHeadDim / 2 + f] = round16(static_cast<float>(std::sin(theta)));
    }
  return t;
}

Outputs RunReference(std::vector<HostLayer>& layers, const HostBatch& b, const Scales& sc, std::vector<float> hidden,
                     const std::vector<float>& cos_sin) {
  Outputs out;
  std::vector<float> residual(hidden.size(), 0.f);
  for (size_t i = 0; i < layers.size(); ++i) {
    HostLayer& l = layers[i];
    const std::vector<uint8_t> xq = norm(hidden, residual, i > 0, l.norm1, b.batch, sc.x_qkv);
    std::vector<float> qkv = gemm(xq, l.w[kGemmQkv], b.batch, kGemmQkv, sc.x_qkv * sc.w_qkv);
    out.qkv = bits(qkv);  // before the rotary, as the kernel leaves it
    out.attn = attention(qkv, l, b, sc, cos_sin);
    const std::vector<float> o = gemm(out.attn, l.w[kGemmO], b.batch, kGemmO, sc.x_o * sc.w_o);
    out.o = bits(o);
    const std::vector<uint8_t> xq2 = norm(o, residual, true, l.norm2, b.batch, sc.x_gu);
    const std::vector<float> gu = gemm(xq2, l.w[kGemmGateUp], b.batch, kGemmGateUp, sc.x_gu * sc.w_gu);
    out.act = siluMulQuant(gu, b.batch, sc.x_down);
    hidden = gemm(out.act, l.w[kGemmDown], b.batch, kGemmDown, sc.x_down * sc.w_down);
  }
  out.hidden = bits(hidden), out.residual = bits(residual);
  return out;
}

}  // namespace fxfuse::examples::persistent
