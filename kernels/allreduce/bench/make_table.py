#!/usr/bin/env python3
"""Merges the JSON rows of bench_all_reduce_rms_norm (C++) and bench_torch_baseline.py into one
markdown table per run: per (ranks, T, H, variant) the fused one-shot and two-shot times, the
table's pick, NCCL + our fused add-norm kernel (a), PyTorch NCCL + torch.compile'd norm (b), and
the speed-up of the table's pick over the best unfused option (a, b) measured in the same run.

  python3 make_table.py ROWS.json [MORE.json ...] > TABLE.md
"""
import json
import sys


def main():
    rows = []
    for path in sys.argv[1:]:
        with open(path) as f:
            rows += json.load(f)
    groups = {}
    for r in rows:
        key = (r["mode"], r["world_size"], r["hidden"], r["tokens"], r["variant"])
        groups.setdefault(key, {})[r["method"]] = r
    header = ["mode", "ranks", "H", "T", "variant", "one-shot µs", "two-shot µs", "table picks",
              "(a) NCCL + our add-norm µs", "(b) torch NCCL + compiled norm µs", "our norm alone µs",
              "speed-up of the pick vs best of (a), (b)"]

    def us(m, name):
        return m[name]["us"] if name in m else None

    def fmt(v):
        return "n/a" if v is None else f"{v:.2f}"

    lines = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
        m = groups[key]
        one, two = us(m, "fused_one_shot"), us(m, "fused_two_shot")
        a, b = us(m, "nccl_allreduce+fused_add_norm"), us(m, "torch_nccl+compiled_norm")
        alone = us(m, "fused_add_norm_only")
        pick = next((r["auto"] for r in m.values() if "auto" in r), "?")
        fused = {"one_shot": one, "two_shot": two, "nccl_fallback": a}.get(pick)
        unfused = [v for v in (a, b) if v is not None]
        speedup = f"{min(unfused) / fused:.2f}x" if fused and unfused and key[0] == "gpus" else "—"
        mode = "simulated" if key[0] == "simulated" else "GPUs"
        lines.append([mode, str(key[1]), str(key[2]), str(key[3]), key[4], fmt(one), fmt(two), pick, fmt(a), fmt(b),
                      fmt(alone), speedup])
    # Columns without a single measured value (e.g. NCCL on simulated ranks) are left out.
    keep = [i for i in range(len(header)) if any(line[i] not in ("n/a", "—") for line in lines)]
    print("| " + " | ".join(header[i] for i in keep) + " |")
    print("|" + "---|" * len(keep))
    for line in lines:
        print("| " + " | ".join(line[i] for i in keep) + " |")


if __name__ == "__main__":
    main()
