// The rows of ir/op_table.h. Canonical ops: `kind` of quant_fp8 is "static_tensor" |
// "dynamic_token" | "dynamic_tensor" | "dynamic_group". Fused ops: each computes exactly the
// composition of the canonical ops in its `fused_from`, rounding where they round
// (docs/canonical-ops.md).
#include "ir/op_table.h"

namespace fxfuse::ir {

const std::vector<FxfuseOpInfo>& fxfuseOps() {
  static const std::vector<FxfuseOpInfo> kOps = {
    {"rms_norm", FxfuseOpKind::Canonical,
     "fxfuse::rms_norm(Tensor input, Tensor? weight, float epsilon, ScalarType? norm_dtype=None) -> Tensor",
     {}},
    {"fused_add_rms_norm", FxfuseOpKind::Canonical,
     "fxfuse::fused_add_rms_norm(Tensor input, Tensor residual, Tensor? weight, float epsilon, bool variance_of_rounded_sum=False, ScalarType? norm_dtype=None) -> (Tensor out, Tensor residual_out)",
     {}},
    {"quant_fp8", FxfuseOpKind::Canonical,
     "fxfuse::quant_fp8(Tensor input, Tensor? scale, str kind, int group_size=0, bool column_major_scales=False, Tensor? scale_ub=None, bool divide=False, float min_abs=0.0, float min_scale=4.359654017857143e-06, bool scale_ue8m0=False) -> (Tensor q, Tensor scale_out)",
     {}},
    {"silu_and_mul", FxfuseOpKind::Canonical,
     "fxfuse::silu_and_mul(Tensor input, Tensor? up=None) -> Tensor",
     {}},
    {"attention", FxfuseOpKind::Canonical,
     "fxfuse::attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, bool is_causal=False, float? scale=None, bool enable_gqa=False, str layout='bhsd', str layer_name='') -> Tensor",
     {}},
    {"paged_attention", FxfuseOpKind::Canonical,
     "fxfuse::paged_attention(Tensor query, Tensor key, Tensor value, Tensor key_cache, Tensor value_cache, Tensor slot_mapping, Tensor block_table, Tensor seq_lens, Tensor query_start_loc, Tensor? k_scale=None, Tensor? v_scale=None, Tensor? output_scale=None, float? scale=None, str layer_name='') -> (Tensor out, Tensor key_cache_out, Tensor value_cache_out)",
     {}, /*opt_in=*/true},
    {"all_reduce", FxfuseOpKind::Canonical,
     "fxfuse::all_reduce(Tensor input, str group_name='', str reduce_op='sum') -> Tensor",
     {}},
    {"rms_norm_quant", FxfuseOpKind::Fused,
     "fxfuse::rms_norm_quant(Tensor input, Tensor? weight, float epsilon, Tensor? scale, str kind, int group_size=0, bool column_major_scales=False, Tensor? scale_ub=None, ScalarType? norm_dtype=None, bool divide=False, float min_abs=0.0, float min_scale=4.359654017857143e-06, bool scale_ue8m0=False) -> (Tensor q, Tensor scale_out)",
     {"rms_norm", "quant_fp8"}},
    {"fused_add_rms_norm_quant", FxfuseOpKind::Fused,
     "fxfuse::fused_add_rms_norm_quant(Tensor input, Tensor residual, Tensor? weight, float epsilon, Tensor? scale, str kind, int group_size=0, bool column_major_scales=False, Tensor? scale_ub=None, bool variance_of_rounded_sum=True, ScalarType? norm_dtype=None, bool divide=False, float min_abs=0.0, float min_scale=4.359654017857143e-06, bool scale_ue8m0=False) -> (Tensor q, Tensor residual_out, Tensor scale_out)",
     {"fused_add_rms_norm", "quant_fp8"}},
    {"silu_and_mul_quant", FxfuseOpKind::Fused,
     "fxfuse::silu_and_mul_quant(Tensor input, Tensor scale, Tensor? up=None) -> Tensor",
     {"silu_and_mul", "quant_fp8"}},
    {"attention_quant", FxfuseOpKind::Fused,
     "fxfuse::attention_quant(Tensor query, Tensor key, Tensor value, Tensor output_scale, Tensor? attn_mask=None, bool is_causal=False, float? scale=None, bool enable_gqa=False, str layout='bhsd', str layer_name='') -> Tensor",
     {"attention", "quant_fp8"}},
    {"all_reduce_rms_norm", FxfuseOpKind::Fused,
     "fxfuse::all_reduce_rms_norm(Tensor input, Tensor? residual, Tensor? weight, float epsilon, int world_size, str group_name='', bool variance_of_rounded_sum=False, ScalarType? norm_dtype=None, int max_token_num=0) -> (Tensor out, Tensor residual_out)",
     {"all_reduce", "rms_norm"}},
    {"all_reduce_rms_norm_quant", FxfuseOpKind::Fused,
     "fxfuse::all_reduce_rms_norm_quant(Tensor input, Tensor? residual, Tensor? weight, float epsilon, Tensor scale, int world_size, str group_name='', bool variance_of_rounded_sum=False, ScalarType? norm_dtype=None, bool divide=False, int max_token_num=0) -> (Tensor q, Tensor residual_out)",
     {"all_reduce", "rms_norm", "quant_fp8"}},
  };
  return kOps;
}

const FxfuseOpInfo* findFxfuseOp(std::string_view name) {
  if (name.rfind("torch.ops.", 0) == 0) name.remove_prefix(10);
  if (name.rfind("fxfuse.", 0) == 0) {
    name.remove_prefix(7);
    size_t dot = name.find('.');
    if (dot != std::string_view::npos) name = name.substr(0, dot);
  }
  for (const auto& op : fxfuseOps())
    if (op.name == name) return &op;
  return nullptr;
}

}  // namespace fxfuse::ir
