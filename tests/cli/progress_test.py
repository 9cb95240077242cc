"""The progress line: on stderr only when stderr is a terminal, never with --quiet.

FXFUSE_PROGRESS_AFTER_S=0 makes every command show progress from its first stage (the real
delay is ~2 s), so a short verify run is enough:
  * stderr a file: no status line, no carriage return or escape sequence;
  * stderr a pseudo-terminal: "fxfuse verify: <stage>, N s" appears;
  * a pseudo-terminal with --quiet: nothing.

    progress_test.py FXFUSE GRAPH
"""
import os
import pty
import subprocess
import sys
import tempfile

fxfuse, graph = sys.argv[1], sys.argv[2]
env = dict(os.environ, FXFUSE_PROGRESS_AFTER_S="0")
failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail!r}"))
    if not ok:
        failures.append(name)


def run_with_pty_stderr(args):
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return p.wait(), b"".join(chunks).decode(errors="replace")


with tempfile.TemporaryFile() as err:
    rc = subprocess.run([fxfuse, "verify", graph], stdout=subprocess.DEVNULL, stderr=err, env=env).returncode
    err.seek(0)
    text = err.read().decode(errors="replace")
check("verify runs (0: pass, 1: a difference; both fine here)", rc in (0, 1), rc)
check("stderr not a terminal: no progress", "fxfuse verify:" not in text and "\r" not in text and "\x1b" not in text, text)

rc, text = run_with_pty_stderr([fxfuse, "verify", graph])
check("stderr a terminal: progress shown", rc in (0, 1) and "fxfuse verify: " in text, text)
check("stderr a terminal: the line is erased at the end", text.endswith("\r\x1b[K"), text[-40:])

rc, text = run_with_pty_stderr([fxfuse, "verify", graph, "--quiet"])
check("stderr a terminal, --quiet: no progress", rc in (0, 1) and "fxfuse verify:" not in text, text)

rc, text = run_with_pty_stderr([fxfuse, "inspect", graph, "--quiet"])
check("inspect --quiet (the shared flag): no progress", rc == 0 and "fxfuse inspect:" not in text, text)

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
