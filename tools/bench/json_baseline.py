"""Shared pieces of the import and compile benchmark drivers: the Python baseline.

`program_bytes` returns the ExportedProgram JSON of a .pt2 archive (or a bare JSON file);
`time_json_loads` is the median time of Python's json.loads on bytes already in memory (the
most favourable setting for Python); `unpacked` gives a path to a decompressed copy of a
.gz input (outside any timing).
"""
import gzip
import json
import os
import shutil
import statistics
import time
import zipfile


def program_bytes(path):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            m = next((n for n in names if n.endswith("/models/model.json")), None) or next(
                n for n in names if n.endswith("serialized_exported_program.json"))
            return z.read(m)
    with open(path, "rb") as f:
        return f.read()


def time_json_loads(data, runs):
    json.loads(data)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        json.loads(data)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def unpacked(path, tmpdir):
    if not path.endswith(".gz"):
        return path
    dst = os.path.join(tmpdir, os.path.basename(path)[:-3])
    with gzip.open(path, "rb") as i, open(dst, "wb") as o:
        shutil.copyfileobj(i, o)
    return dst
