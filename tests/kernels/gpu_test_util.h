// Helpers for the GPU kernel tests: device buffers, fresh random data per check, poisoning,
// and comparisons in D16 ulps / FP8 steps that also check that every output element (and no
// padding element) was written.
#ifndef FXFUSE_KERNELS_TESTS_GPU_TEST_UTIL_H_
#define FXFUSE_KERNELS_TESTS_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels::testing {

#define FXFUSE_CUDA_REQUIRE(expr)                                                   \
  do {                                                                              \
    const cudaError_t fxfuse_err_ = (expr);                                         \
    INFO(#expr << ": " << cudaGetErrorName(fxfuse_err_) << ": "                     \
               << cudaGetErrorString(fxfuse_err_));                                 \
    REQUIRE(fxfuse_err_ == cudaSuccess);                                            \
  } while (0)

// Runs a launch, then synchronizes so that asynchronous faults surface here.
#define FXFUSE_LAUNCH_REQUIRE(expr)                       \
  do {                                                    \
    const ::fxfuse::kernels::Status fxfuse_s_ = (expr);   \
    INFO(#expr << " -> " << fxfuse_s_.ToString());        \
    REQUIRE(fxfuse_s_.ok());                              \
    FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());         \
  } while (0)

// Each check draws from its own generator; the seed is printed on failure.
inline uint64_t NextSeed() {
  static uint64_t counter = 0x5EED0000;
  return ++counter;
}

