#!/usr/bin/env python3
"""Compares fxfuse's saved outputs (`fxfuse run ... --save-outputs DIR`) with torch's reference
logits written by make_zoo.py (`<arch>.reference.json` + `<arch>.logits.f32`).

    compare_reference.py ARCH.reference.json OUTPUTS_DIR [--tol 0.05]

Passes when max |fxfuse - torch| <= tol * max |torch| (both ran the same weights on the same
input; bf16 rounding differs between torch's kernels, fxfuse's and the CPU interpreter). Prints
one line; exit 0 pass, 1 mismatch, 2 unreadable or mismatched files. Pure python3 (no numpy).
"""
import argparse
import array
import json
import os
import sys


def _floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


# Allowed max |fxfuse - torch| as a fraction of torch's absmax (bf16 rounding differs between
# torch's kernels, fxfuse's and the CPU interpreter).
DEFAULT_TOL = 0.05


def compare(reference_json, outputs_dir, tol=DEFAULT_TOL):
    """(status, one line): status 0 pass, 1 mismatch, 2 bad files."""
    try:
        with open(reference_json) as f:
            ref = json.load(f)
        lg = ref["logits"]
        want = _floats(os.path.join(os.path.dirname(reference_json), lg["file"]))
        if len(want) != _numel(lg["shape"]):
            return 2, "reference holds %d values for shape %s" % (len(want), lg["shape"])
        with open(os.path.join(outputs_dir, "outputs.json")) as f:
            outs = json.load(f)
    except (OSError, ValueError, KeyError) as e:
        return 2, "cannot read: %s" % e
    match = [o for o in outs if [int(x) for x in o.get("shape", [])] == [int(x) for x in lg["shape"]]]
    if not match:
        return 2, "no output of shape %s (outputs: %s)" % (lg["shape"], [o.get("shape") for o in outs])
    got = _floats(os.path.join(outputs_dir, match[0]["file"]))
    if len(got) != len(want):
        return 2, "output holds %d values, reference %d" % (len(got), len(want))
    absmax = max((abs(x) for x in want), default=0.0)
    diff = max((abs(a - b) for a, b in zip(got, want)), default=0.0)
    nan = sum(1 for x in got if x != x)
    vocab = int(lg["shape"][-1]) if lg["shape"] else 1
    rows = len(want) // max(vocab, 1)
    agree = 0
    for r in range(rows):
        g = got[r * vocab:(r + 1) * vocab]
        w = want[r * vocab:(r + 1) * vocab]
        agree += int(max(range(vocab), key=g.__getitem__) == max(range(vocab), key=w.__getitem__))
    ok = nan == 0 and diff <= tol * absmax
    line = "max_abs %.4g = %.2f%% of torch's absmax %.4g, argmax agrees %d/%d%s" % (
        diff, 100.0 * diff / absmax if absmax else 0.0, absmax, agree, rows, ", %d NaN" % nan if nan else "")
    return (0 if ok else 1), line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference_json")
    ap.add_argument("outputs_dir")
    ap.add_argument("--tol", type=float, default=DEFAULT_TOL)
    a = ap.parse_args()
    rc, line = compare(a.reference_json, a.outputs_dir, a.tol)
    print(("pass: " if rc == 0 else "fail: " if rc == 1 else "error: ") + line)
    return rc


if __name__ == "__main__":
    sys.exit(main())
