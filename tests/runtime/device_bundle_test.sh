#!/bin/bash
# unpack_bundle (device_bundle.sh) on a made-up bundle: binaries are wrapped so that they run
# with the carried libraries first on LD_LIBRARY_PATH and their arguments intact; files that are
# not binaries of the list are left alone; no bundle is an error.
set -euo pipefail
lib=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# shellcheck source=tests/runtime/device_bundle.sh
source "$OLDPWD/$lib"
if unpack_bundle "$work/out" 2>/dev/null; then echo "FAIL: no bundle accepted"; exit 1; fi
mkdir -p stage/lib .device_rt
# shellcheck disable=SC2016  # expanded by the made-up binary
printf '#!/bin/bash\necho "args:$*"\necho "path:$LD_LIBRARY_PATH"\n' > stage/fxfuse
cp stage/fxfuse stage/fxfuse_old
echo "commit abc" > stage/STAGED_FROM
chmod +x stage/fxfuse stage/fxfuse_old
tar -C stage -cf - . | xz > .device_rt/bundle.tar.xz
unpack_bundle "$work/out"
for b in fxfuse fxfuse_old; do
  [[ -x out/$b.bin ]] || { echo "FAIL: $b not moved aside"; exit 1; }
  got=$(LD_LIBRARY_PATH=/elsewhere "out/$b" "a b" c)
  [[ $got == *"args:a b c"* ]] || { echo "FAIL: $b arguments: $got"; exit 1; }
  [[ $got == *"path:$work/out/lib:/usr/local/cuda/lib64:/elsewhere"* ]] || { echo "FAIL: $b library path: $got"; exit 1; }
done
[[ $(cat out/STAGED_FROM) == "commit abc" && ! -e out/STAGED_FROM.bin ]] || { echo "FAIL: STAGED_FROM touched"; exit 1; }
echo PASS