// Owns `bytes` of device memory (plus `offset_bytes` of slack before the returned pointer, to
// build deliberately misaligned views).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset_bytes = 0) : bytes_(bytes), offset_(offset_bytes) {
    FXFUSE_CUDA_REQUIRE(cudaMalloc(&base_, bytes + offset_bytes + 16));
  }
  ~DeviceBuffer() { cudaFree(base_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return static_cast<char*>(base_) + offset_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    REQUIRE(host.size() * sizeof(T) <= bytes_);
    FXFUSE_CUDA_REQUIRE(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());  // see Poison()
  }
  template <typename T>
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    REQUIRE(count * sizeof(T) <= bytes_);
    FXFUSE_CUDA_REQUIRE(cudaMemcpy(host.data(), get(), count * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // 0xFF bytes: NaN in bf16, fp16, e4m3fn and fp32. Upload and Poison finish before they
  // return: they run on the legacy stream, which kernels on non-blocking streams (the
  // simulated ranks) do not wait for, and a late fill would overwrite a kernel's outputs
  // (a pageable cudaMemcpy may also return before its last DMA lands).
  void Poison() {
    FXFUSE_CUDA_REQUIRE(cudaMemset(get(), 0xFF, bytes_));
    FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
  }

 private:
  void* base_ = nullptr;
  size_t bytes_;
  size_t offset_;
};

inline constexpr uint16_t kPoison16 = 0xFFFF;
inline constexpr uint8_t kPoison8 = 0xFF;

// 65536 standard normal samples, drawn once; RandomD16 picks from them with a fast generator
// seeded per check (std::normal_distribution is too slow for tens of millions of values).
inline const std::vector<float>& NormalTable() {
  static const std::vector<float> table = [] {
    std::mt19937_64 rng(12345);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> t(65536);
    for (auto& v : t) v = dist(rng);
    return t;
  }();
  return table;
}

// xorshift64*: cheap per-element randomness from a per-check seed.
inline uint64_t NextRandom(uint64_t& state) {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

// n random e4m3 bytes whose exponent field is at most max_exponent_field (moderate
// magnitudes for GEMM operands), never NaN.
inline std::vector<uint8_t> RandomFp8Bytes(size_t n, std::mt19937_64& rng, int max_exponent_field) {
  std::vector<uint8_t> v(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(byte(rng));
    while ((b & 0x7f) == 0x7f || ((b >> 3) & 0xf) > max_exponent_field);
  }
  return v;
}

// D16 bits of normal(0, stddev) samples, rounded to `dtype`.
inline std::vector<uint16_t> RandomD16(size_t count, DType dtype, float stddev, std::mt19937_64& rng) {
  const std::vector<float>& table = NormalTable();
  uint64_t state = rng() | 1;
  std::vector<uint16_t> out(count);
  for (auto& v : out) {
    const uint64_t r = NextRandom(state);
    // Table sample times a random factor in [1, 1 + 2^-8) so values do not repeat exactly.
    const float jitter = 1.0f + static_cast<float>(r >> 56) * (1.0f / 65536.0f);
    v = reference::FloatToD16Bits(table[r & 0xFFFF] * jitter * stddev, dtype);
  }
  return out;
}

inline std::vector<uint16_t> RandomUniformD16(size_t count, DType dtype, float lo, float hi,
                                              std::mt19937_64& rng) {
  uint64_t state = rng() | 1;
  std::vector<uint16_t> out(count);
  for (auto& v : out) {
    const float u = static_cast<float>(NextRandom(state) >> 40) * (1.0f / 16777216.0f);
    v = reference::FloatToD16Bits(lo + (hi - lo) * u, dtype);
  }
  return out;
}

struct Tolerance {
  int64_t max_distance = 0;           // ulps (D16) or steps (FP8) per element
  double max_mismatch_fraction = 0.0;  // fraction of elements allowed to differ at all
};

// Compares a [rows, cols] matrix with row stride `stride` (both buffers laid out alike, `want`
// built by the CPU reference on a copy of the buffer's initial contents). Elements must be
// within tolerance, NaN must match NaN (a poisoned, unwritten output is NaN), and padding
// columns [cols, stride) must be bit-identical (the kernel must not write them).
template <typename Bits, typename Distance>
void ExpectMatrixClose(const char* what, const std::vector<Bits>& got, const std::vector<Bits>& want,
                       int64_t rows, int64_t cols, int64_t stride, const Tolerance& tol,
                       Distance distance, bool (*is_nan)(Bits)) {
  REQUIRE(got.size() >= static_cast<size_t>(rows * stride));
  REQUIRE(want.size() >= static_cast<size_t>(rows * stride));
  int64_t mismatches = 0;
  int64_t failures = 0;
  std::ostringstream log;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < stride; ++c) {
      const int64_t i = r * stride + c;
      if (c >= cols) {
        if (got[i] != want[i]) {
          if (failures++ < 8) log << "  padding (" << r << ", " << c << ") overwritten\n";
        }
        continue;
      }
      const bool nan_got = is_nan(got[i]);
      const bool nan_want = is_nan(want[i]);
      if (nan_got || nan_want) {
        if (nan_got != nan_want) {
          if (failures++ < 8) {
            log << "  (" << r << ", " << c << "): got 0x" << std::hex << +got[i] << " want 0x"
                << +want[i] << std::dec << (nan_got ? " (unwritten or NaN)" : "") << "\n";
          }
        }
        continue;
      }
      if (got[i] == want[i]) continue;
      ++mismatches;
      if (distance(got[i], want[i]) > tol.max_distance) {
        if (failures++ < 8) {
          log << "  (" << r << ", " << c << "): got 0x" << std::hex << +got[i] << " want 0x" << +want[i]
              << std::dec << " distance " << distance(got[i], want[i]) << "\n";
        }
      }
    }
  }
  const double fraction = rows * cols > 0 ? static_cast<double>(mismatches) / (rows * cols) : 0.0;
  INFO(what << ": " << failures << " failures, " << mismatches << " mismatches (fraction " << fraction
            << ", allowed " << tol.max_mismatch_fraction << ")\n"
            << log.str());
  CHECK(failures == 0);
  CHECK(fraction <= tol.max_mismatch_fraction);
}

inline void ExpectD16Close(const char* what, DType dtype, const std::vector<uint16_t>& got,
                           const std::vector<uint16_t>& want, int64_t rows, int64_t cols, int64_t stride,
                           const Tolerance& tol) {
  auto is_nan = dtype == DType::BF16
                    ? +[](uint16_t b) { return std::isnan(reference::BFloat16BitsToFloat(b)); }
                    : +[](uint16_t b) { return std::isnan(reference::HalfBitsToFloat(b)); };
  ExpectMatrixClose<uint16_t>(what, got, want, rows, cols, stride, tol, reference::D16UlpDistance, is_nan);
}

inline void ExpectFp8Close(const char* what, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                           int64_t rows, int64_t cols, int64_t stride, const Tolerance& tol) {
  ExpectMatrixClose<uint8_t>(what, got, want, rows, cols, stride, tol, reference::E4m3StepDistance,
                             +[](uint8_t b) { return reference::IsE4m3NaN(b); });
}

// Fraction of the [rows, cols] elements whose bits differ (to show that an option matters).
template <typename Bits>
double DifferingFraction(const std::vector<Bits>& a, const std::vector<Bits>& b, int64_t rows, int64_t cols,
                         int64_t stride) {
  int64_t differing = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) differing += a[r * stride + c] != b[r * stride + c];
  }
  return rows * cols > 0 ? static_cast<double>(differing) / (rows * cols) : 0.0;
}

