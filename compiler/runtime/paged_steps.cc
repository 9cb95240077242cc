// The paged KV-cache steps (paged_steps.h): operand checks, then the kernels' launch.
#include "compiler/runtime/paged_steps.h"

#include <cmath>

#include <fmt/format.h>

#include "ir/dtype.h"
#include "ir/status.h"
#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {
namespace {

bool isD16(DType t) { return t == DType::BF16 || t == DType::F16; }

std::string shapeText(const DeviceTensor& t) { return fmt::format("[{}]", fmt::join(t.shape, ", ")); }

const DeviceTensor& operand(const PagedOperands& t, const char* name, const std::string& where) {
  auto it = t.find(name);
  if (it == t.end()) fail("{}: missing tensor argument {}", where, name);
  return it->second;
}

void requireRank(const DeviceTensor& t, const char* name, size_t rank, const std::string& where) {
  if (t.shape.size() != rank) fail("{}: {} {} must be {}-D", where, name, shapeText(t), rank);
}

void requireDType(const DeviceTensor& t, const char* name, DType dtype, const std::string& where) {
  if (t.dtype != dtype) fail("{}: {} is {}, expected {}", where, name, ir::dtypeName(t.dtype), ir::dtypeName(dtype));
}

// Innermost dim contiguous (or of size 1): the kernels read heads as runs of E elements.
void requireDenseRows(const DeviceTensor& t, const char* name, const std::string& where) {
  if (!t.shape.empty() && t.shape.back() != 1 && t.strides.back() != 1)
    fail("{}: the last dim of {} must be contiguous (stride {})", where, name, t.strides.back());
}

void requireContiguous(const DeviceTensor& t, const char* name, const std::string& where) {
  int64_t expect = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.strides[d] != expect) fail("{}: {} {} must be contiguous", where, name, shapeText(t));
    expect *= t.shape[d];
  }
}

// One f32 scale on the device.
const float* scaleOperand(const PagedOperands& t, const char* name, const std::string& where) {
  const DeviceTensor& s = operand(t, name, where);
  requireDType(s, name, DType::F32, where);
  if (s.numel() != 1) fail("{}: {} must have one element, has {}", where, name, s.numel());
  return static_cast<const float*>(s.data);
}

// The two caches: contiguous [num_blocks, block_size, Hk, E], one dtype, `dtype` or F8E4M3FN.
void checkCaches(const DeviceTensor& kc, const DeviceTensor& vc, DType dtype, const std::string& where) {
  requireRank(kc, "key_cache", 4, where);
  if (vc.shape != kc.shape || vc.dtype != kc.dtype)
    fail("{}: key_cache {} {} and value_cache {} {} differ", where, ir::dtypeName(kc.dtype), shapeText(kc),
         ir::dtypeName(vc.dtype), shapeText(vc));
  if (kc.dtype != dtype && kc.dtype != DType::F8E4M3FN)
    fail("{}: the caches are {}, neither the model dtype {} nor f8e4m3fn", where, ir::dtypeName(kc.dtype),
         ir::dtypeName(dtype));
  requireContiguous(kc, "key_cache", where);
  requireContiguous(vc, "value_cache", where);
  if (kc.shape[1] <= 0) fail("{}: block size {} must be positive", where, kc.shape[1]);
}

void check(cudaError_t e, const std::string& where) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", where, cudaGetErrorString(e), cudaGetErrorName(e));
}

}  // namespace

