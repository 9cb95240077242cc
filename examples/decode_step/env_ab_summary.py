#!/usr/bin/env python3
"""The A/B table of an env_ab.sh run: per point (decode batch x context, or layer T), each
setting's mean over its runs and its difference from the first setting run at that point
(env_ab.sh runs VARIANTS in order, so that is the first of VARIANTS: usually "default").

    python3 examples/decode_step/env_ab_summary.py $OUT/env_ab.txt

Reads the result lines env_ab.sh writes ("decode 8B 1x1024 [SETTING] rep 1: 3280.16 us",
"layer T=8 [SETTING] rep 1: 96.4 us"); a run whose median is "failed" counts as missing.
env_ab.sh appends this table to env_ab.txt at the end of a run.
"""
import re
import sys

RESULT = re.compile(r"^(decode \S+ \S+|layer T=\S+) \[(.*)\] rep \d+: (\S+) us$")


def parse(lines):
    """{point: {setting: [µs, ...]}}, points and settings in the order first seen."""
    table = {}
    for line in lines:
        m = RESULT.match(line.rstrip("\n"))
        if not m:
            continue
        point, setting, value = m.groups()
        runs = table.setdefault(point, {}).setdefault(setting, [])
        try:
            runs.append(float(value))
        except ValueError:
            pass  # "failed": the run left no median
    return table


def rows(table):
    """(point, setting, mean or None, runs, % against the point's first setting or None)."""
    out = []
    for point, settings in table.items():
        base = None
        for i, (setting, runs) in enumerate(settings.items()):
            mean = sum(runs) / len(runs) if runs else None
            if i == 0:
                base = mean
            delta = None if i == 0 or mean is None or not base else 100.0 * (mean / base - 1.0)
            out.append((point, setting, mean, runs, delta))
    return out


def format_table(table):
    lines = ["| point | setting | mean µs | runs | vs first |", "|---|---|---:|---|---:|"]
    for point, setting, mean, runs, delta in rows(table):
        mean_text = f"{mean:.1f}" if mean is not None else "failed"
        runs_text = " / ".join(f"{r:.1f}" for r in runs) or "—"
        delta_text = "" if delta is None else f"{delta:+.1f} %".replace("-0.0 ", "+0.0 ")
        lines.append(f"| {point} | {setting} | {mean_text} | {runs_text} | {delta_text} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        print("usage: env_ab_summary.py ENV_AB_TXT", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        table = parse(f)
    if not table:
        print(f"{argv[1]}: no result lines", file=sys.stderr)
        return 2
    print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
