"""env_ab_summary.py on made-up env_ab.sh output: means per point and setting, the difference
from the point's first setting, a failed run left out of its mean, lines that are not results
(timeline tables, the bundle header) ignored, and the command's exit codes."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import env_ab_summary as s  # noqa: E402

RUN = """NVIDIA H100 80GB HBM3, 580.159.04
bundle built from:
commit 06e43f1 something
decode 8B 1x1024 [default] rep 1: 3300.0 us
timeline (CUPTI, 20 replays; 227 kernels in the median replay):
  repeating unit: 7 kernels x 32, 92.0 us each:
     6.25 us   12.00 us  fxfuse::runtime::smallMFp8GemmKernel<1, (fxfuse::runtime::Epilogue)0, 0> [grid 384x1x1]
decode 8B 1x1024 [FXFUSE_X=1 FXFUSE_Y=0] rep 1: 3267.0 us
decode 8B 8x1024 [default] rep 1: 3700.0 us
decode 8B 8x1024 [FXFUSE_X=1 FXFUSE_Y=0] rep 1: failed us
decode 8B 1x1024 [default] rep 2: 3280.0 us
decode 8B 1x1024 [FXFUSE_X=1 FXFUSE_Y=0] rep 2: 3247.0 us
decode 8B 8x1024 [default] rep 2: 3720.0 us
decode 8B 8x1024 [FXFUSE_X=1 FXFUSE_Y=0] rep 2: 3737.0 us
layer T=8 [default] rep 1: 96.0 us
layer T=8 [FXFUSE_X=1 FXFUSE_Y=0] rep 1: failed us
"""


def test_means_and_differences():
    got = {(p, v): (m, runs, d) for p, v, m, runs, d in s.rows(s.parse(RUN.splitlines()))}
    mean, runs, delta = got[("decode 8B 1x1024", "default")]
    assert (mean, runs, delta) == (3290.0, [3300.0, 3280.0], None)
    mean, runs, delta = got[("decode 8B 1x1024", "FXFUSE_X=1 FXFUSE_Y=0")]
    assert mean == 3257.0 and abs(delta - 100.0 * (3257.0 / 3290.0 - 1.0)) < 1e-9
    mean, runs, delta = got[("decode 8B 8x1024", "FXFUSE_X=1 FXFUSE_Y=0")]
    assert (mean, runs) == (3737.0, [3737.0])  # the failed run is left out
    assert abs(delta - 100.0 * (3737.0 / 3710.0 - 1.0)) < 1e-9
    mean, runs, delta = got[("layer T=8", "FXFUSE_X=1 FXFUSE_Y=0")]
    assert (mean, runs, delta) == (None, [], None)
    assert len(got) == 6  # the timeline and header lines are not results


def test_table_text():
    text = s.format_table(s.parse(RUN.splitlines()))
    assert "| decode 8B 1x1024 | FXFUSE_X=1 FXFUSE_Y=0 | 3257.0 | 3267.0 / 3247.0 | -1.0 % |" in text
    assert "| layer T=8 | FXFUSE_X=1 FXFUSE_Y=0 | failed | — |  |" in text


def test_command():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "env_ab.txt")
        with open(path, "w") as f:
            f.write(RUN)
        script = os.path.join(HERE, "env_ab_summary.py")
        ok = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
        assert ok.returncode == 0 and ok.stdout.startswith("| point | setting |")
        empty = os.path.join(d, "empty.txt")
        open(empty, "w").close()
        bad = subprocess.run([sys.executable, script, empty], capture_output=True, text=True)
        assert bad.returncode == 2 and "no result lines" in bad.stderr
        usage = subprocess.run([sys.executable, script], capture_output=True, text=True)
        assert usage.returncode == 2


if __name__ == "__main__":
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print(f"ok {name}")