namespace {

// The optional out-of-place target of the rotated query: query_out, the query's shape and dtype.
void fillQueryOut(const PagedOperands& t, const DeviceTensor& query, ReshapeAndCacheParams& p, const std::string& where) {
  auto it = t.find("query_out");
  if (it == t.end()) return;
  const DeviceTensor& out = it->second;
  if (out.shape != query.shape || out.dtype != query.dtype)
    fail("{}: query_out {} {} differs from query {} {}", where, ir::dtypeName(out.dtype), shapeText(out),
         ir::dtypeName(query.dtype), shapeText(query));
  requireDenseRows(out, "query_out", where);
  p.query_out = out.data;
  p.query_out_stride[0] = out.strides[0];
  p.query_out_stride[1] = out.strides[1];
}

// The rotary operands of a cache write (optional): query [T, Hq, E] rotated in place or into
// query_out, positions i64 [T], cos_sin_cache [P, rot] (cos | sin) of the query's dtype or f32.
void fillRotary(const PagedOperands& t, bool neox, int64_t num_tokens, int64_t head_size, DType dtype,
                ReshapeAndCacheParams& p, const std::string& where) {
  const DeviceTensor &query = operand(t, "query", where), &pos = operand(t, "positions", where);
  const DeviceTensor& table = operand(t, "cos_sin_cache", where);
  requireRank(query, "query", 3, where);
  requireDType(query, "query", dtype, where);
  requireDenseRows(query, "query", where);
  if (query.shape[0] != num_tokens || query.shape[2] != head_size)
    fail("{}: query {} does not match {} tokens of head size {}", where, shapeText(query), num_tokens, head_size);
  requireRank(pos, "positions", 1, where);
  requireDType(pos, "positions", DType::I64, where);
  requireContiguous(pos, "positions", where);
  if (pos.shape[0] != num_tokens) fail("{}: positions has {} entries for {} tokens", where, pos.shape[0], num_tokens);
  requireRank(table, "cos_sin_cache", 2, where);
  requireDenseRows(table, "cos_sin_cache", where);
  if (table.dtype != DType::F32 && !isD16(table.dtype))
    fail("{}: cos_sin_cache is {}, expected bf16, f16 or f32", where, ir::dtypeName(table.dtype));
  if (table.shape[1] <= 0 || table.shape[1] % 2 != 0 || table.shape[1] > head_size)
    fail("{}: cos_sin_cache {} must have an even rotary dim of at most the head size {}", where, shapeText(table),
         head_size);
  p.query = query.data;
  p.query_stride[0] = query.strides[0];
  p.query_stride[1] = query.strides[1];
  fillQueryOut(t, query, p, where);
  p.heads_q = query.shape[1];
  p.positions = static_cast<const int64_t*>(pos.data);
  p.cos_sin_cache = table.data;
  p.cos_sin_dtype = table.dtype;
  p.cos_sin_rows = table.shape[0];
  p.cos_sin_stride = table.shape[0] > 1 ? table.strides[0] : table.shape[1];
  p.rotary_dim = table.shape[1];
  p.neox = neox;
}

}  // namespace

