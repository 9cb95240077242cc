#!/usr/bin/env bash
# Hostile, malformed and huge inputs through every subcommand: each case must end with its
# documented exit code (2: bad input; 0 where the input is only shown, not computed on),
# exactly one line on stderr, no signal and no sanitizer report. Also run under
# `bazel test --config=asan` by tools/test.sh. Inputs are generated here from
# tests/ir/data (args: FXFUSE DATA_DIR).
set -uo pipefail
FXFUSE="$1"
DATA="$2"   # tests/ir/data
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0; passes=0

python3 - "$DATA" "$T" <<'PY'
import json, os, struct, sys, zipfile, zlib
data, t = sys.argv[1], sys.argv[2]
def w(name, text):
    with open(os.path.join(t, name), "w") as f: f.write(text)

small = """fxfuse.module {
  symbol s0 range=[1, 8192] hint=16
  graph @main {
    input %1 "x": f32[s0, 64]
    %2: f32[s0, 64] = aten.neg.default(self=%1)  // neg
    output %2
  }
}
"""
w("small.fxg", small)
with open(os.path.join(t, "latin1_group.fxg"), "wb") as f:  # a process group "tp:\xe1": Latin-1, not UTF-8
    f.write(b"""fxfuse.module {
  graph @main {
    input %1 "x": bf16[4, 64]
    %2: bf16[4, 64] = vllm.all_reduce.default(tensor=%1, group_name="tp:\xe1")  // all_reduce
    output %2
  }
}
""")
with open(os.path.join(t, "latin1_name.fxg"), "wb") as f:  # an input named "sc\xe1le": Latin-1, not UTF-8
    f.write(small.replace('"x"', '"sc\\xe1le"').encode().replace(b"\\xe1", b"\xe1"))
