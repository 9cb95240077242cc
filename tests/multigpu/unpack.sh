#!/bin/bash
# Sourced on the device by run_x2.sh and parity.sh: unpacks .device_mg/bundle.tar.xz (made by
# tests/multigpu/stage.sh) into $D (default /tmp/fxmg) and sets FXFUSE to a wrapper that finds
# the carried libraries; keeps NVLink multicast off for everything started from here.
D=${D:-/tmp/fxmg}
mkdir -p "$D"
if [[ ! -x "$D/fxfuse.bin" ]]; then
  timeout 120 tar -C "$D" -xJf .device_mg/bundle.tar.xz || { echo "cannot unpack .device_mg/bundle.tar.xz (run tests/multigpu/stage.sh)"; exit 2; }
  mv "$D/fxfuse" "$D/fxfuse.bin"
  printf '#!/bin/bash\nexport LD_LIBRARY_PATH=%s/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\nexec %s/fxfuse.bin "$@"\n' "$D" "$D" > "$D/fxfuse"
  chmod +x "$D/fxfuse"
fi
FXFUSE="$D/fxfuse"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export FXFUSE_CACHE_DIR=${FXFUSE_CACHE_DIR:-/tmp/fxfuse_kernel_cache}
# NCCL for the ranks (dlopened): the loader path or /usr/local/cuda first, else the PyTorch wheels'.
if [[ -z "${FXFUSE_CUDA_LIB_DIR:-}" ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2' && [[ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]]; then
  nccl=$(timeout 30 python3 - <<'PY' 2>/dev/null
import glob, site
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for f in glob.glob(d + "/nvidia/nccl/lib/libnccl.so*") + glob.glob(d + "/nvidia/*/lib/libnccl.so*"):
        print(f)
        raise SystemExit
PY
  )
  [[ -n "$nccl" ]] && export FXFUSE_CUDA_LIB_DIR=$(dirname "$nccl")
fi
echo "NCCL: ${FXFUSE_CUDA_LIB_DIR:-loader path}"
