"""Runs the shell examples of README.md verbatim, as a new user would.

Every line of every ```sh block is a command, run with bash in order in one scratch
directory that holds the repository's files (tests/, tools/, examples/ from the runfiles):
  * `bazel run //:fxfuse -- ARGS` runs the fxfuse binary the way `bazel run` does: from
    another directory (the runfiles tree), with BUILD_WORKING_DIRECTORY naming the scratch
    directory, so relative paths must resolve against it;
  * `fxfuse ARGS` runs the binary installed by the README's own `tools/install.sh` line
    (FXFUSE_BINARY points it at the built binary, HOME is the scratch directory);
  * lines with `--device=cuda` need a GPU: printed as SKIPPED (needs a GPU), not run;
  * lines that install Debian packages or run the whole suite (tools/install_deps.sh,
    tools/test.sh, other `bazel` commands) cannot run inside a Bazel test: printed as
    SKIPPED with the reason (CI runs them as its own steps).
Any other line that exits non-zero fails the test, except `fxfuse diff`, whose exit code 1
means "the graphs differ" as diff(1)'s does (printed as such).

    readme_test.py README.md FXFUSE_BINARY
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

GPU = re.compile(r"--device[= ]cuda")
SETUP = {
    "tools/install_deps.sh": "installs Debian packages with apt",
    "tools/test.sh": "runs the whole suite (this test is part of it)",
}


def shell_lines(readme):
    lines, in_block = [], False
    for n, line in enumerate(open(readme, encoding="utf-8"), 1):
        fence = line.strip()
        if fence.startswith("```"):
            in_block = not in_block and fence[3:].strip() in ("sh", "bash", "shell", "console")
            continue
        if in_block and line.strip() and not line.strip().startswith("#"):
            lines.append((n, line.rstrip("\n")))
    return lines


def skip_reason(cmd):
    if GPU.search(cmd):
        return "needs a GPU"
    for script, why in SETUP.items():
        if re.search(r"(^|[\s;&|])" + re.escape(script) + r"\b", cmd):
            return why
    if re.search(r"(^|[\s;&|])bazel\s", cmd) and not re.search(r"bazel run //:fxfuse\b", cmd):
        return "a Bazel command other than `bazel run //:fxfuse`"
    return None


PRELUDE = r'''
set -eo pipefail
# `bazel run //:fxfuse -- ARGS`: the binary started inside its runfiles tree, the user's
# directory in BUILD_WORKING_DIRECTORY (what Bazel does).
bazel() {
  if [[ "$1" == run && "$2" == //:fxfuse ]]; then
    shift 2; [[ "${1:-}" == -- ]] && shift
    (cd "$README_RUNFILES" && BUILD_WORKING_DIRECTORY="$README_WORK" "$README_FXFUSE" "$@")
  else
    echo "readme_test: unexpected bazel command: bazel $*" >&2; return 99
  fi
}
'''


def main():
    readme, fxfuse = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    root = os.path.dirname(readme)  # the runfiles copy of the repository
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    for d in ("tests", "tools", "examples"):
        if os.path.isdir(os.path.join(root, d)):
            os.symlink(os.path.join(root, d), os.path.join(work, d))
    env = dict(os.environ, HOME=work, FXFUSE_BINARY=fxfuse, README_FXFUSE=fxfuse, README_WORK=work,
               README_RUNFILES=root, PATH=os.path.join(work, ".local", "bin") + os.pathsep + os.environ["PATH"])
    env.pop("BUILD_WORKING_DIRECTORY", None)
    lines = shell_lines(readme)
    if not lines:
        print("FAIL: README.md has no shell examples")
        return 1
    ran = skipped = failed = 0
    for n, cmd in lines:
        why = skip_reason(cmd)
        if why:
            print(f"SKIPPED README.md:{n} ({why}): {cmd}")
            skipped += 1
            continue
        p = subprocess.run(["bash", "-c", PRELUDE + cmd], cwd=work, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace", timeout=600)
        ran += 1
        if p.returncode == 1 and re.search(r"(fxfuse|//:fxfuse --) diff\b", cmd):
            print(f"ok      README.md:{n} (exit 1: the graphs differ, as diff(1) says it): {cmd}")
        elif p.returncode != 0:
            failed += 1
            print(f"FAIL    README.md:{n} (exit {p.returncode}): {cmd}\n{p.stdout[-3000:]}")
        else:
            print(f"ok      README.md:{n}: {cmd}")
    print(f"{ran} README lines run, {failed} failed, {skipped} skipped (reasons above)")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
