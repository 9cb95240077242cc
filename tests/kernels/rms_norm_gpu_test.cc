// GPU test of RmsNorm (rms_norm, fused_add_rms_norm) against the CPU reference: fresh random
// data per check, poisoned outputs, T = 1 .. 200000, odd H, row strides, misaligned pointers,
// both residual-variance choices, in-place output, no weight, fp16 residual overflow.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/rms_norm.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::kernels {
namespace {

using testing::DeviceBuffer;

enum class Residual { kNone, kDefault, kRounded, kUnrounded };

struct NormCase {
  int64_t tokens;
  int64_t hidden;
  int64_t input_pad = 0;   // input_row_stride = hidden + input_pad
  int64_t output_pad = 0;  // output_row_stride = hidden + output_pad
  bool misalign = false;   // input pointer 2 bytes off 16-byte alignment (scalar path)
};

struct NormRun {
  DType dtype = DType::BF16;
  Residual residual = Residual::kNone;
  bool weight = true;
  bool in_place = false;
  bool residual_out = false;  // the sum to a buffer of its own (the residual only read)
  LaunchTuning tuning;
  uint64_t seed = 0;  // 0: a fresh seed
};

ResidualVariance ToVariance(Residual r) {
  switch (r) {
    case Residual::kRounded:
      return ResidualVariance::kRoundedSum;
    case Residual::kUnrounded:
      return ResidualVariance::kUnroundedSum;
    default:
      return ResidualVariance::kDefault;
  }
}

// Runs one configuration on the GPU and on the CPU and compares. Returns the GPU output (for
// checks that compare two runs).
std::vector<uint16_t> CheckRmsNorm(const NormCase& c, const NormRun& run) {
  const uint64_t seed = run.seed != 0 ? run.seed : testing::NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t t = c.tokens, h = c.hidden;
  const int64_t in_stride = h + c.input_pad;
  const int64_t out_stride = run.in_place ? in_stride : h + c.output_pad;
  const int64_t res_stride = h + c.output_pad;
  INFO("seed " << seed << " T=" << t << " H=" << h << " in_stride=" << in_stride << " out_stride="
               << out_stride << " misalign=" << c.misalign << " dtype=" << DTypeName(run.dtype)
               << " residual=" << static_cast<int>(run.residual) << " weight=" << run.weight
               << " in_place=" << run.in_place << " vecs=" << run.tuning.vecs_per_thread
               << " scalar=" << run.tuning.force_scalar_path);

  std::vector<uint16_t> x = testing::RandomD16(t * in_stride, run.dtype, 2.0f, rng);
  std::vector<uint16_t> r = testing::RandomD16(t * res_stride, run.dtype, 2.0f, rng);
  const std::vector<uint16_t> w = testing::RandomUniformD16(h, run.dtype, 0.5f, 1.5f, rng);
  if (t > 2) {
    for (int64_t j = 0; j < h; ++j) x[2 * in_stride + j] = 0;  // an all-zero row
    if (run.residual != Residual::kNone) {
      for (int64_t j = 0; j < h; ++j) r[2 * res_stride + j] = 0;
    }
  }
  if (t > 3 && run.dtype == DType::F16) {
    // fp16 overflow of the residual sum (60000 + 60000): inf in the rounded sum.
    x[3 * in_stride] = reference::FloatToHalfBits(60000.0f);
    r[3 * res_stride] = reference::FloatToHalfBits(60000.0f);
  }

  DeviceBuffer x_d(x.size() * 2, c.misalign ? 2 : 0), w_d(w.size() * 2), r_d(r.size() * 2),
      out_d(t * out_stride * 2 + 2), r_out_d(r.size() * 2);
  x_d.Upload(x);
  w_d.Upload(w);
  r_d.Upload(r);
  out_d.Poison();
  r_out_d.Upload(testing::PoisonRows(r, t, h, res_stride));  // the padding as the residual's

  RmsNormParams p;
  p.num_tokens = t;
  p.hidden_size = h;
  p.dtype = run.dtype;
  p.weight_dtype = run.dtype;
  p.input_row_stride = in_stride;
  p.output_row_stride = out_stride;
  p.residual_row_stride = res_stride;
  p.residual_variance = ToVariance(run.residual);
  p.epsilon = 1e-6f;
  p.tuning = run.tuning;

  RmsNormParams gpu = p;
  gpu.input = x_d.get();
  gpu.weight = run.weight ? w_d.get() : nullptr;
  gpu.output = run.in_place ? x_d.get() : out_d.get();
  gpu.residual = run.residual != Residual::kNone ? r_d.get() : nullptr;
  if (run.residual_out) {
    gpu.residual_out = r_out_d.get();
    gpu.residual_out_row_stride = res_stride;
  }
  FXFUSE_LAUNCH_REQUIRE(RmsNorm(gpu, nullptr));

  std::vector<uint16_t> x_ref = x, r_ref = r;
  std::vector<uint16_t> out_ref = run.in_place ? x : testing::PoisonedHost<uint16_t>(t * out_stride);
  RmsNormParams cpu = p;
  cpu.input = x_ref.data();
  cpu.weight = run.weight ? w.data() : nullptr;
  cpu.output = run.in_place ? x_ref.data() : out_ref.data();
  cpu.residual = run.residual != Residual::kNone ? r_ref.data() : nullptr;
  REQUIRE(reference::RmsNorm(cpu).ok());

  std::vector<uint16_t> out_gpu;
  if (run.in_place) {
    out_gpu = x_d.Download<uint16_t>(x.size());
    testing::ExpectD16Close("in-place output", run.dtype, out_gpu, x_ref, t, h, in_stride,
                            testing::NormTolerance());
  } else {
    out_gpu = out_d.Download<uint16_t>(t * out_stride);
    testing::ExpectD16Close("output", run.dtype, out_gpu, out_ref, t, h, out_stride, testing::NormTolerance());
    testing::ExpectD16Close("input untouched", run.dtype, x_d.Download<uint16_t>(x.size()), x, t, in_stride,
                            in_stride, testing::Exact());
  }
  if (run.residual != Residual::kNone) {
    const DeviceBuffer& sum = run.residual_out ? r_out_d : r_d;
    testing::ExpectD16Close("residual", run.dtype, sum.Download<uint16_t>(r.size()), r_ref, t, h, res_stride,
                            testing::Exact());
  }
  if (run.residual_out) {
    testing::ExpectD16Close("residual only read", run.dtype, r_d.Download<uint16_t>(r.size()), r, t, h, res_stride,
                            testing::Exact());
  }
  return out_gpu;
}

const NormCase kCases[] = {
    {1, 4096},          {1, 8192},         {16, 5120},       {7, 5120, 8, 16},       {3, 4097},
    {5, 5121, 3, 5},    {33, 64},          {2, 8},           {1000, 1},              {9, 24, 0, 0, true},
    {256, 4096, 0, 0, true}, {300, 8192, 16, 8}, {1024, 4096}, {8, 16384},          {4, 32768},
    {2, 40000},         {100000, 32},      {66000, 40, 8, 0},
};

TEST_CASE("rms_norm and fused_add_rms_norm match the CPU reference") {
  for (const NormCase& c : kCases) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      for (Residual residual : {Residual::kNone, Residual::kDefault, Residual::kUnrounded}) {
        NormRun run;
        run.dtype = dtype;
        run.residual = residual;
        CheckRmsNorm(c, run);
      }
    }
  }
}

