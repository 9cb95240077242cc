"""env_ab.sh end to end on a made-up bundle: stand-in fxfuse and fxfuse_old binaries that
compile a "plan" naming themselves and bench only plans they compiled, each with its own median.
Checks that a "build=NAME" variant runs that binary on its own plans, interleaved with the
environment variants (whose variables reach the binary), and that the A/B table compares them."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# A stand-in fxfuse: `compile GRAPH ... -o PLAN` writes the binary's name into PLAN; `bench PLAN
# ... --json J` fails (exit 3) on a plan another binary compiled, else writes its median: 100 us
# for fxfuse, 110 for fxfuse_old, 90 where FXFUSE_X=1 is set (the layer: a tenth of those).
FAKE_FXFUSE = r"""#!/bin/bash
me=$(basename "$0" .bin)
cmd=$1; shift
out=; json=; plan=; layer=0
while [[ $# -gt 0 ]]; do
  case $1 in
    -o) out=$2; shift ;;
    --json) json=$2; shift ;;
    --device=cuda) layer=1 ;;
    *.plan.pb) plan=$1 ;;
  esac
  shift
done
if [[ $cmd == compile ]]; then echo "$me" > "$out"; exit 0; fi
[[ $(cat "$plan") == "$me" ]] || exit 3
us=100; [[ $me == fxfuse_old ]] && us=110; [[ ${FXFUSE_X:-} == 1 ]] && us=90
[[ $layer == 1 ]] && us=$((us / 10))
echo "{\"median_us\": $us.0}" > "$json"
"""


def make_tree(tmp):
    """The files env_ab.sh reads, the bundle with the two stand-ins, and stand-in graph sources."""
    for rel in ("examples/decode_step/env_ab.sh", "examples/decode_step/env_ab_summary.py",
                "tests/runtime/device_bundle.sh"):
        os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), os.path.join(tmp, rel))
    os.makedirs(os.path.join(tmp, "tools/fixtures"))
    with open(os.path.join(tmp, "tools/fixtures/decode_model.py"), "w") as f:
        f.write("print('graph')\n")
    os.makedirs(os.path.join(tmp, "examples/decoder_layer"))
    with open(os.path.join(tmp, "examples/decoder_layer/llama8b_decoder_fp8.fxg"), "w") as f:
        f.write("graph\n")
    stage = os.path.join(tmp, "stage")
    os.makedirs(os.path.join(stage, "lib"))
    for name in ("fxfuse", "fxfuse_old"):
        path = os.path.join(stage, name)
        with open(path, "w") as f:
            f.write(FAKE_FXFUSE)
        os.chmod(path, 0o755)
    with open(os.path.join(stage, "STAGED_FROM"), "w") as f:
        f.write("commit 0000000 test\n")
    os.makedirs(os.path.join(tmp, ".device_rt"))
    subprocess.run(["tar", "-C", stage, "-cJf", os.path.join(tmp, ".device_rt/bundle.tar.xz"), "."], check=True)


def main():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        make_tree(tmp)
        out = os.path.join(tmp, "out")
        env = dict(os.environ, BUNDLE_DIR=os.path.join(tmp, "fxrt"), OUT=out, STREAM_SHAPES="",
                   VARIANTS="default;build=fxfuse_old;FXFUSE_X=1", POINTS="1x1024", REPS="2",
                   LAYER_TOKENS="8", LAYER_REPS="1", FXFUSE_CACHE_DIR=os.path.join(tmp, "cache"))
        env.pop("FXFUSE_X", None)
        r = subprocess.run(["bash", os.path.join(tmp, "examples/decode_step/env_ab.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"env_ab.sh exit {r.returncode}: {r.stderr[-500:]}")
        text = open(os.path.join(out, "env_ab.txt")).read()
        want = [
            "decode 8B 1x1024 [default] rep 1: 100.0 us",
            "decode 8B 1x1024 [build=fxfuse_old] rep 1: 110.0 us",
            "decode 8B 1x1024 [FXFUSE_X=1] rep 1: 90.0 us",
            "decode 8B 1x1024 [build=fxfuse_old] rep 2: 110.0 us",
            "layer T=8 [default] rep 1: 10.0 us",
            "layer T=8 [build=fxfuse_old] rep 1: 11.0 us",
            "layer T=8 [FXFUSE_X=1] rep 1: 9.0 us",
        ]
        for line in want:
            check(line in text.splitlines(), f"missing line: {line}")
        check("failed" not in text, "a run failed (a binary given a plan it did not compile)")
        # Interleaved: the three settings alternate within each rep.
        order = re.findall(r"^decode 8B 1x1024 \[(.*?)\] rep", text, re.M)
        check(order == ["default", "build=fxfuse_old", "FXFUSE_X=1"] * 2, f"order {order}")
        check(re.search(r"\| decode 8B 1x1024 \| build=fxfuse_old \| 110\.0 \|.*\| \+10\.0 % \|", text) is not None,
              "the A/B table's row for the old build")
        check(re.search(r"\| layer T=8 \| FXFUSE_X=1 \| 9\.0 \|.*\| -10\.0 % \|", text) is not None,
              "the A/B table's row for the variable")
    for f in failures:
        print("FAIL:", f)
    print(f"{'FAILED' if failures else 'passed'}: env_ab.sh with a build variant")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
