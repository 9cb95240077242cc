"""kernel_breakdown.py's tables on the CPU: the per-replay summary of a made-up kernel
timeline (two replays of three kernels, one overlap and one idle gap each) and the parsing of
ncu's CSV (units converted to ns, replays split by count), and the commands of both sides at a
decode point and at a decoder-layer token count."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import kernel_breakdown as kb  # noqa: E402


def test_summary_of_a_timeline():
    kernels = []
    for base in (0, 100000):  # two replays, ns
        kernels += [(base, base + 10000, "gemm"), (base + 8000, base + 12000, "norm"),
                    (base + 15000, base + 20000, "gemm")]
    s = kb.summarize(sorted(kernels), 2, timeline=True)
    assert s["kernels_per_replay"] == 3
    assert s["span_us"] == 20.0
    assert s["idle_us"] == 3.0  # 12 us to 15 us; the overlap of norm and the first gemm is not idle
    assert s["busy_us"] == 19.0
    assert [(r["name"], r["launches"], r["us"]) for r in s["by_name"]] == [("gemm", 2.0, 15.0), ("norm", 1.0, 4.0)]


def test_ncu_csv():
    csv_text = ('==PROF== Connected\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
                '"0","attn","gpu__time_duration.sum","usecond","43.50"\n'
                '"1","merge","gpu__time_duration.sum","nsecond","5,600"\n')

    class Done:
        stdout = csv_text
    real_run = kb.subprocess.run
    kb.subprocess.run = lambda *a, **k: Done()
    try:
        kernels = kb.ncu_kernels("ncu", ["fxfuse"])
    finally:
        kb.subprocess.run = real_run
    assert kernels == [(0, 43500, "attn"), (0, 5600, "merge")]
    s = kb.summarize(kernels, 1, timeline=False)
    assert s["span_us"] is None and s["idle_us"] is None
    assert s["busy_us"] == 49.1


def test_sides_of_each_kind_of_point():
    a = argparse.Namespace(fxfuse="fx", layer_tokens=None, config="llama8b", layers=4, replays=3,
                           torch_mode="default")
    sides = kb.sides_of(a, "p.pb", "32x1024")
    assert sides["fxfuse"] == ["fx", "bench", "p.pb", "--kv-batch", "32", "--kv-query-len", "1", "--kv-context",
                               "1024", "--iters", "3"]
    assert sides["torch.compile default"][-2:] == ["--torch-point", "32x1024"]
    a.layer_tokens, a.torch_mode = "4096", "max-autotune"
    sides = kb.sides_of(a, "p.pb", "4096")
    assert sides["fxfuse"] == ["fx", "bench", "p.pb", "--bind", "s0=4096", "--iters", "3"]
    torch_cmd = sides["torch.compile max-autotune"]
    assert torch_cmd[-2:] == ["--torch-layer-tokens", "4096"] and "--torch-point" not in torch_cmd
    a.torch_mode = "none"
    assert list(kb.sides_of(a, "p.pb", "64")) == ["fxfuse"]


if __name__ == "__main__":
    test_summary_of_a_timeline()
    test_ncu_csv()
    test_sides_of_each_kind_of_point()
    print("kernel_breakdown_test: ok")