std::function<void(cudaStream_t)> prepareReshapeAndCacheStep(const PagedOperands& t, bool neox, bool metadata_read_only,
                                                             const std::string& where, ReshapeAndCacheParams* launched) {
  if (!t.count("key") && t.count("query")) {  // rotation only: in place, or into query_out (a dense plan)
    const DeviceTensor& query = operand(t, "query", where);
    requireRank(query, "query", 3, where);
    if (!isD16(query.dtype)) fail("{}: query is {}, expected bf16 or f16", where, ir::dtypeName(query.dtype));
    ReshapeAndCacheParams p;
    p.dtype = p.cache_dtype = query.dtype;
    p.num_tokens = query.shape[0];
    p.head_size = query.shape[2];
    p.block_size = 1;
    fillRotary(t, neox, p.num_tokens, p.head_size, query.dtype, p, where);
    p.metadata_read_only = metadata_read_only;
    if (launched) *launched = p;
    return [p, where](cudaStream_t s) { check(LaunchReshapeAndCache(p, s), where); };
  }
  const DeviceTensor &key = operand(t, "key", where), &value = operand(t, "value", where);
  const DeviceTensor &kc = operand(t, "key_cache", where), &vc = operand(t, "value_cache", where);
  const DeviceTensor& slots = operand(t, "slot_mapping", where);
  requireRank(key, "key", 3, where);
  if (!isD16(key.dtype)) fail("{}: key is {}, expected bf16 or f16", where, ir::dtypeName(key.dtype));
  if (value.shape != key.shape || value.dtype != key.dtype)
    fail("{}: key {} and value {} differ", where, shapeText(key), shapeText(value));
  requireDenseRows(key, "key", where);
  requireDenseRows(value, "value", where);
  checkCaches(kc, vc, key.dtype, where);
  if (kc.shape[2] != key.shape[1] || kc.shape[3] != key.shape[2])
    fail("{}: key_cache {} does not hold key rows {}", where, shapeText(kc), shapeText(key));
  requireRank(slots, "slot_mapping", 1, where);
  requireDType(slots, "slot_mapping", DType::I64, where);
  requireContiguous(slots, "slot_mapping", where);
  if (slots.shape[0] != key.shape[0])
    fail("{}: slot_mapping has {} entries for {} tokens", where, slots.shape[0], key.shape[0]);
  ReshapeAndCacheParams p;
  p.dtype = key.dtype;
  p.cache_dtype = kc.dtype;
  p.key = key.data;
  p.value = value.data;
  for (int d = 0; d < 2; ++d) {
    p.key_stride[d] = key.strides[static_cast<size_t>(d)];
    p.value_stride[d] = value.strides[static_cast<size_t>(d)];
  }
  p.key_cache = kc.data;
  p.value_cache = vc.data;
  p.slot_mapping = static_cast<const int64_t*>(slots.data);
  p.num_tokens = key.shape[0];
  p.heads_kv = key.shape[1];
  p.head_size = key.shape[2];
  p.num_blocks = kc.shape[0];
  p.block_size = kc.shape[1];
  if (kc.dtype == DType::F8E4M3FN) {
    p.k_scale = scaleOperand(t, "k_scale", where);
    p.v_scale = scaleOperand(t, "v_scale", where);
  }
  if (t.count("query")) fillRotary(t, neox, p.num_tokens, p.head_size, key.dtype, p, where);
  p.metadata_read_only = metadata_read_only;
  if (launched) *launched = p;
  return [p, where](cudaStream_t s) { check(LaunchReshapeAndCache(p, s), where); };
}

namespace {

// The batch metadata: block_table [B, max_blocks], seq_lens [B], query_start_loc [B + 1], i32.
void fillBatchMetadata(const PagedOperands& t, PagedAttentionParams& p, const std::string& where) {
  const DeviceTensor& table = operand(t, "block_table", where);
  const DeviceTensor& lens = operand(t, "seq_lens", where);
  const DeviceTensor& qsl = operand(t, "query_start_loc", where);
  requireRank(table, "block_table", 2, where);
  requireRank(lens, "seq_lens", 1, where);
  requireRank(qsl, "query_start_loc", 1, where);
  requireDType(table, "block_table", DType::I32, where);
  requireDType(lens, "seq_lens", DType::I32, where);
  requireDType(qsl, "query_start_loc", DType::I32, where);
  requireContiguous(lens, "seq_lens", where);
  requireContiguous(qsl, "query_start_loc", where);
  requireDenseRows(table, "block_table", where);
  if (table.shape[0] != lens.shape[0] || qsl.shape[0] != lens.shape[0] + 1)
    fail("{}: block_table {}, seq_lens {} and query_start_loc {} disagree on the number of sequences", where,
         shapeText(table), shapeText(lens), shapeText(qsl));
  p.block_table = static_cast<const int32_t*>(table.data);
  p.block_table_stride = table.strides[0];
  p.max_blocks = table.shape[1];
  p.seq_lens = static_cast<const int32_t*>(lens.data);
  p.query_start_loc = static_cast<const int32_t*>(qsl.data);
  p.num_seqs = lens.shape[0];
}

}  // namespace