w("zero_batch_huge_strides.fxg", """fxfuse.module {
  symbol s0 range=[4, 4096] hint=16
  graph @main {
    input %1 "x": f32[0, 4, s0]
    input %2 "w": f32[8, 4, 0] parameter "conv.weight"
    %3: f32[1, 8, s0] = aten.convolution.default(input=%1, weight=%2, bias=None, stride=[1], padding=[0], dilation=[4611686018427387904], transposed=false, output_padding=[0], groups=1)  // conv
    output %3
  }
}
""")
w("mm.fxg", """fxfuse.module {
  graph @main {
    input %1 "x": bf16[4, 64]
    input %2 "w": bf16[64, 32]
    %3: bf16[4, 32] = aten.mm.default(self=%1, mat2=%2)  // mm
    output %3
  }
}
""")
w("hint62.fxg", small.replace("range=[1, 8192] hint=16", "range=[1, ?] hint=4611686018427387904"))
w("bigdim.fxg", small.replace("f32[s0, 64]", "f32[9223372036854775807]"))
w("bigdim64.fxg", small.replace("f32[s0, 64]", "f32[9223372036854775807, 64]"))
w("max_empty.fxg", small.replace("f32[s0, 64]", "f32[Max(), 64]"))
w("min_empty.fxg", small.replace("f32[s0, 64]", "f32[Min(), 64]"))
w("bracket.fxg", small.replace('"x": f32[s0, 64]', '"x": f32[(s0, 64]'))
w("div0.fxg", small.replace('"x": f32[s0, 64]', '"x": f32[s0//0, 64]'))
w("mod0.fxg", small.replace('"x": f32[s0, 64]', '"x": f32[Mod(s0, 0), 64]'))
w("bad_range.fxg", small.replace("range=[1, 8192] hint=16", "range=[100, 1]"))
w("hint_outside.fxg", small.replace("range=[1, 8192] hint=16", "range=[1, 8] hint=16"))
w("negsize.fxg", small.replace('"x": f32[s0, 64]', '"x": f32[-5, 64]').replace("%2: f32[s0, 64]", "%2: f32[-5, 64]"))
w("infsize.fxg", small.replace('"x": f32[s0, 64]', '"x": f32[oo, 64]').replace("%2: f32[s0, 64]", "%2: f32[int_oo, 64]"))
w("missing_operand.fxg", small.replace("aten.neg.default(self=%1)", "aten.neg.default()"))
w("string_operand.fxg", small.replace("aten.neg.default(self=%1)", 'aten.neg.default(self="hello")'))
w("inplace_input.fxg", """fxfuse.module {
  graph @main {
    input %1 "x": bf16[4, 64]
    input %2 "r": bf16[4, 64]
    input %3 "w": bf16[64]
    _C.fused_add_rms_norm.default(input=%1, residual=%2, weight=%3, epsilon=1e-05)  // norm
    output %1
  }
}
""")
w("number_weight_custom.fxg", """fxfuse.module {
  graph @main {
    input %1 "x": bf16[4, 64]
    %2: bf16[4, 64] = aten.empty.memory_format(size=[4, 64], dtype=bf16)  // e
    _, %3: bf16[4, 64] = higher_order.auto_functionalized(@_C.rms_norm.default, *, result=%2, input=%1, weight=0.5, epsilon=1e-05)  // norm
    output %3
  }
}
""")
w("number_residual.fxg", """fxfuse.module {
  graph @main {
    input %1 "x": bf16[4, 64]
    input %2 "w": bf16[64]
    %3: bf16[4, 64], %4: bf16[4, 64] = fxfuse.fused_add_rms_norm.default(input=%1, residual=52, weight=%2, epsilon=1e-05)  // norm
    output %3
    output %4
  }
}
""")
w("extra_positional.fxg", small.replace("aten.neg.default(self=%1)", "aten.neg.default(%1, %1)"))
w("unknown_keyword.fxg", small.replace("aten.neg.default(self=%1)", "aten.neg.default(self=%1, alpha=2)"))
w("positional_and_keyword.fxg", small.replace("aten.neg.default(self=%1)", "aten.neg.default(%1, self=%1)"))
# A split whose pieces are declared with another rank than the op gives them (a 2-D input
# split into 1-D pieces; an unbind whose pieces keep the dim).
w("split_rank.fxg", small.replace("%2: f32[s0, 64] = aten.neg.default(self=%1)  // neg",
    "%2: f32[32], %3: f32[32] = aten.split.Tensor(self=%1, split_size=32, dim=1)  // split"))
w("unbind_rank.fxg", small.replace("%2: f32[s0, 64] = aten.neg.default(self=%1)  // neg",
    "%2: f32[1, 64] = aten.unbind.int(self=%1, dim=0)  // unbind"))
w("unknown_op.fxg", small.replace("aten.neg.default(self=%1)", "aten.frobnicate.default(self=%1)"))
w("graph_ref.fxg", small.replace("aten.neg.default(self=%1)", "aten.neg.default(self=%1, extra=graph(5))"))
depth = 30000
w("deep.fxg", small.replace("aten.neg.default(self=%1)", "aten.neg.default(self=%1, x=" + "[" * depth + "]" * depth + ")"))

# torch.export JSON: Max() in a symbolic size, and 30,000 nested lists as an argument.
doc = json.load(open(os.path.join(data, "cond.model.json")))
g = doc["graph_module"]["graph"]
d = json.loads(json.dumps(doc))
for k in d["graph_module"]["graph"]["sym_int_values"]:
    d["graph_module"]["graph"]["sym_int_values"][k] = {"as_expr": {"expr_str": "Max()", "hint": None}}
json.dump(d, open(os.path.join(t, "max_expr.json"), "w"))
d = json.loads(json.dumps(doc))
arg = {"as_ints": [1]}
deep = "[" * depth + "1" + "]" * depth
text = json.dumps(d).replace('"graph_module"', '"deep": ' + deep + ', "graph_module"', 1)
open(os.path.join(t, "deep_export.json"), "w").write(text)
# fxfuse protobuf JSON with an ESC/CR-laden key: the error must not echo raw control bytes.
open(os.path.join(t, "ctrl.json"), "w").write('{"graphs": "\\u001b[31mred\\r\\nx"}')
# fxfuse protobuf JSON nested 30,000 deep.
open(os.path.join(t, "deep_proto.json"), "w").write('{"graphs": ' + "[" * depth + "]" * depth + "}")

