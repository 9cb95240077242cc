#!/usr/bin/env python3
"""tools/zoo/make_zoo.py without torch 2.x: the dry run (torch blocked), config shrinking on
stand-in config classes, weight stripping of a real torch 2.11 archive (fxfuse reads the
stripped archive), raw reference files, scalar-recording detection, and the process pool
(a crashing, a hanging and a finishing worker) through the manifest and the tar.

Usage: make_zoo_test.py [FXFUSE]   (run from the repository root, as Bazel does)"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.getcwd()
MAKE = os.path.join(ROOT, "tools", "zoo", "make_zoo.py")
sys.path.insert(0, os.path.join(ROOT, "tools", "zoo"))
import make_zoo as mz  # noqa: E402

FAILED = []


def check(name, cond, detail=""):
    print("%s %s %s" % ("ok  " if cond else "FAIL", name, detail))
    if not cond:
        FAILED.append(name)


def test_dry_run():
    # torch (and anything importing it) fails to import: the dry run must not need it.
    code = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = [%r, '--dry-run', '--json'];"
            "runpy.run_path(%r, run_name='__main__')" % (MAKE, MAKE))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    check("dry run exits 0 without torch", p.returncode == 0, p.stderr[-300:])
    plan = json.loads(p.stdout)
    archs = plan["architectures"]
    check("dry run: at least 25 architectures", len(archs) >= 25, str(len(archs)))
    for fam, n in mz.REQUIRED_FAMILIES.items():
        check("dry run: family %s >= %d" % (fam, n), len(plan["families"].get(fam, [])) >= n,
              str(plan["families"].get(fam)))
    llama = [a for a in archs if a["arch"] == "llama"]
    check("dry run: llama first (priority order)", archs[0]["arch"] == "llama")
    check("dry run: files per architecture", llama and "zoo/llama/llama.core_aten.pt2" in llama[0]["files"] and
          "zoo/llama/llama.logits.f32" in llama[0]["files"] and len(llama[0]["files"]) == 7)
    check("dry run: BERT excluded as not decoder-only", "bert" in plan["excluded"])
    p = subprocess.run([sys.executable, MAKE, "--dry-run"], capture_output=True, text=True)
    check("dry run text", p.returncode == 0 and "model zoo dry run:" in p.stdout, p.stdout[:200])


class _Base:
    attribute_map = {}


class GPT2LikeConfig(_Base):
    attribute_map = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer"}

    def __init__(self, vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_inner=None, n_positions=1024,
                 bos_token_id=50256, eos_token_id=50256, **kw):
        self.vocab_size, self.n_embd, self.n_layer, self.n_head = vocab_size, n_embd, n_layer, n_head
        self.n_inner, self.n_positions = n_inner, n_positions
        self.bos_token_id, self.eos_token_id = bos_token_id, eos_token_id


class MistralLikeConfig(_Base):
    def __init__(self, vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=None, intermediate_size=14336, sliding_window=4096,
                 num_local_experts=8, num_experts_per_tok=2, layer_types=None, **kw):
        self.__dict__.update(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                             num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                             head_dim=head_dim, intermediate_size=intermediate_size, sliding_window=sliding_window,
                             num_local_experts=num_local_experts, num_experts_per_tok=num_experts_per_tok,
                             layer_types=layer_types or ["full_attention"] * num_hidden_layers)


def test_config_shrinking():
    kw = mz.tiny_config_kwargs(GPT2LikeConfig, GPT2LikeConfig(), 0)
    check("GPT-2 spellings", kw.get("n_embd") == 64 and kw.get("n_layer") == 2 and kw.get("n_head") == 4 and
          kw.get("n_inner") == 128 and kw.get("n_positions") == 128 and kw.get("vocab_size") == 256, str(kw))
    check("token ids inside the tiny vocabulary", kw.get("bos_token_id") == 1 and kw.get("eos_token_id") == 2)
    check("no attributes the config lacks", "num_key_value_heads" not in kw and "sliding_window" not in kw, str(kw))
    kw = mz.tiny_config_kwargs(MistralLikeConfig, MistralLikeConfig(), 0)
    check("Mistral-like sizes", kw.get("hidden_size") == 64 and kw.get("num_key_value_heads") == 2 and
          kw.get("head_dim") == 16 and kw.get("num_local_experts") == 4 and kw.get("num_experts_per_tok") == 2 and
          kw.get("sliding_window") == 8, str(kw))
    kw1 = mz.tiny_config_kwargs(MistralLikeConfig, MistralLikeConfig(), 1)
    check("level 1: core sizes only", "num_local_experts" not in kw1 and kw1.get("hidden_size") == 64)
    none_sw = MistralLikeConfig(sliding_window=None)
    check("sliding window left off when the default has none",
          "sliding_window" not in mz.tiny_config_kwargs(MistralLikeConfig, none_sw, 0))
    cfg = MistralLikeConfig(num_hidden_layers=2)
    cfg.layer_types = ["sliding_attention", "full_attention"] * 16
    notes = mz.fix_layer_lists(cfg, 2)
    check("layer_types cut to the layer count", cfg.layer_types == ["sliding_attention", "full_attention"], str(notes))


def test_files(tmp, fxfuse):
    p = os.path.join(tmp, "x.f32")
    mz.write_raw(p, "f", [1.5, -2.0, 3.25])
    check("raw f32 little-endian", open(p, "rb").read()[:4] == b"\x00\x00\xc0\x3f" and
          list(mz.read_raw(p, "f")) == [1.5, -2.0, 3.25])
    mz.write_raw(p, "q", [7, 2**40])
    check("raw i64 round trip", list(mz.read_raw(p, "q")) == [7, 2**40])
    src = os.path.join(ROOT, "tests", "data", "hf", "hf_llama.core_aten.pt2")
    dst = os.path.join(tmp, "hf_llama.core_aten.pt2")
    shutil.copy(src, dst)
    wb = mz.pt2_weight_bytes(dst)
    check("weight bytes of a real archive", wb > 150000, str(wb))
    saved = mz.strip_pt2_weights(dst)
    payload, configs = mz.pt2_weight_members(dst)
    check("stripped: no payloads, bytes saved", payload == [] and saved >= wb, "%d saved" % saved)
    with zipfile.ZipFile(dst) as z, zipfile.ZipFile(src) as zs:
        cfg = json.loads(z.read(configs[0]))["config"]
        check("stripped: metadata kept without path_name",
              len(cfg) > 10 and all("path_name" not in m and "tensor_meta" in m for m in cfg.values()))
        same = all(z.read(n) == zs.read(n) for n in z.namelist() if n not in configs)
        check("stripped: other members byte for byte", same and z.testzip() is None)
    if fxfuse:
        a = subprocess.run([fxfuse, "inspect", "--json", src], capture_output=True, text=True)
        b = subprocess.run([fxfuse, "inspect", "--json", dst], capture_output=True, text=True)
        check("fxfuse inspects the stripped archive", b.returncode == 0 and
              json.loads(a.stdout)["ops"] == json.loads(b.stdout)["ops"], b.stderr[-300:])
        v = subprocess.run([fxfuse, "verify", "-q", dst], capture_output=True, text=True)
        check("fxfuse verifies the stripped archive", v.returncode == 0, (v.stdout + v.stderr)[-300:])
    g = os.path.join(tmp, "a.json")
    open(g, "w").write('{"x": 1}')
    mz.gzip_file(g, g + ".gz")
    first = open(g + ".gz", "rb").read()
    mz.gzip_file(g, g + ".gz")
    check("gzip deterministic", first == open(g + ".gz", "rb").read() and
          json.load(gzip.open(g + ".gz", "rt")) == {"x": 1})
    mod = {"graphs": [{"inputs": [{"value": 1}, {"value": 2}, {"value": 3}],
                       "values": [{"id": 1, "name": "eps", "kind": "TENSOR",
                                   "tensor": {"dtype": "F64", "shape": [], "device": {"type": "cpu"}}},
                                  {"id": 2, "name": "x", "kind": "TENSOR",
                                   "tensor": {"dtype": "BF16", "shape": [{"int": 4}], "device": {"type": "cuda"}}},
                                  {"id": 3, "name": "s", "kind": "SYM_INT"}]}]}
    check("lifted scalar inputs", mz.lifted_scalar_inputs(mod) == ["eps:F64"])
    names = {"m.train_ir.pt2": "train_ir", "m.core_aten.pt2": "core_aten", "m.post_grad.fxg.json.gz": "post_grad",
             "m.post_grad.2.fxg.json.gz": "post_grad", "m.post_grad.scalars.fxg.json.gz": "post_grad_scalars",
             "m.post_grad.scalars.1.fxg.json.gz": "post_grad_scalars", "m.logits.f32": None,
             "m.core_aten.partial.pt2": None, "mm.train_ir.pt2": None}
    got = {n: mz.form_of_file("m", n) for n in names}
    check("form of each zoo file", got == names, str(got))


def test_scalar_kwarg():
    class WithOption:
        class DumpPass:
            def __init__(self, out_dir, prefix="graph", record_scalars=False, **kw):
                pass

        @staticmethod
        def backend(out_dir, stage="post_grad_pre", prefix="graph", **kw):
            pass

    class Without:
        class DumpPass:
            def __init__(self, out_dir, prefix="graph", write_text=False):
                pass

        @staticmethod
        def backend(out_dir, stage="post_grad_pre", prefix="graph", **kw):
            pass

    check("scalar option found", mz.scalar_record_kwarg(WithOption) == "record_scalars")
    check("scalar option absent", mz.scalar_record_kwarg(Without) is None)
    check("scalar option override must exist", mz.scalar_record_kwarg(Without, "record_scalars") is None)


def test_pool(tmp):
    args = mz.parse_args(["--out", os.path.join(tmp, "run"), "--timeout", "3", "--budget", "60", "--deadline", "90",
                          "--jobs", "3", "--max-tar-mb", "1"])
    os.makedirs(os.path.join(args.out, "zoo", "good"))
    os.makedirs(os.path.join(args.out, "_results"))
    finished = ("import json, os, sys; d = sys.argv[1]; "
                "open(os.path.join(d, 'zoo', 'good', 'good.logits.f32'), 'wb').write(b'1234'); "
                "open(os.path.join(d, 'zoo', 'good', 'good.train_ir.pt2'), 'wb').write(b'half'); "
                "open(os.path.join(d, 'zoo', 'good', 'good.core_aten.partial.pt2'), 'wb').write(b'half'); "
                "json.dump({'arch': 'good', 'status': 'done', 'forms': {'reference': {'status': 'ok'}, "
                "'train_ir': {'status': 'failed: Unsupported: data-dependent'}}}, "
                "open(os.path.join(d, '_results', 'good.json'), 'w'))")
    cmds = {"crash": [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"],
            "hang": [sys.executable, "-c", "import time; print('working', flush=True); time.sleep(60)"],
            "good": [sys.executable, "-c", finished, args.out]}
    orig = mz.worker_cmd
    mz.worker_cmd = lambda a, spec: cmds[spec["arch"]]
    try:
        specs = [{"arch": a, "model_class": a.title(), "config_class": None, "tags": [], "excluded": None}
                 for a in ("crash", "hang", "good")]
        specs.append({"arch": "bert", "model_class": "BertLMHeadModel", "tags": [], "excluded": "not decoder-only"})
        ended = mz.run_pool(args, specs[:3])
        check("pool: crash", ended.get("crash") == "crashed: signal 11", str(ended))
        check("pool: per-model time limit", ended.get("hang", "").startswith("killed: per-model time limit"))
        check("pool: finished", ended.get("good") == "exit 0")
        manifest, size = mz.finish(args, specs, ended, "test", None)
    finally:
        mz.worker_cmd = orig
    a = manifest["architectures"]
    check("manifest: crash recorded per form", a["crash"]["status"] == "failed: crashed: signal 11" and
          a["crash"]["forms"]["core_aten"]["status"].startswith("not reached"), json.dumps(a["crash"])[:300])
    check("manifest: hang has its log tail", "working" in " ".join(a["hang"].get("log_tail") or []))
    check("manifest: exception text kept", a["good"]["forms"]["train_ir"]["status"] ==
          "failed: Unsupported: data-dependent")
    check("manifest: excluded", a["bert"]["status"].startswith("excluded"))
    check("manifest: summary", manifest["summary"]["per_form"]["reference"]["ok"] == 1)
    with tarfile.open(args.tar) as tf:
        names = tf.getnames()
    check("tar members under zoo/", "zoo/manifest.json" in names and "zoo/good/good.logits.f32" in names, str(names))
    check("files of failed forms and partial files removed", sorted(a["good"].get("removed_files", [])) ==
          ["good.core_aten.partial.pt2", "good.train_ir.pt2"] and "zoo/good/good.train_ir.pt2" not in names,
          str(a["good"].get("removed_files")))


def test_shards():
    specs, _, _ = mz.enumerate_archs()
    live = [s["arch"] for s in specs if not s.get("excluded")]
    a = [s["arch"] for s in mz.shard(specs, "0/2")]
    b = [s["arch"] for s in mz.shard(specs, "1/2")]
    check("shards partition the architectures", sorted(a + b) == sorted(live) and not set(a) & set(b))
    check("priority architectures spread over the shards", a[0] == live[0] and b[0] == live[1])
    m1 = {"argv": ["--shard", "0/2"], "architectures": {"llama": {"arch": "llama", "tags": [], "forms": {
        "train_ir": {"status": "ok"}}}}}
    m2 = {"argv": ["--shard", "1/2"], "architectures": {"gpt2": {"arch": "gpt2", "tags": ["layernorm"], "forms": {
        "train_ir": {"status": "failed: x"}}}}}
    m = mz.merge_manifests([m1, m2])
    check("merged manifest", sorted(m["architectures"]) == ["gpt2", "llama"] and
          m["summary"]["per_form"]["train_ir"] == {"ok": 1, "failed": 1, "skipped": 0, "other": 0}, str(m["summary"]))


def main():
    fxfuse = sys.argv[1] if len(sys.argv) > 1 else None
    test_shards()
    test_dry_run()
    test_config_shrinking()
    test_scalar_kwarg()
    with tempfile.TemporaryDirectory() as tmp:
        test_files(tmp, fxfuse)
        test_pool(tmp)
    print("%d failed" % len(FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
