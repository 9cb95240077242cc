#!/usr/bin/env bash
# Decompression budgets (ir/io.h decompressedBudget): a zip bomb (.pt2 whose model.json
# inflates ~1000x) and a gzip bomb (.json.gz) must be refused with exit 2 and one line, with
# peak RSS far below what inflating them would take (each holds 768 MiB of zeros in ~0.8 MB;
# the budget is 64x the compressed size, at least 64 MiB). The bombs are generated here.
set -uo pipefail
FXFUSE="$1"
T="${TEST_TMPDIR:-$(mktemp -d)}/bombs"
rm -rf "$T" && mkdir -p "$T"

python3 - "$FXFUSE" "$T" <<'PY'
import gzip, os, resource, subprocess, sys, zipfile

fxfuse, t = sys.argv[1], sys.argv[2]
ZEROS = b"\0" * (1 << 20)
INFLATED_MIB = 768
RSS_LIMIT_MIB = 400   # inflating either bomb whole would need > 768 MiB

def write_zeros(f):
    for _ in range(INFLATED_MIB):
        f.write(ZEROS)

zip_path = os.path.join(t, "bomb.pt2")
with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED) as z:
    z.writestr("bomb/archive_format", "pt2")
    with z.open("bomb/models/model.json", "w", force_zip64=True) as f:
        write_zeros(f)
gz_path = os.path.join(t, "bomb.json.gz")
with gzip.open(gz_path, "wb") as f:
    write_zeros(f)

fails = 0
for path in (zip_path, gz_path):
    size = os.path.getsize(path)
    p = subprocess.Popen([fxfuse, "inspect", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = p.communicate(timeout=120)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # max over finished children
    rss_mib = ru.ru_maxrss / 1024
    lines = err.decode(errors="replace").strip().splitlines()
    name = os.path.basename(path)
    print(f"{name}: {size} bytes, exit {p.returncode}, peak RSS of children so far {rss_mib:.0f} MiB: {lines}")
    if p.returncode != 2:
        print(f"FAIL {name}: exit {p.returncode}, want 2"); fails += 1
    if len(lines) != 1 or "bomb" not in lines[0] or name not in lines[0]:
        print(f"FAIL {name}: want one line naming the file and the bomb"); fails += 1
    if rss_mib > RSS_LIMIT_MIB:
        print(f"FAIL {name}: peak RSS {rss_mib:.0f} MiB > {RSS_LIMIT_MIB} MiB"); fails += 1
sys.exit(1 if fails else 0)
PY