# .pt2: a weight with negative strides; a member with a bad CRC-32.
src = os.path.join(data, "core_aten.pt2")
zin = zipfile.ZipFile(src)
def rewrite(out, edit):
    with zipfile.ZipFile(os.path.join(t, out), "w") as z:
        for info in zin.infolist():  # a fresh ZipInfo: writestr updates the one it gets
            z.writestr(zipfile.ZipInfo(info.filename, info.date_time), edit(info.filename, zin.read(info.filename)))
def neg_strides(name, b):
    if not name.endswith("model_weights_config.json"): return b
    cfg = json.loads(b)
    cfg["config"]["up.weight"]["tensor_meta"]["strides"] = [{"as_int": -64}, {"as_int": 1}]
    return json.dumps(cfg).encode()
rewrite("neg_stride.pt2", neg_strides)
def huge_view(name, b):
    if not name.endswith("model_weights_config.json"): return b
    cfg = json.loads(b)
    cfg["config"]["up.weight"]["tensor_meta"]["strides"] = [{"as_int": 1 << 40}, {"as_int": 1}]
    return json.dumps(cfg).encode()
rewrite("past_payload.pt2", huge_view)
raw = bytearray(open(src, "rb").read())
member = b"core_aten/models/model.json"
for sig, crc_at, name_len_at, hdr in ((b"PK\x03\x04", 14, 26, 30), (b"PK\x01\x02", 16, 28, 46)):
    i = 0
    while (i := raw.find(sig, i)) >= 0:
        n = struct.unpack_from("<H", raw, i + name_len_at)[0]
        if raw[i + hdr:i + hdr + n] == member:
            struct.pack_into("<I", raw, i + crc_at, struct.unpack_from("<I", raw, i + crc_at)[0] ^ 0xFFFF)
        i += 4
open(os.path.join(t, "bad_crc.pt2"), "wb").write(bytes(raw))
open(os.path.join(t, "a_file"), "w").write("not a directory\n")
PY

# run_case NAME WANT_RC -- fxfuse args...: exit code, one stderr line, no signal/sanitizer.
run_case() {
  local name="$1" want="$2"; shift 3
  "$FXFUSE" "$@" >"$T/stdout" 2>"$T/stderr" </dev/null
  local rc=$? lines
  lines=$(wc -l <"$T/stderr")
  local why=""
  if (( rc > 128 )); then why="killed by signal $((rc - 128))"
  elif [[ $rc -ne $want ]]; then why="exit code $rc (want $want)"
  elif grep -qE 'Sanitizer|runtime error' "$T/stderr"; then why="sanitizer report"
  elif [[ $want -ne 0 && $lines -ne 1 ]]; then why="$lines lines on stderr (want 1)"
  elif [[ $want -ne 0 ]] && LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/stderr"; then why="raw control bytes on stderr"
  fi
  if [[ -n $why ]]; then
    echo "FAIL $name: $why"; head -c 2000 "$T/stderr"; fails=$((fails+1))
  else
    echo "ok   $name: $(head -c 300 "$T/stderr")"; passes=$((passes+1))
  fi
}
expect_msg() {  # expect_msg NAME PATTERN: the last stderr must contain PATTERN
  if grep -q -- "$2" "$T/stderr"; then passes=$((passes+1)); else echo "FAIL $1: message lacks '$2'"; fails=$((fails+1)); fi
}

