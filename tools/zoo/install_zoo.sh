#!/usr/bin/env bash
# Installs a generated zoo (make_zoo.py's tar.gz; several when the run was split with --shard)
# as tests/data/zoo with its Bazel package, and records today's fxfuse results as
# tests/data/zoo/expectations.json (docs/zoo.md).
#
#   tools/zoo/install_zoo.sh ZOO_TAR_GZ [ZOO_TAR_GZ...]     (from the repository root)
#   FXFUSE=path/to/fxfuse (default bazel-bin/fxfuse)
# Exit 0 when installed and no graph crashed; 1 when some graph crashed (the expectations are
# written anyway; CI's zoo_check_test fails until the crash is fixed); 2 on bad arguments.
set -eu
[ $# -ge 1 ] || { echo "usage: tools/zoo/install_zoo.sh ZOO_TAR_GZ [ZOO_TAR_GZ...]" >&2; exit 2; }
fxfuse=${FXFUSE:-bazel-bin/fxfuse}
[ -f WORKSPACE ] || { echo "install_zoo.sh: run from the repository root" >&2; exit 2; }
[ -x "$fxfuse" ] || { echo "install_zoo.sh: $fxfuse: no fxfuse binary (bazel build //:fxfuse)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
for t in "$@"; do
  tar tzf "$t" | grep -qx 'zoo/manifest.json' || { echo "install_zoo.sh: $t: no zoo/manifest.json" >&2; exit 2; }
  mkdir -p "$tmp/$n"
  tar xzf "$t" -C "$tmp/$n" zoo
  n=$((n + 1))
done
rm -rf tests/data/zoo
mkdir -p tests/data/zoo
for d in "$tmp"/*/zoo; do
  for a in "$d"/*/; do [ -d "$a" ] && cp -r "$a" tests/data/zoo/; done
done
python3 - "$tmp" <<'PY'
import glob, json, os, sys
sys.path.insert(0, "tools/zoo")
import make_zoo
ms = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(sys.argv[1], "*", "zoo", "manifest.json")))]
make_zoo.compact_zoo("tests/data/zoo")  # zoos made before make_zoo.py compacted its archives
make_zoo.pack_graphs("tests/data/zoo")  # one graphs.tar.xz: a third of the size in the tree
make_zoo.write_json_atomic("tests/data/zoo/manifest.json", make_zoo.merge_manifests(ms) if len(ms) > 1 else ms[0])
PY
cp tools/zoo/zoo_package.BUILD tests/data/zoo/BUILD
set +e
python3 tools/zoo/check_zoo.py --fxfuse "$fxfuse" --dir tests/data/zoo --update-expectations \
  --markdown tests/data/zoo/results.md
rc=$?
set -e
echo "installed tests/data/zoo ($(du -sh tests/data/zoo | cut -f1)); expectations: tests/data/zoo/expectations.json"
echo "next: git add tests/data/zoo && bazel test //tests/data/zoo:zoo_check_test"
exit "$rc"
