#!/usr/bin/env bash
# Corrupt and malformed inputs: each must give exit code 2, exactly one line on stderr
# naming the file, no crash (signal) and no partial output file.
set -uo pipefail
FXFUSE="$1"
DATA="$2"   # tests/ir/data
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0; passes=0

python3 - "$DATA" "$T" <<'PY'
import json, sys, zipfile, shutil, os
data, t = sys.argv[1], sys.argv[2]
raw = open(os.path.join(data, "core_aten.pt2"), "rb").read()
open(os.path.join(t, "truncated.pt2"), "wb").write(raw[: len(raw) // 2])
open(os.path.join(t, "garbage.pt2"), "wb").write(b"PK\x03\x04" + b"\x00" * 100)
with zipfile.ZipFile(os.path.join(t, "no_model.pt2"), "w") as z:
    z.writestr("archive/archive_format", "pt2")
    z.writestr("archive/data/weights/weight_0", b"1234")
with zipfile.ZipFile(os.path.join(t, "bad_member_json.pt2"), "w") as z:
    z.writestr("bad_member_json/archive_format", "pt2")
    z.writestr("bad_member_json/models/model.json", '{"graph_module": {"graph": [1, 2')
doc = json.load(open(os.path.join(data, "cond.model.json")))
open(os.path.join(t, "malformed.json"), "w").write(json.dumps(doc)[:-40])
d = json.loads(json.dumps(doc)); d["schema_version"]["major"] = 99
json.dump(d, open(os.path.join(t, "major99.json"), "w"))
d = json.loads(json.dumps(doc))
d["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = {"as_tensor": {"name": "no_such_value"}}
json.dump(d, open(os.path.join(t, "dangling.json"), "w"))
d = json.loads(json.dumps(doc))
d["graph_module"]["graph"]["sym_int_values"] = {k: {"as_expr": {"expr_str": "Add(Symbol('s77'", "hint": None}}
                                                for k in d["graph_module"]["graph"]["sym_int_values"]}
json.dump(d, open(os.path.join(t, "bad_symexpr.json"), "w"))
d = json.loads(json.dumps(doc))
d["graph_module"]["graph"]["nodes"][0]["inputs"] = {"oops": 1}
json.dump(d, open(os.path.join(t, "wrong_type.json"), "w"))
d = json.loads(json.dumps(doc))
d["graph_module"]["graph"]["nodes"][1]["inputs"][0]["arg"] = {"$type": "as_int", "$value": 3}
json.dump(d, open(os.path.join(t, "old_union.json"), "w"))
open(os.path.join(t, "not_fx.py"), "w").write("import os\nprint('hello')\n")
open(os.path.join(t, "unannotated.py"), "w").write(
    "class M(torch.nn.Module):\n    def forward(self, x):\n        mm = torch.ops.aten.mm.default(x, x)\n        return (mm,)\n")
open(os.path.join(t, "garbage.pb"), "wb").write(b"\xff\xff\xff\xff\x0f\x12")
open(os.path.join(t, "empty.json"), "w").write("")
open(os.path.join(t, "fxfuse_bad.json"), "w").write('{"graphs": [{"nodes": [{"target": "aten.neg.default", "args": [{"value": {"value": 7}}]}]}]}')
open(os.path.join(t, "cycle.fxg"), "w").write(
    "fxfuse.module {\n  graph @main {\n    input %1 \"x\": f32[4]\n"
    "    %2: f32[4] = aten.add.Tensor(self=%1, other=%3)  // a\n"
    "    %3: f32[4] = aten.neg.default(self=%2)  // b\n    output %3\n  }\n}\n")
open(os.path.join(t, "unknown_ext.xyz"), "w").write("?")
open(os.path.join(t, "corrupt.json.gz"), "wb").write(b"\x1f\x8b\x08\x00garbage")
PY

check() {  # check NAME FILE [extra args]
  local name="$1" file="$2"; shift 2
  local out="$T/out_$name.fxg"
  rm -f "$out"
  "$FXFUSE" convert "$file" -o "$out" "$@" >"$T/stdout" 2>"$T/stderr"
  local rc=$?
  local lines; lines=$(wc -l <"$T/stderr")
  local base; base=$(basename "$file")
  if [[ $rc -ne 2 ]]; then echo "FAIL $name: exit code $rc (want 2)"; cat "$T/stderr"; fails=$((fails+1)); return; fi
  if [[ $lines -ne 1 ]]; then echo "FAIL $name: $lines lines on stderr (want 1)"; cat "$T/stderr"; fails=$((fails+1)); return; fi
  if ! grep -q "$base" "$T/stderr"; then echo "FAIL $name: message does not name $base"; cat "$T/stderr"; fails=$((fails+1)); return; fi
  if [[ -e "$out" || -e "$out.tmp~" ]]; then echo "FAIL $name: partial output file left behind"; fails=$((fails+1)); return; fi
  echo "ok   $name: $(cat "$T/stderr")"; passes=$((passes+1))
}

expect_msg() {  # expect_msg NAME PATTERN: the last message must contain PATTERN
  if grep -q -- "$2" "$T/stderr"; then passes=$((passes+1)); else echo "FAIL $1: message lacks '$2'"; fails=$((fails+1)); fi
}

check truncated_zip "$T/truncated.pt2"; expect_msg truncated_zip "zip"
check garbage_zip "$T/garbage.pt2"
check no_model_json "$T/no_model.pt2"; expect_msg no_model_json "models/"
check bad_member_json "$T/bad_member_json.pt2"; expect_msg bad_member_json "models/model.json"
check malformed_json "$T/malformed.json"; expect_msg malformed_json "malformed JSON"
check schema_major_99 "$T/major99.json"; expect_msg schema_major_99 "major version 99"
check dangling_ref "$T/dangling.json"; expect_msg dangling_ref "no_such_value"
check bad_symexpr "$T/bad_symexpr.json"; expect_msg bad_symexpr "symbolic expression"
check wrong_type "$T/wrong_type.json"; expect_msg wrong_type "node "
check old_union "$T/old_union.json"; expect_msg old_union '\$type'
check not_fx_text "$T/not_fx.py"
check unannotated_fx "$T/unannotated.py"
check garbage_pb "$T/garbage.pb"
check empty_json "$T/empty.json"
check fxfuse_dangling "$T/fxfuse_bad.json"; expect_msg fxfuse_dangling "undefined value id 7"
check cycle_fxg "$T/cycle.fxg"; expect_msg cycle_fxg "cycle.fxg:4"
check unknown_ext "$T/unknown_ext.xyz"
check missing_file "$T/does_not_exist.pt2"
check corrupt_gzip "$T/corrupt.json.gz"

# Inspect must fail the same way.
"$FXFUSE" inspect "$T/truncated.pt2" >/dev/null 2>"$T/stderr"; rc=$?
if [[ $rc -eq 2 ]]; then passes=$((passes+1)); else echo "FAIL inspect exit $rc"; fails=$((fails+1)); fi

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