# 1. Sizes that wrap int64 (the interpreter's allocations used to under-allocate).
run_case bind_huge 2 -- verify "$T/small.fxg" --bind s0=2305843009213693953; expect_msg bind_huge "overflows int64"
run_case bind_huge_run 2 -- run "$T/small.fxg" --cpu-only --bind s0=2305843009213693953
run_case bind_budget 2 -- verify "$T/small.fxg" --bind s0=1099511627776; expect_msg bind_budget "budget"
run_case bind_negative 2 -- verify "$T/small.fxg" --bind s0=-5; expect_msg bind_negative "negative"
# An output of no elements (batch 0) whose other sizes multiply past int64 (a dilation of 2^62):
# the interpreter's contiguous strides wrapped (a pipeline fuzz finding); refused in one line
# that names the file (errors past the readers are prefixed with the command's input).
run_case zero_batch_strides 2 -- verify "$T/zero_batch_huge_strides.fxg"
expect_msg zero_batch_strides "zero_batch_huge_strides.fxg: graph @main: node 'conv' (aten.convolution.default): the contiguous strides of shape \[0, 8, 4611686018427387920\] overflow int64"
# Inputs that fit the budget one by one but not together (18,432 bytes of doubles, w alone
# 16,384): refused before the first is made, naming the largest.
FXFUSE_INTERP_MAX_BYTES=17000 run_case inputs_over_budget 2 -- verify "$T/mm.fxg"
expect_msg inputs_over_budget "graph @main's inputs (the largest: 'w'"
run_case hint_2_62 2 -- verify "$T/hint62.fxg"; expect_msg hint_2_62 "input 'x'"
run_case hint_2_62_run 2 -- run "$T/hint62.fxg" --cpu-only
run_case dim_int64_max 2 -- verify "$T/bigdim.fxg"
run_case dim_int64_max_x64 2 -- run "$T/bigdim64.fxg" --cpu-only
run_case dim_int64_max_convert 2 -- convert "$T/bigdim64.fxg" -o "$T/out.fxg"

# 2. A weight with negative strides, or a view past its payload, in a .pt2.
run_case neg_stride_weight 2 -- verify "$T/neg_stride.pt2"; expect_msg neg_stride_weight "negative stride"
run_case neg_stride_weight_run 2 -- run "$T/neg_stride.pt2" --cpu-only
run_case weight_past_payload 2 -- inspect "$T/past_payload.pt2"; expect_msg weight_past_payload "up.weight"

# 3. Max()/Min() with no arguments in a symbolic size.
run_case max_empty_verify 2 -- verify "$T/max_empty.fxg"; expect_msg max_empty_verify "Max"
run_case max_empty_plan 2 -- compile "$T/max_empty.fxg" --emit=plan-text -o "$T/p.txt"
run_case max_empty_run 2 -- run "$T/max_empty.fxg" --cpu-only
run_case min_empty_convert 2 -- convert "$T/min_empty.fxg" -o "$T/out.fxg"
run_case max_expr_export_json 2 -- verify "$T/max_expr.json"