std::function<void(cudaStream_t)> preparePagedAttentionStep(const PagedOperands& t, std::optional<double> scale,
                                                            bool metadata_read_only, PagedScratch& scratch,
                                                            int& kernels, const std::string& where) {
  const DeviceTensor &q = operand(t, "q", where), &out = operand(t, "out", where);
  const DeviceTensor &kc = operand(t, "key_cache", where), &vc = operand(t, "value_cache", where);
  requireRank(q, "q", 3, where);
  if (!isD16(q.dtype)) fail("{}: the query is {}, expected bf16 or f16", where, ir::dtypeName(q.dtype));
  if (out.shape != q.shape) fail("{}: out {} is not shaped like the query {}", where, shapeText(out), shapeText(q));
  if (out.dtype != q.dtype && out.dtype != DType::F8E4M3FN)
    fail("{}: out is {}, neither the query's {} nor f8e4m3fn", where, ir::dtypeName(out.dtype), ir::dtypeName(q.dtype));
  requireDenseRows(q, "q", where);
  requireDenseRows(out, "out", where);
  checkCaches(kc, vc, q.dtype, where);
  const int64_t E = q.shape[2];
  if (kc.shape[3] != E) fail("{}: key_cache {} has head size {}, the query {}", where, shapeText(kc), kc.shape[3], E);
  if (E > kPagedMaxHeadSize) fail("{}: head size {} is above {}, the paged kernels' limit", where, E, kPagedMaxHeadSize);
  if (kc.shape[2] <= 0 || q.shape[1] % kc.shape[2] != 0)
    fail("{}: {} query heads are not a multiple of {} key/value heads", where, q.shape[1], kc.shape[2]);
  PagedAttentionParams p;
  p.dtype = q.dtype;
  p.cache_dtype = kc.dtype;
  p.q = q.data;
  p.out = out.data;
  p.out_dtype = out.dtype;
  for (int d = 0; d < 2; ++d) {
    p.q_stride[d] = q.strides[static_cast<size_t>(d)];
    p.o_stride[d] = out.strides[static_cast<size_t>(d)];
  }
  p.key_cache = kc.data;
  p.value_cache = vc.data;
  p.num_tokens = q.shape[0];
  p.heads_q = q.shape[1];
  p.heads_kv = kc.shape[2];
  p.head_size = E;
  p.num_blocks = kc.shape[0];
  p.block_size = kc.shape[1];
  fillBatchMetadata(t, p, where);
  p.metadata_read_only = metadata_read_only;
  if (kc.dtype == DType::F8E4M3FN) {
    p.k_scale = scaleOperand(t, "k_scale", where);
    p.v_scale = scaleOperand(t, "v_scale", where);
  }
  if (out.dtype == DType::F8E4M3FN) p.out_scale = scaleOperand(t, "out_scale", where);
  p.scale = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(E))));
  int device = 0, sms = 0;
  check(cudaGetDevice(&device), where);
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), where);
  PlanPagedAttentionSplits(p, sms);
  scratch.reserve(PagedAttentionWorkspaceBytes(p), where);
  kernels = PagedAttentionKernels(p);
  return [p, &scratch, where](cudaStream_t s) {
    PagedAttentionParams launch = p;
    launch.workspace = scratch.data();
    check(LaunchPagedAttention(launch, s), where);
  };
}

PagedScratch::~PagedScratch() {
  if (data_) cudaFree(data_);
}

void PagedScratch::reserve(int64_t bytes, const std::string& where) {
  if (bytes <= bytes_) return;
  if (data_) check(cudaFree(data_), where);
  data_ = nullptr;
  bytes_ = 0;
  check(cudaMalloc(&data_, static_cast<size_t>(bytes)), where + ": allocating the split-KV workspace");
  bytes_ = bytes;
}

}  // namespace fxfuse::runtime