// Scales: exact (max_relative 0) or relative; NaN (unwritten poison) must match NaN.
inline void ExpectScalesClose(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                              double max_relative) {
  int64_t failures = 0;
  std::ostringstream log;
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool ok = both_nan || got[i] == want[i] ||
                    (!std::isnan(got[i]) && std::fabs(got[i] - want[i]) <= max_relative * std::fabs(want[i]));
    if (!ok && failures++ < 8) log << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
  }
  INFO(what << ": " << failures << " scale failures\n" << log.str());
  CHECK(failures == 0);
}

// D16 tolerance of outputs that pass through rsqrtf / expf and an fp32 reduction whose order
// differs from the reference's. Those make round16(s * inv) (or round16(silu(g))) differ by at
// most one ulp, rarely; the second rounding after the multiply by w (or u), |w| up to 1.5 here,
// can widen that to two ulps of the output. So: at most two ulps, on at most 1% of the elements
// (measured on the H200: <= 0.14%). A wrong rounding point or residual-variance choice changes
// ~18% of the elements.
inline Tolerance NormTolerance() { return Tolerance{2, 0.01}; }
inline Tolerance Exact() { return Tolerance{0, 0.0}; }

// Every launch shape of the 16-byte path (vectors per thread x pipeline depth) and the scalar
// path: all must give the same results.
inline std::vector<LaunchTuning> AllLaunchShapes() {
  std::vector<LaunchTuning> shapes;
  for (int vecs : {1, 2, 4, 8}) {
    for (int stages : {0, 1, 2, 3}) {
      LaunchTuning t;
      t.vecs_per_thread = vecs;
      t.row_pipeline_stages = stages;
      shapes.push_back(t);
    }
  }
  LaunchTuning scalar;
  scalar.force_scalar_path = true;
  shapes.push_back(scalar);
  return shapes;
}

// A host buffer initialised with poison, the CPU reference's counterpart of a poisoned output.
template <typename Bits>
std::vector<Bits> PoisonedHost(size_t count) {
  return std::vector<Bits>(count, static_cast<Bits>(~Bits{0}));
}
// `rows` [T rows of `stride`] with each row's first `width` values poisoned and its padding
// kept: the initial contents of an output whose padding the expected values share.
inline std::vector<uint16_t> PoisonRows(std::vector<uint16_t> rows, int64_t tokens, int64_t width, int64_t stride) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < width; ++j) rows[static_cast<size_t>(t * stride + j)] = 0xFFFF;
  return rows;
}
inline std::vector<float> PoisonedScales(size_t count) {
  std::vector<float> v(count);
  std::memset(v.data(), 0xFF, count * sizeof(float));
  return v;
}

inline const char* DTypeLabel(DType dtype) { return DTypeName(dtype); }

}  // namespace fxfuse::kernels::testing

#endif  // FXFUSE_KERNELS_TESTS_GPU_TEST_UTIL_H_
