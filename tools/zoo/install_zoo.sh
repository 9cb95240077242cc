#!/usr/bin/env bash
# Installs a generated zoo (make_zoo.py's tar.gz) as tests/data/zoo with its Bazel package and
# records today's fxfuse results as tests/data/zoo/expectations.json (docs/zoo.md).
#
#   tools/zoo/install_zoo.sh ZOO_TAR_GZ [FXFUSE]     (from the repository root)
# Exit 0 when installed and no graph crashed; 1 when some graph crashed (the expectations are
# written anyway, CI's zoo_check_test fails until the crash is fixed); 2 on bad arguments.
set -eu
tarball=${1:?usage: tools/zoo/install_zoo.sh ZOO_TAR_GZ [FXFUSE]}
fxfuse=${2:-bazel-bin/fxfuse}
[ -f WORKSPACE ] || { echo "install_zoo.sh: run from the repository root" >&2; exit 2; }
[ -x "$fxfuse" ] || { echo "install_zoo.sh: $fxfuse: no fxfuse binary (bazel build //:fxfuse)" >&2; exit 2; }
tar tzf "$tarball" | grep -qx 'zoo/manifest.json' || { echo "install_zoo.sh: $tarball: no zoo/manifest.json" >&2; exit 2; }
rm -rf tests/data/zoo
tar xzf "$tarball" -C tests/data zoo
cp tools/zoo/zoo_package.BUILD tests/data/zoo/BUILD
set +e
python3 tools/zoo/check_zoo.py --fxfuse "$fxfuse" --dir tests/data/zoo --update-expectations \
  --markdown tests/data/zoo/results.md
rc=$?
set -e
echo "installed tests/data/zoo ($(du -sh tests/data/zoo | cut -f1)); expectations: tests/data/zoo/expectations.json"
echo "next: git add tests/data/zoo && bazel test //tests/data/zoo:zoo_check_test"
exit "$rc"