TEST_CASE("rms_norm: every launch shape (vectors per thread, pipeline depth, scalar path)") {
  // 8000 x 512 and 3000 x 1024: more rows than resident CTAs, so persistent CTAs walk several.
  for (const NormCase& c : {NormCase{3, 8192}, NormCase{8000, 512}, NormCase{3000, 1024, 8, 8}}) {
    int k = 0;
    for (const LaunchTuning& tuning : testing::AllLaunchShapes()) {
      NormRun run;
      run.residual = (k++ % 2 == 0) ? Residual::kRounded : Residual::kUnrounded;
      run.dtype = (k % 3 == 0) ? DType::F16 : DType::BF16;
      run.tuning = tuning;
      CheckRmsNorm(c, run);
      run.residual = Residual::kNone;
      CheckRmsNorm(c, run);
    }
  }
}

TEST_CASE("rms_norm: in place (output == input), no weight, T = 0") {
  for (const NormCase& c : {NormCase{5, 4096, 8}, NormCase{3, 4097}, NormCase{2, 8192, 0, 0, true}}) {
    for (Residual residual : {Residual::kNone, Residual::kRounded}) {
      NormRun run;
      run.residual = residual;
      run.in_place = true;
      CheckRmsNorm(c, run);
      run.in_place = false;
      run.weight = false;
      run.dtype = DType::F16;
      CheckRmsNorm(c, run);
    }
  }
  RmsNormParams empty;
  empty.num_tokens = 0;
  empty.hidden_size = 4096;
  empty.input = empty.output = reinterpret_cast<void*>(256);
  FXFUSE_LAUNCH_REQUIRE(RmsNorm(empty, nullptr));
}

TEST_CASE("fused_add_rms_norm: the sum out of place (residual_out), every path") {
  // The plans' form for a residual that is a graph input: the same sum and output as in place.
  for (const NormCase& c : {NormCase{1, 4096}, NormCase{64, 4096}, NormCase{7, 5120, 8, 16}, NormCase{3, 4097},
                            NormCase{300, 8192, 16, 8}, NormCase{9, 24, 0, 0, true}}) {
    for (int shape : {0, 1, 2}) {  // the heuristic, the pipelined vectorized path, the scalar path
      NormRun run;
      run.residual = shape == 1 ? Residual::kUnrounded : Residual::kRounded;
      run.residual_out = true;
      run.dtype = shape == 2 ? DType::F16 : DType::BF16;
      if (shape == 1) run.tuning.row_pipeline_stages = 2;
      if (shape == 2) run.tuning.force_scalar_path = true;
      CheckRmsNorm(c, run);
    }
  }
}

TEST_CASE("fused_add_rms_norm: the residual-variance choice is observable") {
  // Same inputs under both choices: each matches its own reference (checked inside), and the
  // two outputs differ on many elements, so the option is not a no-op.
  for (DType dtype : {DType::BF16, DType::F16}) {
    NormRun rounded;
    rounded.dtype = dtype;
    rounded.residual = Residual::kRounded;
    rounded.seed = testing::NextSeed();
    NormRun unrounded = rounded;
    unrounded.residual = Residual::kUnrounded;
    const NormCase c{257, 4096};
    const std::vector<uint16_t> a = CheckRmsNorm(c, rounded);
    const std::vector<uint16_t> b = CheckRmsNorm(c, unrounded);
    const double differing = testing::DifferingFraction(a, b, c.tokens, c.hidden, c.hidden);
    INFO("outputs differing between the two choices: " << differing);
    CHECK(differing > 0.05);
  }
}

TEST_CASE("invalid params are rejected before any launch") {
  RmsNormParams p;
  p.num_tokens = 4;
  p.hidden_size = 4096;
  const Status s = RmsNorm(p, nullptr);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("input is null") != std::string::npos);
}

}  // namespace
}  // namespace fxfuse::kernels