# 4. Missing operands and strings where a tensor goes: refused before any pass.
run_case missing_operand_plan 2 -- compile "$T/missing_operand.fxg" --emit=plan-text -o "$T/p.txt"
expect_msg missing_operand_plan "node 'neg' (aten.neg.default): argument 'self' is missing"
run_case missing_operand_describe 2 -- run "$T/missing_operand.fxg" --describe
# Arguments the schema does not take: refused, not dropped (torch refuses them too).
run_case extra_positional_verify 2 -- verify "$T/extra_positional.fxg"
expect_msg extra_positional_verify "node 'neg' (aten.neg.default): 2 positional arguments, its schema takes 1"
run_case unknown_keyword_plan 2 -- compile "$T/unknown_keyword.fxg" --emit=plan-text -o "$T/p.txt"
expect_msg unknown_keyword_plan "node 'neg' (aten.neg.default): no argument 'alpha' in its schema"
run_case positional_and_keyword_run 2 -- run "$T/positional_and_keyword.fxg" --cpu-only
expect_msg positional_and_keyword_run "argument 'self' is given by position and by keyword"
# Split pieces of the wrong rank: refused at import, before any pass reads their shapes.
run_case split_rank_compile 2 -- compile "$T/split_rank.fxg" -o "$T/p.pb"
expect_msg split_rank_compile "node 'split' (aten.split.Tensor): output 0 is 1-D, but the pieces of a 2-D input are 2-D"
run_case split_rank_run 2 -- run "$T/split_rank.fxg" --cpu-only
run_case unbind_rank_verify 2 -- verify "$T/unbind_rank.fxg"
expect_msg unbind_rank_verify "node 'unbind' (aten.unbind.int): output 0 is 2-D, but the pieces of a 2-D input are 1-D"
run_case string_operand_plan 2 -- compile "$T/string_operand.fxg" --emit=plan -o "$T/p.pb"
expect_msg string_operand_plan "must be a tensor, got a string"
run_case string_operand_verify 2 -- verify "$T/string_operand.fxg"
# The same in a vLLM op, called through auto_functionalized: canonicalization read the number
# as no weight and made an unweighted fxfuse.rms_norm of it.
run_case number_weight_custom 2 -- compile "$T/number_weight_custom.fxg" -o "$T/out.fxg"
expect_msg number_weight_custom "node 'norm' (higher_order.auto_functionalized of _C.rms_norm.default): argument 'weight' must be a tensor, got a float"
# An in-place op on a graph input (the functionalize pass leaves it: the caller sees the
# write): refused at lowering, not dropped from the plan with the input returned unnormalized.
run_case inplace_input_plan 2 -- compile "$T/inplace_input.fxg" --emit=plan -o "$T/p.pb"
expect_msg inplace_input_plan "node 'norm' (_C.fused_add_rms_norm.default): writes its argument 'input' (graph input x) in place"
# A number in a tensor slot of fxfuse's own ops (aten's wrap numbers into 0-d tensors; ours never
# do, and lowering read it as no residual: a pipeline fuzz finding).
run_case number_residual_plan 2 -- compile "$T/number_residual.fxg" --emit=plan -o "$T/p.pb"
expect_msg number_residual_plan "node 'norm' (fxfuse.fused_add_rms_norm.default): argument 'residual' must be a tensor, got an integer"
run_case unknown_op_compile 2 -- compile "$T/unknown_op.fxg"; expect_msg unknown_op_compile "unknown op aten.frobnicate.default"
run_case unknown_op_verify 2 -- verify "$T/unknown_op.fxg"
run_case unknown_op_convert 0 -- convert "$T/unknown_op.fxg" -o "$T/out.fxg"
run_case unknown_op_inspect 0 -- inspect "$T/unknown_op.fxg"

# 5. Attributes nested 30,000 deep.
run_case deep_fxg_convert 2 -- convert "$T/deep.fxg" -o "$T/out.fxg"; expect_msg deep_fxg_convert "nested"
run_case deep_fxg_inspect 2 -- inspect "$T/deep.fxg"
run_case deep_fxg_verify 2 -- verify "$T/deep.fxg"
run_case deep_export_json 2 -- inspect "$T/deep_export.json"
run_case deep_proto_json 2 -- convert "$T/deep_proto.json" -o "$T/out.fxg"

# 6. Plan fields and numeric flags out of range.
"$FXFUSE" compile "$T/small.fxg" --emit=plan-text -o "$T/small.plan.txt" -q 2>"$T/stderr" ||
  { echo "FAIL: cannot lower small.fxg"; cat "$T/stderr"; fails=$((fails+1)); }
