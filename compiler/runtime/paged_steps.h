// The paged KV-cache steps of a launch plan (rt.reshape_and_cache, rt.paged_attention;
// docs/runtime.md "Paged attention"): their operands checked once when a session prepares
// (one-line FxError naming the step), then a closure that enqueues the kernel
// (kernels/runtime/paged_attention.h). Neither step synchronizes with the host: the batch
// metadata stays on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compiler/runtime/runtime.h"

namespace fxfuse::runtime {

// A step's tensor arguments by name (as the plan's KernelLaunch names them).
using PagedOperands = std::map<std::string, DeviceTensor>;

// key, value [T, Hk, E]; key_cache, value_cache [num_blocks, block_size, Hk, E] (written in
// place); slot_mapping i64 [T]; FP8 cache: k_scale, v_scale f32 [1]. With rotary operands
// (query [T, Hq, E], positions i64 [T], cos_sin_cache [P, rot]; `neox` the pairing) the step
// rotates the query in place and the keys on their way into the cache; with the rotary
// operands alone it only rotates the query. `launched`, when given, receives the params the
// step launches with (a rotation into query_out, a dense plan's rotary, the attention after it
// may take in: attention_prologue.h; a rotary cache write, the q/k/v GEMM before it:
// gemm_epilogue.h). `metadata_read_only`: no step writes positions, slot_mapping or the table
// (ReshapeAndCacheParams::metadata_read_only).
std::function<void(cudaStream_t)> prepareReshapeAndCacheStep(const PagedOperands& t, bool neox, bool metadata_read_only,
                                                             const std::string& where,
                                                             ReshapeAndCacheParams* launched = nullptr);

// Device scratch of a session's paged-attention steps (their split-KV partial results). The
// steps run one after another on one stream, so they share it: each step reserves what it
// needs when it is prepared, and its launch reads `data` when it runs.
class PagedScratch {
 public:
  PagedScratch() = default;
  PagedScratch(const PagedScratch&) = delete;
  PagedScratch& operator=(const PagedScratch&) = delete;
  ~PagedScratch();
  void reserve(int64_t bytes, const std::string& where);
  float* data() const { return static_cast<float*>(data_); }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
};

// q, out [T, Hq, E]; key_cache, value_cache; block_table i32 [B, max_blocks]; seq_lens i32 [B];
// query_start_loc i32 [B + 1]; FP8 cache: k_scale, v_scale; FP8 out: out_scale f32 [1].
// `scale`: the softmax scale (nullopt: 1/sqrt(E)). The context split is chosen for the
// current device and the bound sizes; `scratch` must outlive the returned closure. `kernels`:
// how many kernels one run of the step launches (2 with a split: the chunks, then the merge).
// `metadata_read_only`: no step of the plan writes the batch metadata
// (PagedAttentionParams::metadata_read_only).
std::function<void(cudaStream_t)> preparePagedAttentionStep(const PagedOperands& t, std::optional<double> scale,
                                                            bool metadata_read_only, PagedScratch& scratch,
                                                            int& kernels, const std::string& where);

}  // namespace fxfuse::runtime
