#!/usr/bin/env bash
# The fxfuse_torch op library registers exactly the schemas of the C++ op table:
# tools/fxfuse_torch/fxfuse_torch/schemas.py (read without torch) against
# dump_op_schemas (ir/op_schema.cc). Fix: tools/fxfuse_torch/gen_schemas.sh.
# usage: schema_parity_test.sh DUMP_OP_SCHEMAS SCHEMAS_PY
set -euo pipefail
dump=$1
schemas_py=$2
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
python3 - "$schemas_py" "$tmp" <<'PY'
import runpy, sys
ns = runpy.run_path(sys.argv[1])
for key, fname in (("FXFUSE_SCHEMAS", "py_fxfuse.txt"), ("VLLM_SCHEMAS", "py_vllm.txt")):
    with open(f"{sys.argv[2]}/{fname}", "w") as f:
        f.write("".join(s + "\n" for s in ns[key]))
PY
"$dump" fxfuse > "$tmp/cc_fxfuse.txt"
"$dump" _C vllm > "$tmp/cc_vllm.txt"
status=0
for part in fxfuse vllm; do
  if ! diff -u "$tmp/cc_$part.txt" "$tmp/py_$part.txt"; then
    echo "FAIL: $part schemas in $schemas_py differ from ir/op_schema.cc (run tools/fxfuse_torch/gen_schemas.sh)"
    status=1
  fi
done
n=$(wc -l < "$tmp/cc_fxfuse.txt")
[[ $n -ge 12 ]] || { echo "FAIL: only $n fxfuse schemas in the C++ table"; status=1; }
[[ $status == 0 ]] && echo "ok: $n fxfuse and $(wc -l < "$tmp/cc_vllm.txt") vLLM schemas agree"
exit $status