sed 's/^world_size: .*/world_size: 100000/' "$T/small.plan.txt" >"$T/ws.plan.txt"
grep -q '^world_size: 100000' "$T/ws.plan.txt" || echo 'world_size: 100000' >>"$T/ws.plan.txt"
run_case plan_world_size 2 -- run "$T/ws.plan.txt" --cpu-only; expect_msg plan_world_size "world_size"
python3 - "$T/small.plan.txt" "$T/hint.plan.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text, n = re.subn(r"hint: \d+", "hint: 4611686018427387904", text)
text = re.sub(r"max: \d+", "max: 4611686018427387904", text)
assert n > 0, "the plan has no hint"
open(sys.argv[2], "w").write(text)
PY
run_case plan_hint_2_62 2 -- run "$T/hint.plan.txt" --cpu-only
run_case plan_hint_2_62_describe 2 -- run "$T/hint.plan.txt" --describe
# Every tensor a step names is checked, the optional ones too (a matmul's scale_d was not).
"$FXFUSE" compile "$T/mm.fxg" --emit=plan-text -o "$T/mm.plan.txt" -q 2>"$T/stderr" ||
  { echo "FAIL: cannot lower mm.fxg"; cat "$T/stderr"; fails=$((fails+1)); }
for field in scale_d a c; do
  python3 - "$T/mm.plan.txt" "$T/mm_$field.plan.txt" "$field" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
field = sys.argv[3]
text, n = re.subn(r"(matmul \{\n)", r"\g<1>    %s: 99999\n" % field, text, count=1)
assert n == 1, "the plan has no matmul step"
text = re.sub(r"(matmul \{\n    %s: 99999\n(?:.*\n)*?)    %s: -?\d+\n" % (field, field), r"\1", text, count=1)
open(sys.argv[2], "w").write(text)
PY
  run_case "plan_matmul_$field" 2 -- run "$T/mm_$field.plan.txt" --describe
  expect_msg "plan_matmul_$field" "names tensor 99999"
