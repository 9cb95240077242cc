// The paged view of a dense decode attention (dense_paged_view.h): checks the layout, picks the
// block size, writes the identity metadata, and uploads it for a launch.
#include "kernels/runtime/dense_paged_view.h"

#include <climits>
#include <utility>

namespace fxfuse::runtime {
namespace {

bool isD16(DType t) { return t == DType::BF16 || t == DType::F16; }

// The stride of a dimension of `size` elements as the view needs it: any value where the
// dimension has one element (never stepped over), else exactly `want`.
bool strideIs(int64_t stride, int64_t size, int64_t want) { return size == 1 || stride == want; }

// Why the shapes, dtypes and masking of `a` are not a one-token decode the paged kernel computes
// the same way ("" when they are).
std::string semanticsMismatch(const AttentionParams& a) {
  if (a.mask_dtype != DType::DTYPE_UNSPECIFIED) return "an explicit mask";
  if (!isD16(a.dtype)) return "q/k/v are not bf16 or f16";
  if (a.Sq != 1) return "more than one query token per sequence";
  // torch's causal mask is top-left aligned: one query sees key 0 only, all keys only when Sk = 1.
  if (a.causal && a.Sk != 1) return "a top-left causal mask over several keys";
  if (a.B <= 0 || a.Sk <= 0 || a.Hk <= 0 || a.Hq <= 0 || a.Hq % a.Hk != 0) return "empty or ungrouped heads";
  if (a.E != a.Ev || a.E <= 0 || a.E > kPagedMaxHeadSize) return "a head size the paged kernel does not take";
  // The paged kernel rounds the attention to the model dtype before an FP8 output's scale.
  const bool fp8_out = a.out_dtype == DType::F8E4M3FN && a.out_scale && a.round_dtype == a.dtype;
  if (a.out_dtype != a.dtype && !fp8_out) return "an output dtype or rounding the paged kernel does not produce";
  return "";
}

// Why q/out are not [B, Hq, E] rows with E contiguous, or K and V not the same [rows, Hk, E]
// rows per sequence ("" when they are); *rows gets the rows between sequences (0 for one
// sequence or a batch-broadcast cache).
std::string layoutMismatch(const AttentionParams& a, int64_t* rows) {
  for (const int64_t* s : {a.q_stride, a.o_stride, a.k_stride, a.v_stride})
    for (int d = 0; d < 4; ++d)
      if (s[d] < 0) return "a negative stride";
  if (!strideIs(a.q_stride[3], a.E, 1) || !strideIs(a.o_stride[3], a.E, 1)) return "q or out rows not contiguous";
  // The view gives V the block layout of K, so their strides must agree, except over a
  // dimension of one element, which is never stepped over: one key per sequence, as a dense
  // layer's first token has, where K is a rotated copy and V a column range of the qkv rows.
  const int64_t kv_sizes[4] = {a.B, a.Hk, a.Sk, a.E};
  for (int d = 0; d < 4; ++d)
    if (!strideIs(a.v_stride[d], kv_sizes[d], a.k_stride[d])) return "K and V laid out differently";
  const int64_t row = a.Hk * a.E;  // one key's K (or V) for all KV heads
  if (!strideIs(a.k_stride[3], a.E, 1) || !strideIs(a.k_stride[1], a.Hk, a.E) || !strideIs(a.k_stride[2], a.Sk, row))
    return "K/V not [tokens, Hk, E] contiguous";
  const int64_t batch_stride = a.B == 1 ? 0 : a.k_stride[0];
  if (batch_stride % row != 0) return "sequences not a whole number of key rows apart";
  *rows = batch_stride / row;
  return "";
}

}  // namespace

std::string PagedViewOfDenseAttention(const AttentionParams& a, DensePagedView* view) {
  std::string why = semanticsMismatch(a);
  int64_t rows = 0;
  if (why.empty()) why = layoutMismatch(a, &rows);
  if (!why.empty()) return why;
  int64_t bs = kDenseViewBlockSize;
  while (rows % bs != 0) bs /= 2;  // rows = 0 keeps the largest
  const char* too_big = "more sequences or blocks than the paged kernel's int32 metadata holds";
  if (a.B > INT32_MAX - 1 || a.Sk > INT32_MAX) return too_big;
  const int64_t seq_blocks = rows / bs, max_blocks = (a.Sk + bs - 1) / bs;
  if (seq_blocks > 0 && a.B - 1 > (INT32_MAX - max_blocks) / seq_blocks) return too_big;
  const int64_t num_blocks = (a.B - 1) * seq_blocks + max_blocks;  // the blocks any sequence reads
  if (a.B * max_blocks > (int64_t{1} << 28)) return too_big;  // the table's host and device copies

  DensePagedView v;
  PagedAttentionParams& p = v.params;
  p.dtype = p.cache_dtype = a.dtype;
  p.q = a.q;
  p.q_stride[0] = a.q_stride[0];  // the sequence is the token (one query each)
  p.q_stride[1] = a.q_stride[1];
  p.key_cache = a.k;
  p.value_cache = a.v;
  p.block_table_stride = p.max_blocks = max_blocks;
  p.num_tokens = p.num_seqs = a.B;
  p.heads_q = a.Hq;
  p.heads_kv = a.Hk;
  p.head_size = a.E;
  p.num_blocks = num_blocks;
  p.block_size = bs;
  p.scale = a.scale;
  p.out = a.out;
  p.o_stride[0] = a.o_stride[0];
  p.o_stride[1] = a.o_stride[1];
  p.out_dtype = a.out_dtype;
  p.out_scale = a.out_dtype == DType::F8E4M3FN ? a.out_scale : nullptr;
  v.block_table.resize(static_cast<size_t>(a.B * max_blocks));
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t i = 0; i < max_blocks; ++i)
      v.block_table[static_cast<size_t>(b * max_blocks + i)] = static_cast<int32_t>(b * seq_blocks + i);
  v.seq_lens.assign(static_cast<size_t>(a.B), static_cast<int32_t>(a.Sk));
  v.query_start_loc.resize(static_cast<size_t>(a.B + 1));
  for (int64_t b = 0; b <= a.B; ++b) v.query_start_loc[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  *view = std::move(v);
  return "";
}

cudaError_t PrepareDensePagedView(const DensePagedView& view, int num_sms, PagedAttentionParams* params,
                                  void** device_memory) {
  PagedAttentionParams p = view.params;
  PlanPagedAttentionSplits(p, num_sms);
  // The split workspace (fp32) at offset 0, then the int32 arrays.
  const size_t ws_bytes = static_cast<size_t>(PagedAttentionWorkspaceBytes(p));
  const std::vector<int32_t>* arrays[] = {&view.block_table, &view.seq_lens, &view.query_start_loc};
  size_t bytes = ws_bytes;
  for (const auto* a : arrays) bytes += a->size() * sizeof(int32_t);
  *device_memory = nullptr;
  if (cudaError_t e = cudaMalloc(device_memory, bytes); e != cudaSuccess) return e;
  int32_t* next = reinterpret_cast<int32_t*>(static_cast<char*>(*device_memory) + ws_bytes);
  const int32_t* copies[3];
  for (int i = 0; i < 3; ++i) {
    const size_t n = arrays[i]->size() * sizeof(int32_t);
    if (cudaError_t e = cudaMemcpy(next, arrays[i]->data(), n, cudaMemcpyHostToDevice); e != cudaSuccess) return e;
    copies[i] = next;
    next += arrays[i]->size();
  }
  p.block_table = copies[0];
  p.seq_lens = copies[1];
  p.query_start_loc = copies[2];
  p.workspace = ws_bytes ? static_cast<float*>(*device_memory) : nullptr;
  *params = p;
  return cudaSuccess;
}

}  // namespace fxfuse::runtime