done
# Names reach launch plans, whose strings must be UTF-8: refused at the door (a pipeline fuzz
# finding: the plan of such a graph did not load back).
run_case name_not_utf8 2 -- compile "$T/latin1_name.fxg" -o "$T/out.plan"
expect_msg name_not_utf8 "an input's name is not UTF-8"
# A string argument that becomes a plan string (the all-reduce's process group): refused at the
# door, not written into a plan that no fxfuse reads back.
run_case group_not_utf8 2 -- compile "$T/latin1_group.fxg" --world-size=2 --emit=plan-text -o "$T/out.plan"
expect_msg group_not_utf8 "argument 'group_name' is not UTF-8"
# A field this fxfuse does not know (field 127 inside the arena: a second `arena`, field 17,
# merges into the first), a string that is not UTF-8, a matmul without its m: refused at load,
# not ignored or thrown later (plan fuzz findings).
"$FXFUSE" compile "$T/mm.fxg" --emit=plan -o "$T/mm.plan.pb" -q 2>"$T/stderr"
python3 - "$T" <<'PY'
import re, sys
t = sys.argv[1]
open(t + "/unknown.plan.pb", "wb").write(open(t + "/mm.plan.pb", "rb").read() + b"\x8a\x01\x03\xf8\x07\x01")
text = open(t + "/mm.plan.txt").read()
open(t + "/utf8.plan.txt", "w").write(text.replace('producer: "', 'producer: "\\377', 1))
text, n = re.subn(r"\n    m \{\n(      .*\n)*?    \}", "", text, count=1)
assert n == 1, "the matmul has no m"
open(t + "/no_m.plan.txt", "w").write(text)
PY
run_case plan_unknown_field 2 -- run "$T/unknown.plan.pb" --describe
expect_msg plan_unknown_field "a field this fxfuse does not know (in Arena"
run_case plan_not_utf8 2 -- run "$T/utf8.plan.txt" --describe
expect_msg plan_not_utf8 "Plan.producer is not UTF-8"
run_case plan_matmul_no_m 2 -- run "$T/no_m.plan.txt" --describe
expect_msg plan_matmul_no_m "step m 0: empty symbolic expression"
# A generated kernel's name is its entry point, and `fxfuse embed` writes it into C++: a name
# that is not an identifier is refused at load. So are a plan path or header that would change
# the sources embed writes (a line break ends its comment, a quote its #include).
"$FXFUSE" compile "$T/small.fxg" --emit=plan-text -o "$T/small.plan.txt" -q 2>"$T/stderr"
python3 - "$T" <<'PY'
import sys
t = sys.argv[1]
text = open(t + "/small.plan.txt").read()
assert '\n  name: "fx_k0"\n' in text, "the plan has no generated kernel fx_k0"
open(t + "/kernel_name.plan.txt", "w").write(text.replace('\n  name: "fx_k0"\n', '\n  name: "fx_k0(); int x"\n', 1))
PY
run_case plan_kernel_name 2 -- run "$T/kernel_name.plan.txt" --describe
expect_msg plan_kernel_name "generated kernel 0 is named 'fx_k0(); int x', not an identifier"
run_case embed_kernel_name 2 -- embed "$T/kernel_name.plan.txt" --name p --cu "$T/p.cu" --cc "$T/p.cc" --header "$T/p.h"
# A kernel that checks its index reads lists them (the runtime reads the record of those that
# do): a plan whose lists were dropped, or added to a kernel without checks, is refused at load.
cat >"$T/embed.fxg" <<'FXG'
fxfuse.module {
  graph @main {
    input %1 "ids": i64[4]
    input %2 "w": f32[16, 8] parameter "embed.weight"
    input %3 "x": f32[5]
    %4: f32[4, 8] = aten.embedding.default(weight=%2, indices=%1)  // embed
    %5: f32[5] = aten.neg.default(self=%3)  // negated
    output %4
    output %5
  }
}
FXG
"$FXFUSE" compile "$T/embed.fxg" --emit=plan-text -o "$T/embed.plan.txt" -q 2>"$T/stderr"
python3 - "$T" <<'PY'
import re, sys
t = sys.argv[1]
text = open(t + "/embed.plan.txt").read()
sites = re.compile(r"\n  index_sites \{\n(    .*\n)*?  \}")
assert len(sites.findall(text)) == 1, "want one kernel with index sites"
open(t + "/no_sites.plan.txt", "w").write(sites.sub("", text))
other = re.search(r'\n  name: "(fx_k\d+)"\n  source: "(?:[^"\\]|\\.)*"\n(?:  .*\n)*?  kind: "\w+"\n(?!  index_sites)', text)
assert other and "fx_index_error" not in other.group(0), "want a kernel without index checks"
end = other.end()
open(t + "/extra_sites.plan.txt", "w").write(text[:end] + '  index_sites {\n    node: "negated"\n    op: "gather"\n  }\n' + text[end:])
PY
run_case plan_index_sites_dropped 2 -- run "$T/no_sites.plan.txt" --describe
expect_msg plan_index_sites_dropped "checks index reads but lists no index sites"
run_case plan_index_sites_added 2 -- run "$T/extra_sites.plan.txt" --describe
expect_msg plan_index_sites_added "lists index sites but its source checks none"
newline_path="$T/line"$'\n'"break.plan.txt"
cp "$T/small.plan.txt" "$newline_path"
run_case embed_path_newline 2 -- embed "$newline_path" --name p --cu "$T/p.cu" --cc "$T/p.cc" --header "$T/p.h"
expect_msg embed_path_newline "the plan path has a control character, quote or backslash"
run_case embed_include_quote 2 -- embed "$T/small.plan.txt" --name p --cu "$T/p.cu" --cc "$T/p.cc" \
  --header "$T/p.h" --include 'p.h"'
expect_msg embed_include_quote "include has a control character, quote or backslash"
if [[ -e $T/p.cu || -e $T/p.cc || -e $T/p.h ]]; then echo "FAIL embed wrote sources"; fails=$((fails+1)); else passes=$((passes+1)); fi
run_case embed_ok 0 -- embed "$T/small.plan.txt" --name p --cu "$T/p.cu" --cc "$T/p.cc" --header "$T/p.h"
if grep -q 'p_fx_k0' "$T/p.cu"; then passes=$((passes+1)); else echo "FAIL embed_ok: no p_fx_k0 entry"; fails=$((fails+1)); fi
for ws in 0 -1 9 1000000; do
  run_case "compile_world_size_$ws" 2 -- compile "$T/small.fxg" --world-size "$ws"
  run_case "verify_world_size_$ws" 2 -- verify "$T/small.fxg" --world-size "$ws"
done
run_case run_world_size_9 2 -- run "$T/small.fxg" --cpu-only --world-size 9
run_case diff_world_size_0 2 -- diff "$T/small.fxg" --after-passes=default --world-size 0
run_case allreduce_max_bytes_junk 2 -- compile "$T/small.fxg" --allreduce-max-bytes 2=5junk
run_case allreduce_max_bytes_ws 2 -- compile "$T/small.fxg" --allreduce-max-bytes 16=5
run_case timeout_nan 2 -- run "$T/small.fxg" --cpu-only --timeout-s nan
run_case rtol_nan 2 -- verify "$T/small.fxg" --rtol nan
run_case fp8_frac_range 2 -- verify "$T/small.fxg" --fp8-frac 2
run_case bench_iters_0 2 -- bench "$T/small.fxg" --iters 0
run_case bench_ablate_no_graph 2 -- bench "$T/small.fxg" --ablate 3 --no-graph
expect_msg bench_ablate_no_graph "bench --ablate times CUDA graph replays on one GPU (not with --no-graph)"
run_case bench_ablate_world 2 -- bench "$T/small.fxg" --ablate 3 --world-size 2
expect_msg bench_ablate_world "not with --world-size > 1"
run_case bench_timeline_no_graph 2 -- bench "$T/small.fxg" --timeline 3 --no-graph
expect_msg bench_timeline_no_graph "bench --timeline records CUDA graph replays on one GPU (not with --no-graph)"
run_case bench_timeline_world 2 -- bench "$T/small.fxg" --timeline 3 --world-size 2
expect_msg bench_timeline_world "not with --world-size > 1"
run_case bench_trace_alone 2 -- bench "$T/small.fxg" --trace "$T/trace.json"
expect_msg bench_trace_alone "bench --trace needs --timeline N"
run_case bench_timeline_range 2 -- bench "$T/small.fxg" --timeline 1001

# 7. Accepted silently before: unbalanced dims, zero divisors, empty ranges, bad CRCs.
run_case unbalanced_dims 2 -- convert "$T/bracket.fxg" -o "$T/out.fxg"; expect_msg unbalanced_dims "unbalanced"
run_case floordiv_zero 2 -- convert "$T/div0.fxg" -o "$T/out.fxg"; expect_msg floordiv_zero "division by zero"
run_case mod_zero 2 -- convert "$T/mod0.fxg" -o "$T/out.fxg"; expect_msg mod_zero "division by zero"
run_case empty_range 2 -- convert "$T/bad_range.fxg" -o "$T/out.fxg"; expect_msg empty_range "empty range"
run_case hint_outside_range 2 -- inspect "$T/hint_outside.fxg"; expect_msg hint_outside_range "above its maximum"
run_case bad_crc 2 -- inspect "$T/bad_crc.pt2"; expect_msg bad_crc "CRC"

# 8. User mistakes are exit 2, not "internal error" (3).
run_case negative_input_size 2 -- verify "$T/negsize.fxg"; expect_msg negative_input_size "negative size"
run_case infinite_input_size 2 -- compile "$T/infsize.fxg" -o "$T/out.plan"; expect_msg infinite_input_size "size 0 is infinite"
run_case missing_graph_ref 2 -- compile "$T/graph_ref.fxg"; expect_msg missing_graph_ref "missing graph"
run_case dump_dir_on_file 2 -- compile "$T/small.fxg" --dump-dir "$T/a_file"; expect_msg dump_dir_on_file "dump-dir"

# 9. Error messages escape control characters from the input.
run_case control_chars 2 -- convert "$T/ctrl.json" -o "$T/out.fxg"; expect_msg control_chars '\\x1b\[31mred\\r'

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
