#!/usr/bin/env python3
"""Builds fxfuse's model zoo: every decoder-only causal-LM architecture of transformers, from a
tiny config with seeded random weights (never downloaded), written as the graphs fxfuse reads.

    PYTHONUNBUFFERED=1 python3 tools/zoo/make_zoo.py --out $OUT/zoo_work --tar $OUT/zoo.tar.gz
    python3 tools/zoo/make_zoo.py --self-test --out /tmp/zoo_selftest     # 2 architectures, seconds
    python3 tools/zoo/make_zoo.py --dry-run                               # no torch needed

Per architecture (model_type of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), in its own process with a
hard time limit, files under <out>/zoo/<arch>/:
  <arch>.train_ir.pt2                 torch.export.export (weights stripped)
  <arch>.core_aten.pt2                ep.run_decompositions() (weights kept when small, see below)
  <arch>.post_grad.fxg.json.gz        fxfuse_export.backend(stage="post_grad_post") under torch.compile
  <arch>.post_grad.scalars.fxg.json.gz  the same with the exporter recording lifted scalar values
                                      (only when fxfuse_export has that option; else "skipped")
  <arch>.input_ids.i64 / .logits.f32 / .reference.json
                                      the fixed input, torch's eager logits (fp32, little-endian)
The parent process writes <out>/zoo/manifest.json (status of every form of every architecture,
one-line errors) and packs <out>/zoo into one tar.gz (members zoo/...), the workers' logs into
<tar>_logs.tar.gz next to it. docs/zoo.md.

Nothing here imports torch at module level: --dry-run and the helpers work on any python3.
"""
import argparse
import array
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
MANIFEST_VERSION = 1
T0 = time.time()

SEQ_LEN = 16  # = fxfuse's size for a free symbol without a hint, so `run --input` fits the export
INPUT_SEED = 1234
MODEL_SEED = 0

# Forms written per architecture: name -> file suffix (after "<arch>.").
FORMS = {
    "train_ir": "train_ir.pt2",
    "core_aten": "core_aten.pt2",
    "post_grad": "post_grad.fxg.json.gz",
    "post_grad_scalars": "post_grad.scalars.fxg.json.gz",
}
REFERENCE_FILES = ("input_ids.i64", "logits.f32", "reference.json")

# Feature families (issue: at least 3 MoE, 2 LayerNorm, Gemma-style norm, q/k norm, sliding
# window, logit soft-capping). Tags are documentation for the tables; the zoo covers whatever
# transformers ships.
FAMILY_TAGS = {
    "moe": ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "dbrx", "jetmoe",
            "granitemoe", "granitemoeshared", "granitemoehybrid", "phimoe", "minimax", "hunyuan_v1_moe",
            "ernie4_5_moe", "glm4_moe", "gpt_oss", "llama4_text", "dots1", "bailing_moe", "flex_olmo",
            "qwen3_next", "longcat_flash", "aria_text", "jamba", "switch_transformers", "nllb_moe"],
    "layernorm": ["gpt2", "opt", "gpt_neox", "gpt_neox_japanese", "gptj", "gpt_neo", "bloom", "falcon", "phi",
                  "stablelm", "starcoder2", "codegen", "gpt_bigcode", "biogpt", "xglm", "mpt", "persimmon",
                  "olmo", "cohere", "cohere2", "ctrl", "xlnet", "git", "blt"],
    "gemma_norm": ["gemma", "gemma2", "gemma3_text", "gemma3", "recurrent_gemma", "vaultgemma", "gemma3n_text",
                   "qwen3_next"],
    "qk_norm": ["qwen3", "qwen3_moe", "olmo2", "olmo3", "olmoe", "gemma3_text", "gemma3", "chameleon",
                "persimmon", "hunyuan_v1_dense", "hunyuan_v1_moe", "flex_olmo", "qwen3_next", "apertus",
                "seed_oss", "smollm3"],
    "sliding_window": ["mistral", "mixtral", "gemma2", "gemma3_text", "cohere2", "starcoder2", "qwen2",
                       "ministral", "phi3", "gpt_oss", "olmo3"],
    "softcap": ["gemma2", "gemma3_text", "gemma3", "grok", "vaultgemma"],
}
REQUIRED_FAMILIES = {"moe": 3, "layernorm": 2, "gemma_norm": 1, "qk_norm": 1, "sliding_window": 1, "softcap": 1}

# Started first so that the families the issue asks for are done even when the time runs out.
PRIORITY = ["llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmoe", "olmo2",
            "gemma", "gemma2", "gemma3_text", "gpt2", "opt", "gpt_neox", "phi3", "phi", "falcon", "bloom",
            "starcoder2", "stablelm", "granite", "cohere", "deepseek_v3", "gptj", "gpt_bigcode", "olmo",
            "granitemoe", "phimoe", "cohere2", "smollm3", "ministral"]
SELF_TEST_ARCHS = ["llama", "gpt2"]

# In the causal-LM mapping but not decoder-only models: encoders used as decoders (BERT family)
# and the decoder halves of encoder-decoder models. --include-non-decoder keeps them.
NON_DECODER = {
    "bert", "bert-generation", "big_bird", "bigbird_pegasus", "camembert", "data2vec-text", "electra",
    "ernie", "megatron-bert", "qdqbert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
    "xlm-roberta", "xlm-roberta-xl", "xmod", "bart", "blenderbot", "blenderbot-small", "marian", "mbart",
    "pegasus", "plbart", "prophetnet", "xlm-prophetnet", "trocr", "speech_to_text_2", "whisper",
    "musicgen", "musicgen_melody", "modernbert-decoder", "xlm", "t5gemma", "moshi", "nllb_moe",
    "switch_transformers", "umt5", "mt5", "t5",
}

# When transformers is not importable (--dry-run on a machine without it): model_type ->
# causal-LM class, a snapshot of the common decoder architectures.
FALLBACK_ARCHS = {
    "apertus": "ApertusForCausalLM", "arcee": "ArceeForCausalLM", "aria_text": "AriaTextForCausalLM",
    "bamba": "BambaForCausalLM", "bitnet": "BitNetForCausalLM", "bloom": "BloomForCausalLM",
    "chameleon": "ChameleonForConditionalGeneration", "codegen": "CodeGenForCausalLM",
    "cohere": "CohereForCausalLM", "cohere2": "Cohere2ForCausalLM", "ctrl": "CTRLLMHeadModel",
    "dbrx": "DbrxForCausalLM", "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "diffllama": "DiffLlamaForCausalLM", "doge": "DogeForCausalLM", "dots1": "Dots1ForCausalLM",
    "emu3": "Emu3ForCausalLM", "ernie4_5": "Ernie4_5ForCausalLM", "ernie4_5_moe": "Ernie4_5_MoeForCausalLM",
    "exaone4": "Exaone4ForCausalLM", "falcon": "FalconForCausalLM", "falcon_h1": "FalconH1ForCausalLM",
    "falcon_mamba": "FalconMambaForCausalLM", "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM", "gemma3n_text": "Gemma3nForCausalLM", "git": "GitForCausalLM",
    "glm": "GlmForCausalLM", "glm4": "Glm4ForCausalLM", "glm4_moe": "Glm4MoeForCausalLM",
    "gpt2": "GPT2LMHeadModel", "gpt_bigcode": "GPTBigCodeForCausalLM", "gpt_neo": "GPTNeoForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM", "gpt_neox_japanese": "GPTNeoXJapaneseForCausalLM",
    "gpt_oss": "GptOssForCausalLM", "gptj": "GPTJForCausalLM", "granite": "GraniteForCausalLM",
    "granitemoe": "GraniteMoeForCausalLM", "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "granitemoeshared": "GraniteMoeSharedForCausalLM", "helium": "HeliumForCausalLM",
    "hunyuan_v1_dense": "HunYuanDenseV1ForCausalLM", "hunyuan_v1_moe": "HunYuanMoEV1ForCausalLM",
    "jamba": "JambaForCausalLM", "jetmoe": "JetMoeForCausalLM", "lfm2": "Lfm2ForCausalLM",
    "llama": "LlamaForCausalLM", "llama4_text": "Llama4ForCausalLM", "mamba": "MambaForCausalLM",
    "mamba2": "Mamba2ForCausalLM", "minimax": "MiniMaxForCausalLM", "ministral": "MinistralForCausalLM",
    "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM", "mllama": "MllamaForCausalLM",
    "mpt": "MptForCausalLM", "nemotron": "NemotronForCausalLM", "olmo": "OlmoForCausalLM",
    "olmo2": "Olmo2ForCausalLM", "olmo3": "Olmo3ForCausalLM", "olmoe": "OlmoeForCausalLM",
    "opt": "OPTForCausalLM", "persimmon": "PersimmonForCausalLM", "phi": "PhiForCausalLM",
    "phi3": "Phi3ForCausalLM", "phimoe": "PhimoeForCausalLM", "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM", "recurrent_gemma": "RecurrentGemmaForCausalLM",
    "rwkv": "RwkvForCausalLM", "seed_oss": "SeedOssForCausalLM", "smollm3": "SmolLM3ForCausalLM",
    "stablelm": "StableLmForCausalLM", "starcoder2": "Starcoder2ForCausalLM", "vaultgemma": "VaultGemmaForCausalLM",
    "xglm": "XGLMForCausalLM", "zamba": "ZambaForCausalLM", "zamba2": "Zamba2ForCausalLM",
    "biogpt": "BioGptForCausalLM", "bert": "BertLMHeadModel", "opt_like_fallback_marker": None,
}
FALLBACK_ARCHS.pop("opt_like_fallback_marker")

# Tiny sizes: (attribute spellings, value). Each spelling is set when the config class has it
# (as an attribute, an attribute_map alias or an __init__ parameter); the rest are left alone.
CORE_SIZES = [
    (("vocab_size",), 256),
    (("hidden_size", "n_embd", "d_model", "model_dim", "embed_dim"), 64),
    (("num_hidden_layers", "n_layer", "num_layers", "n_layers", "decoder_layers"), 2),
    (("num_attention_heads", "n_head", "num_heads", "n_heads", "decoder_attention_heads"), 4),
    (("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"), 2),
    (("head_dim", "kv_channels", "attention_head_size", "head_size"), 16),
    (("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", "decoder_ffn_dim", "d_ff",
      "inner_hidden_size", "mlp_dim"), 128),
    (("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx",
      "max_sequence_length", "max_seq_length"), 128),
    # Chunked SSM scans (Mamba-2 mixers) pad the sequence to a chunk and materialize
    # [chunk, chunk, heads, state] products: 2^31 elements at the default 256 with falcon_h1's
    # default heads and state, which a config that keeps only the core sizes still has.
    (("chunk_size", "mamba_chunk_size"), 16),
]
EXTRA_SIZES = [
    (("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size"), 32),
    (("shared_expert_intermediate_size",), 32),
    (("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts"), 4),
    (("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "num_selected_experts", "moe_k"), 2),
    (("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"), 1),
    (("n_group",), 1),
    (("topk_group",), 1),
    (("first_k_dense_replace",), 1),
    (("rotary_dim",), 8),
    (("q_lora_rank",), 32),
    (("kv_lora_rank",), 16),
    (("qk_rope_head_dim",), 8),
    (("qk_nope_head_dim",), 8),
    (("v_head_dim",), 16),
    (("state_size", "d_state", "ssm_state_size", "mamba_d_state"), 8),
    (("conv_kernel", "d_conv", "mamba_d_conv", "linear_conv_kernel_dim"), 4),
    (("time_step_rank",), 8),
    (("n_groups", "mamba_n_groups"), 1),
    (("mamba_n_heads",), 8),
    (("mamba_d_head",), 16),
    (("linear_num_key_heads",), 2),
    (("linear_num_value_heads",), 4),
    (("linear_key_head_dim", "linear_value_head_dim"), 16),
    (("hidden_size_per_layer_input",), 16),
    (("vocab_size_per_layer_input",), 256),
    (("attention_window_size", "window_size"), 8),
    (("word_embed_proj_dim", "embedding_size"), 64),
]
TOKEN_IDS = [(("pad_token_id",), 0), (("bos_token_id",), 1), (("eos_token_id",), 2),
             (("decoder_start_token_id",), 1)]
MAX_PARAMS = 30_000_000  # a config that stays larger than this after shrinking is refused


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


def one_line(e, limit=400):
    s = "%s: %s" % (type(e).__name__, e) if isinstance(e, BaseException) else str(e)
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def write_json_atomic(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def tags_of(arch):
    return sorted(t for t, names in FAMILY_TAGS.items() if arch in names)


# --------------------------------------------------------------------------- enumeration

def _first_class(names, module):
    """A mapping value is a class name or a tuple of them; the first one the module has."""
    if isinstance(names, str):
        names = (names,)
    for n in names or ():
        if module is None or hasattr(module, n):
            return n
    return None


def enumerate_archs(include_non_decoder=False, only=None):
    """[{arch, model_class, config_class, tags, excluded}] from transformers' auto mappings, or
    from FALLBACK_ARCHS when transformers cannot be imported (source says which)."""
    source = "transformers"
    try:
        from transformers.models.auto import configuration_auto, modeling_auto
        import transformers
        causal = dict(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
        configs = dict(configuration_auto.CONFIG_MAPPING_NAMES)
        version = getattr(transformers, "__version__", "?")
    except Exception as e:  # noqa: BLE001 - no transformers (dry run): the built-in list
        causal, configs, transformers = dict(FALLBACK_ARCHS), {}, None
        source = "built-in list (transformers not importable: %s)" % one_line(e, 120)
        version = None
    out = []
    for arch, cls_names in sorted(causal.items()):
        if only and arch not in only:
            continue
        excluded = None
        if arch in NON_DECODER and not include_non_decoder:
            excluded = "not a decoder-only model (encoder or encoder-decoder half)"
        out.append({"arch": arch, "model_class": _first_class(cls_names, None),
                    "config_class": configs.get(arch), "tags": tags_of(arch), "excluded": excluded})
    if only:
        missing = sorted(set(only) - {a["arch"] for a in out})
        for arch in missing:
            out.append({"arch": arch, "model_class": None, "config_class": None, "tags": tags_of(arch),
                        "excluded": "not in the causal-LM mapping of this transformers"})
    rank = {a: i for i, a in enumerate(PRIORITY)}
    out.sort(key=lambda a: (rank.get(a["arch"], len(rank)), a["arch"]))
    return out, source, version


def family_coverage(archs):
    cov = {}
    for a in archs:
        if a.get("excluded"):
            continue
        for t in a["tags"]:
            cov.setdefault(t, []).append(a["arch"])
    return cov


# --------------------------------------------------------------------------- config shrinking

def _config_has(cfg_cls, default_cfg, name):
    if default_cfg is not None and (hasattr(default_cfg, name) or name in getattr(default_cfg, "attribute_map", {})):
        return True
    try:
        import inspect
        return name in inspect.signature(cfg_cls.__init__).parameters
    except Exception:  # noqa: BLE001
        return False


def tiny_config_kwargs(cfg_cls, default_cfg, level=0):
    """kwargs for cfg_cls(...): level 0 every size we know, 1 the core sizes only."""
    groups = CORE_SIZES + TOKEN_IDS + ([] if level else EXTRA_SIZES)
    kw = {}
    for names, value in groups:
        for n in names:
            if _config_has(cfg_cls, default_cfg, n):
                kw[n] = value
    if "sliding_window" in dir(default_cfg) and getattr(default_cfg, "sliding_window", None):
        kw["sliding_window"] = 8  # shorter than the input: the window really masks
    if _config_has(cfg_cls, default_cfg, "use_cache"):
        kw["use_cache"] = False
    if _config_has(cfg_cls, default_cfg, "tie_word_embeddings"):
        kw["tie_word_embeddings"] = False
    return kw


def fix_layer_lists(cfg, layers=2):
    """Per-layer lists sized for the default depth (layer_types, ...) cut to `layers` entries."""
    notes = []
    for name in ("layer_types", "layers_block_type", "mlp_only_layers", "full_attn_idxs", "attn_layer_indices",
                 "no_rope_layers"):
        v = getattr(cfg, name, None)
        if isinstance(v, (list, tuple)) and len(v) > layers and name in ("layer_types", "layers_block_type",
                                                                          "no_rope_layers"):
            try:
                setattr(cfg, name, list(v)[:layers])
                notes.append("%s cut to %d" % (name, layers))
            except Exception:  # noqa: BLE001
                pass
        elif isinstance(v, (list, tuple)) and name in ("mlp_only_layers", "full_attn_idxs", "attn_layer_indices"):
            kept = [i for i in v if isinstance(i, int) and i < layers]
            if kept != list(v):
                try:
                    setattr(cfg, name, kept)
                    notes.append("%s -> %s" % (name, kept))
                except Exception:  # noqa: BLE001
                    pass
    return notes


def build_config(transformers, spec, level):
    cfg_cls = getattr(transformers, spec["config_class"]) if spec.get("config_class") else None
    if cfg_cls is None:
        from transformers import AutoConfig
        default = AutoConfig.for_model(spec["arch"])
        cfg_cls = type(default)
    else:
        default = cfg_cls()
    kw = tiny_config_kwargs(cfg_cls, default, level)
    cfg = cfg_cls(**kw)
    for k, v in kw.items():  # aliases that __init__ swallowed or recomputed
        try:
            if getattr(cfg, k, v) != v and k not in ("sliding_window",):
                setattr(cfg, k, v)
        except Exception:  # noqa: BLE001
            pass
    notes = fix_layer_lists(cfg)
    return cfg, kw, notes


def config_summary(cfg):
    keys = [n for group in CORE_SIZES + EXTRA_SIZES for n in group[0]] + [
        "sliding_window", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "final_logit_softcapping",
        "attn_logit_softcapping", "layer_types", "tie_word_embeddings", "_attn_implementation"]
    out = {}
    for k in keys:
        try:
            v = getattr(cfg, k)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)) and len(v) <= 16:
            out[k] = [x if isinstance(x, (int, float, str, bool)) else str(x) for x in v]
    return out


# --------------------------------------------------------------------------- files (no torch)

def write_raw(path, typecode, values):
    """Little-endian raw array (typecode 'f' fp32, 'q' int64)."""
    a = array.array(typecode, values)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        f.write(a.tobytes())


def read_raw(path, typecode):
    a = array.array(typecode)
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def gzip_file(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    with open(dst + ".tmp", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as g:
            g.write(data)
    os.replace(dst + ".tmp", dst)


def pt2_weight_members(path):
    """(weight payload members, weights config members) of a torch.export archive."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    payload = [n for n in names if re.search(r"/data/weights/[^/]+$", n) and not n.endswith(".json")]
    configs = [n for n in names if re.search(r"/data/weights/[^/]*weights_config\.json$", n)]
    return payload, configs


def strip_pt2_weights(src, dst=None):
    """Removes the weight payloads of a .pt2 archive, keeping their metadata (dtype, shape): the
    weights config entries lose `path_name`, so readers treat the weights as graph inputs without
    data. Other members are copied byte for byte (stored, as torch writes them). Returns bytes saved."""
    dst = dst or src
    payload, configs = pt2_weight_members(src)
    before = os.path.getsize(src)
    tmp = dst + ".strip.tmp"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            if info.filename in payload:
                continue
            data = zin.read(info.filename)
            if info.filename in configs:
                cfg = json.loads(data)
                for meta in (cfg.get("config") or {}).values():
                    if isinstance(meta, dict):
                        meta.pop("path_name", None)
                cfg["fxfuse_zoo"] = "weights stripped (tools/zoo/make_zoo.py)"
                data = json.dumps(cfg, sort_keys=True).encode()
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            zi.compress_type = zipfile.ZIP_STORED
            zout.writestr(zi, data)
    os.replace(tmp, dst)
    return before - os.path.getsize(dst)


def compact_pt2(path):
    """Deflates the members of a .pt2 archive that are not weight payloads (the program JSON,
    configs, sample inputs): torch writes everything stored, and a program's JSON shrinks about
    20x, which is what lets the zoo live in the repository. Weight payloads stay stored, as torch
    wrote them. Idempotent; returns bytes saved."""
    payload, _ = pt2_weight_members(path)
    before = os.path.getsize(path)
    tmp = path + ".compact.tmp"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp, "w") as zout:
        for info in zin.infolist():
            zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            zi.compress_type = zipfile.ZIP_STORED if info.filename in payload else zipfile.ZIP_DEFLATED
            zout.writestr(zi, zin.read(info.filename), compresslevel=9)
    os.replace(tmp, path)
    return before - os.path.getsize(path)


def compact_zoo(zoo):
    """compact_pt2 on every archive under the directory zoo; returns bytes saved."""
    saved = 0
    for root, dirs, files in os.walk(zoo):
        dirs.sort()
        for fn in sorted(files):
            if fn.endswith(".pt2"):
                saved += compact_pt2(os.path.join(root, fn))
    return saved


def pack_graphs(zoo, name="graphs.tar.xz"):
    """Moves every architecture directory of `zoo` into one xz tarball `zoo/name` (sorted
    members, zero times and owners: the same zoo packs to the same bytes), the form the
    repository keeps (tools/zoo/check_zoo.py unpacks it). Returns the tarball's size."""
    import lzma
    dirs = sorted(d for d in os.listdir(zoo) if os.path.isdir(os.path.join(zoo, d)))
    out = os.path.join(zoo, name)
    with tarfile.open(out + ".tmp", "w:xz", preset=9 | lzma.PRESET_EXTREME) as tf:
        for d in dirs:
            for fn in sorted(os.listdir(os.path.join(zoo, d))):
                info = tf.gettarinfo(os.path.join(zoo, d, fn), arcname=d + "/" + fn)
                info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
                with open(os.path.join(zoo, d, fn), "rb") as f:
                    tf.addfile(info, f)
    os.replace(out + ".tmp", out)
    for d in dirs:
        shutil.rmtree(os.path.join(zoo, d))
    return os.path.getsize(out)


def pt2_weight_bytes(path):
    payload, _ = pt2_weight_members(path)
    with zipfile.ZipFile(path) as z:
        return sum(z.getinfo(n).file_size for n in payload)


# --------------------------------------------------------------------------- worker (torch)

class _Done(Exception):
    """Raised by the pass chained after the dump: the graph is written, skip Inductor's codegen."""


def _is_done(e):
    for _ in range(30):
        if e is None:
            return False
        if isinstance(e, _Done) or "_Done" in repr(e)[:2000]:
            return True
        e = e.__cause__ or e.__context__
    return False


SCALAR_KWARG_CANDIDATES = ("record_scalars", "record_lifted_scalars", "record_scalar_values",
                           "record_scalar_inputs", "lifted_scalar_values", "record_input_values",
                           "record_values", "scalar_values")


def scalar_record_kwarg(fe, override=None):
    """Name of fxfuse_export's option that records the values of lifted scalar inputs, or None."""
    import inspect
    names = []
    for f in (getattr(fe, "backend", None), getattr(getattr(fe, "DumpPass", None), "__init__", None)):
        try:
            names += [p for p in inspect.signature(f).parameters if p not in ("self", "kw", "kwargs")]
        except Exception:  # noqa: BLE001
            pass
    if override:
        return override if override in names else None
    for c in SCALAR_KWARG_CANDIDATES:
        if c in names:
            return c
    for n in names:
        if "scalar" in n.lower():
            return n
    return None


def lifted_scalar_inputs(mod):
    """Graph inputs that are 0-d CPU tensors (what Dynamo lifts from Python floats/ints)."""
    out = []
    for g in mod.get("graphs", [])[:1]:
        vals = {v.get("id"): v for v in g.get("values", [])}
        for gi in g.get("inputs", []):
            v = vals.get(gi.get("value"), {})
            t = v.get("tensor") or {}
            if v.get("kind") == "TENSOR" and t.get("shape") == [] and (t.get("device") or {}).get("type") == "cpu":
                out.append("%s:%s" % (v.get("name"), t.get("dtype")))
    return out


class Worker:
    """One architecture, in its own process (parent kills it at its time limit)."""

    def __init__(self, spec, args):
        self.spec, self.args = spec, args
        self.arch = spec["arch"]
        self.dir = os.path.join(args.out, "zoo", self.arch)
        self.res_path = os.path.join(args.out, "_results", self.arch + ".json")
        self.deadline = time.time() + args.timeout - 10
        self.res = {"arch": self.arch, "tags": spec["tags"], "model_class": spec.get("model_class"),
                    "config_class": spec.get("config_class"), "status": "started", "forms": {},
                    "started": time.time()}

    def save(self):
        self.res["seconds"] = round(time.time() - self.res["started"], 1)
        write_json_atomic(self.res_path, self.res)

    def path(self, suffix):
        return os.path.join(self.dir, "%s.%s" % (self.arch, suffix))

    def form(self, name, fn, *a):
        """Runs one form in its own try/except; its status goes into the result at once."""
        ent = self.res["forms"].setdefault(name, {})
        if time.time() > self.deadline - 15:
            ent["status"] = "skipped: per-model time limit"
            self.save()
            return None
        t = time.time()
        log(self.arch, "BEGIN", name)
        try:
            r = fn(ent, *a)
            ent.setdefault("status", "ok")
            log(self.arch, "OK   ", name, "%.1fs" % (time.time() - t))
        except Exception as e:  # noqa: BLE001
            ent["status"] = "failed: " + one_line(e)
            log(self.arch, "FAIL ", name, one_line(e))
            traceback.print_exc()
            r = None
        ent["seconds"] = round(time.time() - t, 1)
        self.save()
        return r

    def run(self):
        os.makedirs(self.dir, exist_ok=True)
        self.save()
        import torch
        torch.set_num_threads(1)
        import transformers
        sys.path.insert(0, TOOLS)
        import fxfuse_export as fe
        self.torch, self.transformers, self.fe = torch, transformers, fe
        cuda = torch.cuda.is_available() and self.args.device == "cuda"
        self.device = "cuda" if cuda else "cpu"
        self.dtype = getattr(torch, self.args.dtype)
        self.res.update(torch=torch.__version__, transformers=transformers.__version__, device=self.device,
                        dtype=self.args.dtype)
        try:  # torch.export cannot serialize the cuDNN attention op that Hopper would pick
            torch.backends.cuda.enable_cudnn_sdp(False)
        except Exception:  # noqa: BLE001
            pass
        if self.form("build", self.build) is None:
            self.res["status"] = "build " + self.res["forms"]["build"]["status"]
            for f in ["reference"] + list(FORMS):
                self.res["forms"][f] = {"status": "skipped: the model did not build"}
            self.save()
            return
        self.form("reference", self.reference)
        ep = self.form("train_ir", self.train_ir)
        if ep is not None:
            self.form("core_aten", self.core_aten, ep)
        else:
            self.res["forms"]["core_aten"] = {"status": "skipped: no train IR export"}
        del ep
        kw = scalar_record_kwarg(fe, self.args.scalar_kwarg)
        self.res["scalar_record_kwarg"] = kw
        # The exporter records lifted scalars from Dynamo's example inputs unless given a map
        # ({} records none); `scalar_values` is {placeholder index: value}, not a flag.
        self.form("post_grad", self.post_grad, "post_grad", {kw: {}} if kw else {})
        if kw:
            self.form("post_grad_scalars", self.post_grad, "post_grad.scalars", {})
        else:
            self.res["forms"]["post_grad_scalars"] = {
                "status": "skipped: fxfuse_export has no option to record lifted scalar values (looked for %s)"
                          % ", ".join(SCALAR_KWARG_CANDIDATES[:3])}
        bad = [f for f, e in self.res["forms"].items()
               if e.get("status") != "ok" and not (f == "post_grad_scalars" and not kw)]
        self.res["status"] = "done" + (" (not ok: %s)" % ", ".join(bad) if bad else "")
        self.save()

    def save_program(self, ep, form):
        """torch.export.save through a temporary name: a killed worker leaves no partial archive."""
        path = self.path(FORMS[form])
        tmp = path[:-len(".pt2")] + ".partial.pt2"
        self.torch.export.save(ep, tmp)
        os.replace(tmp, path)
        return path

    # -- the model
    def build(self, ent):
        torch, transformers = self.torch, self.transformers
        last = None
        for level in (0, 1):
            try:
                cfg, kw, notes = build_config(transformers, self.spec, level)
                model, impl = self._instantiate(cfg)
                wrapped = _wrap(torch, model)
                wrapped.probe(self.input_ids_for(cfg))  # one eager forward: the config works
                break
            except Exception as e:  # noqa: BLE001
                last = e
                log(self.arch, "config level", level, "failed:", one_line(e))
        else:
            raise last
        n_params = sum(p.numel() for p in model.parameters())
        self.model = wrapped
        self.cfg = cfg
        ent.update(config_level=level, config_set=sorted(kw), config_notes=notes, attn_implementation=impl,
                   params=int(n_params),
                   param_bytes=int(sum(p.numel() * p.element_size() for p in model.parameters())))
        self.res["config"] = config_summary(cfg)
        return True

    def _instantiate(self, cfg):
        torch, transformers = self.torch, self.transformers
        cls = getattr(transformers, self.spec["model_class"])
        try:  # size check on the meta device first: a config that did not shrink costs nothing
            with torch.device("meta"):
                n = sum(p.numel() for p in cls._from_config(cfg).parameters())
        except Exception:  # noqa: BLE001
            n = 0
        if n > MAX_PARAMS:
            raise RuntimeError("%d parameters after shrinking the config (limit %d)" % (n, MAX_PARAMS))
        last = None
        for impl in ("sdpa", "eager"):
            torch.manual_seed(MODEL_SEED)
            try:
                try:
                    m = cls._from_config(cfg, attn_implementation=impl)
                except TypeError:
                    cfg._attn_implementation = impl
                    m = cls(cfg)
                m = m.to(device=self.device, dtype=self.dtype).eval()
                return m, impl
            except Exception as e:  # noqa: BLE001
                last = e
        raise last

    def input_ids(self):
        return self.input_ids_for(self.cfg)

    def input_ids_for(self, cfg):
        torch = self.torch
        g = torch.Generator().manual_seed(INPUT_SEED)
        hi = max(4, min(int(getattr(cfg, "vocab_size", 256) or 256), 256))
        return torch.randint(3, hi, (1, SEQ_LEN), generator=g).to(self.device)

    def reference(self, ent):
        torch = self.torch
        ids = self.input_ids()
        with torch.no_grad():
            logits = self.model(ids)
        lf = logits.detach().float().cpu().contiguous()
        finite = bool(torch.isfinite(lf).all())
        write_raw(self.path("input_ids.i64"), "q", ids.cpu().flatten().tolist())
        write_raw(self.path("logits.f32"), "f", lf.flatten().tolist())
        ref = {"input": {"name": "input_ids", "file": self.arch + ".input_ids.i64", "dtype": "int64",
                         "shape": list(ids.shape)},
               "logits": {"file": self.arch + ".logits.f32", "dtype": "float32", "shape": list(lf.shape),
                          "model_dtype": self.args.dtype, "finite": finite,
                          "absmax": float(lf.abs().max()) if finite else None},
               "torch": torch.__version__, "transformers": self.transformers.__version__,
               "device": self.device, "seed": {"model": MODEL_SEED, "input": INPUT_SEED}}
        write_json_atomic(self.path("reference.json"), ref)
        self.logits = logits.detach().float()
        ent.update(finite=finite, shape=list(lf.shape))
        if not finite:
            ent["status"] = "failed: eager logits are not finite"
        return True

    def _export(self, ids):
        torch = self.torch
        from torch.export import Dim, export
        tries = []
        if hasattr(Dim, "AUTO"):
            tries.append(("Dim.AUTO", ({1: Dim.AUTO},)))
        tries.append(("static", None))
        last = None
        for desc, spec in tries:
            if time.time() > self.deadline - 20:
                break
            try:
                with torch.no_grad():
                    return export(self.model, (ids,), dynamic_shapes=spec), desc
            except Exception as e:  # noqa: BLE001
                log(self.arch, "export with", desc, "failed:", one_line(e, 200))
                last = e
        raise last or RuntimeError("no time left for torch.export")

    def _check_against_eager(self, ent, ep, ids):
        try:
            with self.torch.no_grad():
                y = ep.module()(ids)
            y = y[0] if isinstance(y, (tuple, list)) else y
            if hasattr(self, "logits"):
                ent["max_abs_vs_eager"] = float((y.float() - self.logits).abs().max())
        except Exception as e:  # noqa: BLE001
            ent["run_check"] = "failed: " + one_line(e, 200)

    def train_ir(self, ent):
        ids = self.input_ids()
        ep, desc = self._export(ids)
        ent["dynamic"] = desc
        self.save_program(ep, "train_ir")
        ent["ops"] = self.fe.op_histogram(ep.graph_module)
        ent["file"] = self.arch + "." + FORMS["train_ir"]
        self._check_against_eager(ent, ep, ids)
        return ep

    def core_aten(self, ent, ep):
        core = ep.run_decompositions()
        self.save_program(core, "core_aten")
        ent["ops"] = self.fe.op_histogram(core.graph_module)
        ent["file"] = self.arch + "." + FORMS["core_aten"]
        ent["weight_bytes"] = pt2_weight_bytes(self.path(FORMS["core_aten"]))
        self._check_against_eager(ent, core, self.input_ids())
        return True

    def post_grad(self, ent, stem, extra_kw):
        torch, fe = self.torch, self.fe
        import torch._dynamo
        import torch._inductor.config as icfg
        tmp = os.path.join(self.args.out, "_tmp", self.arch, stem)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)

        class Abort(fe.exporter._PassBase):
            def uuid(self):
                return "fxfuse-zoo-abort"

            def __call__(self, graph):
                raise _Done()

        patches = {"post_grad_custom_post_pass": Abort(), "force_disable_caches": True, "fx_graph_cache": False,
                   "enable_auto_functionalized_v2": False, "compile_threads": 1}
        patches = {k: v for k, v in patches.items() if hasattr(icfg, k)}
        mode = None
        for fullgraph, abort in ((True, True), (False, False)):
            torch._dynamo.reset()
            ids = self.input_ids().clone()
            getattr(torch._dynamo, "maybe_mark_dynamic", torch._dynamo.mark_dynamic)(ids, 1)
            p = dict(patches)
            if not abort:
                p.pop("post_grad_custom_post_pass", None)
            be = fe.backend(tmp, stage="post_grad_post", prefix=self.arch, **extra_kw)
            try:
                with icfg.patch(p):
                    fn = torch.compile(self.model, backend=be, fullgraph=fullgraph)
                    with torch.no_grad():
                        fn(ids)
                mode = "fullgraph=%s" % fullgraph
            except Exception as e:  # noqa: BLE001
                if _is_done(e):
                    mode = "fullgraph=%s, stopped after the post-grad pass" % fullgraph
                else:
                    log(self.arch, stem, "torch.compile fullgraph=%s failed:" % fullgraph, one_line(e, 300))
                    if not fullgraph or time.time() > self.deadline - 30:
                        raise
            if any(f.endswith(".fxg.json") for f in os.listdir(tmp)):
                break
        dumps = sorted(f for f in os.listdir(tmp) if f.endswith(".fxg.json"))
        if not dumps:
            raise RuntimeError("the post-grad pass wrote no graph (%s)" % mode)
        files, ops, scalars, meta_keys = [], [], [], []
        for i, f in enumerate(dumps):
            name = "%s.%s%s.fxg.json.gz" % (self.arch, stem, "" if i == 0 else ".%d" % i)
            with open(os.path.join(tmp, f)) as fh:
                mod = json.load(fh)
            gzip_file(os.path.join(tmp, f), os.path.join(self.dir, name))
            files.append(name)
            ops.append(fe.module_histogram(mod))
            scalars.append(lifted_scalar_inputs(mod))
            meta_keys.append(sorted((mod.get("metadata") or {}).keys()))
        shutil.rmtree(tmp, ignore_errors=True)
        ent.update(file=files[0], files=files, graphs=len(files), mode=mode, ops=ops[0],
                   lifted_scalar_inputs=scalars[0], metadata_keys=meta_keys[0], exporter_kwargs=extra_kw)
        return True


def _wrap(torch, model):
    class CausalLM(torch.nn.Module):
        """forward(input_ids) -> logits, without a KV cache."""

        def __init__(self, m):
            super().__init__()
            self.m = m
            self.kw = {"use_cache": False}

        def probe(self, input_ids):
            """Eager call that settles the keyword arguments (no try/except under tracing)."""
            with torch.no_grad():
                try:
                    self.forward(input_ids)
                except TypeError:
                    self.kw = {}
                    self.forward(input_ids)

        def forward(self, input_ids):
            out = self.m(input_ids=input_ids, **self.kw)
            logits = getattr(out, "logits", None)
            return logits if logits is not None else out[0]

    return CausalLM(model)


def worker_main(args):
    spec = json.loads(args.worker_spec)
    w = Worker(spec, args)
    try:
        w.run()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        w.res["status"] = "failed: " + one_line(e)
        w.save()
        return 1
    return 0


# --------------------------------------------------------------------------- parent: pool

def worker_env(args, arch):
    env = dict(os.environ)
    cache = os.path.join(args.out, "_tmp", arch, "inductor_cache")
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TORCHINDUCTOR_COMPILE_THREADS="1", TORCHINDUCTOR_CACHE_DIR=cache,
               TRITON_CACHE_DIR=os.path.join(cache, "triton"), TORCHINDUCTOR_FX_GRAPH_CACHE="0",
               TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    return env


def worker_cmd(args, spec):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker-spec", json.dumps(spec), "--out", args.out,
           "--timeout", str(args.timeout), "--device", args.device, "--dtype", args.dtype]
    if args.scalar_kwarg:
        cmd += ["--scalar-kwarg", args.scalar_kwarg]
    return cmd


def _kill(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except Exception:  # noqa: BLE001
        try:
            p.kill()
        except Exception:  # noqa: BLE001
            pass


def _form_line(args, arch):
    """'train_ir ok, core_aten failed, ...' from a worker's result file (progress lines)."""
    try:
        with open(os.path.join(args.out, "_results", arch + ".json")) as f:
            forms = json.load(f).get("forms", {})
        return "| " + ", ".join("%s %s" % (k, str(v.get("status", "?")).split(":")[0])
                                for k, v in forms.items())
    except Exception:  # noqa: BLE001
        return ""


def run_pool(args, specs):
    """One process per architecture, `jobs` at a time; each killed at its own time limit, all
    killed at the global deadline. Returns {arch: how the process ended}."""
    os.makedirs(os.path.join(args.out, "_results"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "_logs"), exist_ok=True)
    queue, running, ended = list(specs), {}, {}
    while queue or running:
        now = time.time() - T0
        while queue and len(running) < args.jobs and now < args.budget:
            spec = queue.pop(0)
            logf = open(os.path.join(args.out, "_logs", spec["arch"] + ".log"), "w")
            p = subprocess.Popen(worker_cmd(args, spec), stdout=logf, stderr=subprocess.STDOUT,
                                 env=worker_env(args, spec["arch"]), start_new_session=True)
            running[spec["arch"]] = (p, time.time(), logf)
            log("start", spec["arch"], "(%d running, %d queued)" % (len(running), len(queue)))
        if queue and now >= args.budget:
            for spec in queue:
                ended[spec["arch"]] = "not started: global time budget (--budget %ds)" % args.budget
            log("global budget reached: %d architectures not started" % len(queue))
            queue = []
        for arch, (p, t, logf) in list(running.items()):
            rc = p.poll()
            late = time.time() - t > args.timeout
            over = time.time() - T0 > args.deadline
            if rc is None and (late or over):
                _kill(p)
                p.wait()
                rc = "timeout"
                ended[arch] = ("killed: per-model time limit (%ds)" % args.timeout if late
                               else "killed: global deadline (--deadline %ds)" % args.deadline)
            elif rc is not None:
                ended[arch] = "exit 0" if rc == 0 else ("crashed: signal %d" % -rc if rc < 0 else "exit %d" % rc)
            if rc is not None:
                logf.close()
                del running[arch]
                log("end  ", arch, ended[arch], "%.0fs" % (time.time() - t), _form_line(args, arch))
        time.sleep(0.2)
    return ended


# --------------------------------------------------------------------------- parent: manifest, weights, pack

def collect(args, specs, ended, source, tf_version, scalar_kw_note):
    archs = {}
    for spec in specs:
        a = spec["arch"]
        if spec.get("excluded"):
            archs[a] = {"arch": a, "tags": spec["tags"], "model_class": spec.get("model_class"),
                        "status": "excluded: " + spec["excluded"], "forms": {}}
            continue
        rp = os.path.join(args.out, "_results", a + ".json")
        try:
            with open(rp) as f:
                r = json.load(f)
        except Exception:  # noqa: BLE001
            r = {"arch": a, "tags": spec["tags"], "model_class": spec.get("model_class"), "forms": {},
                 "status": "no result"}
        how = ended.get(a, "not run")
        r["process"] = how
        if how != "exit 0" and (r.get("status") in ("started", "no result", None) or
                                str(r.get("status")).startswith("done")):
            r["status"] = "failed: " + how
            tail = _log_tail(args, a)
            if tail:
                r["log_tail"] = tail
        for form in list(FORMS) + ["reference"]:
            ent = r["forms"].setdefault(form, {})
            if "status" not in ent:
                ent["status"] = ("not reached: " + how) if how != "exit 0" else "not reached"
            ent.pop("ok", None)
        remove_unfinished(args, a, r)
        archs[a] = r
    return {"version": MANIFEST_VERSION, "generator": "tools/zoo/make_zoo.py", "source": source,
            "transformers": tf_version, "argv": sys.argv[1:], "forms": FORMS,
            "scalar_recording": scalar_kw_note, "architectures": archs}


def form_of_file(arch, fn):
    """The form a zoo file belongs to: `<arch>.<suffix>`, or `<arch>.<stem>.<n>.fxg.json.gz` for
    the further graphs of a post-grad capture; None for reference and other files."""
    for form, suffix in FORMS.items():
        if fn == "%s.%s" % (arch, suffix):
            return form
        if suffix.endswith(".fxg.json.gz"):
            stem = suffix[:-len(".fxg.json.gz")]
            if re.fullmatch(r"%s\.%s\.\d+\.fxg\.json\.gz" % (re.escape(arch), re.escape(stem)), fn):
                return form
    return None


def remove_unfinished(args, arch, r):
    """Files of forms that did not finish (killed mid-write, or failed after writing), temporary
    files, and the reference of a failed reference step are not part of the zoo."""
    d = os.path.join(args.out, "zoo", arch)
    if not os.path.isdir(d):
        return
    ref_ok = r["forms"].get("reference", {}).get("status") == "ok"
    for fn in sorted(os.listdir(d)):
        form = form_of_file(arch, fn)
        stale = ".partial." in fn or fn.endswith(".tmp")
        stale = stale or (form is not None and r["forms"].get(form, {}).get("status") != "ok")
        stale = stale or (not ref_ok and fn in ["%s.%s" % (arch, x) for x in REFERENCE_FILES])
        if stale:
            os.remove(os.path.join(d, fn))
            r.setdefault("removed_files", []).append(fn)


def _log_tail(args, arch, n=6):
    try:
        with open(os.path.join(args.out, "_logs", arch + ".log"), errors="replace") as f:
            lines = [ln.rstrip() for ln in f.readlines() if ln.strip()]
        return [one_line(ln, 300) for ln in lines[-n:]]
    except Exception:  # noqa: BLE001
        return None


def select_weights(args, manifest):
    """Keeps the weights of core ATen archives whose weights are at most --weight-cap-kb, in
    priority order until --weights-budget-mb; strips every other archive. Returns bytes kept."""
    kept_total = 0
    zoo = os.path.join(args.out, "zoo")
    for a, r in manifest["architectures"].items():
        for form in ("train_ir", "core_aten"):
            ent = r["forms"].get(form, {})
            path = os.path.join(zoo, a, "%s.%s" % (a, FORMS[form]))
            if not os.path.isfile(path):
                continue
            try:
                wb = pt2_weight_bytes(path)
                keep = (form == "core_aten" and wb <= args.weight_cap_kb * 1024 and
                        kept_total + wb <= args.weights_budget_mb * 1024 * 1024)
                if keep:
                    kept_total += wb
                else:
                    strip_pt2_weights(path)
                ent["weights"] = "kept (%d bytes)" % wb if keep else "stripped (%d bytes)" % wb
                ent["weights_kept"] = keep
            except Exception as e:  # noqa: BLE001
                ent["weights"] = "strip failed: " + one_line(e, 200)
                ent["weights_kept"] = False
        r["weights_kept"] = bool(r["forms"].get("core_aten", {}).get("weights_kept"))
    compact_zoo(zoo)
    return kept_total


def summarize(manifest):
    forms = list(FORMS) + ["reference"]
    counts = {f: {"ok": 0, "failed": 0, "skipped": 0, "other": 0} for f in forms}
    for r in manifest["architectures"].values():
        if str(r.get("status", "")).startswith("excluded"):
            continue
        for f in forms:
            st = str(r["forms"].get(f, {}).get("status", ""))
            key = "ok" if st == "ok" else "failed" if st.startswith("failed") else \
                "skipped" if st.startswith("skipped") else "other"
            counts[f][key] += 1
    cov = {}
    for r in manifest["architectures"].values():
        if r["forms"].get("train_ir", {}).get("status") == "ok" or r["forms"].get("post_grad", {}).get("status") == "ok":
            for t in r.get("tags", []):
                cov.setdefault(t, []).append(r["arch"])
    missing = {t: n for t, n in REQUIRED_FAMILIES.items() if len(cov.get(t, [])) < n}
    return {"per_form": counts, "families_with_graphs": cov, "families_missing": missing,
            "architectures_with_graphs": sum(
                1 for r in manifest["architectures"].values()
                if any(r["forms"].get(f, {}).get("status") == "ok" for f in FORMS))}


def pack(args, manifest):
    zoo = os.path.join(args.out, "zoo")
    write_json_atomic(os.path.join(zoo, "manifest.json"), manifest)
    tmp = args.tar + ".tmp"
    with tarfile.open(tmp, "w:gz", compresslevel=9) as tf:
        for root, dirs, files in os.walk(zoo):
            dirs.sort()
            for fn in sorted(files):
                p = os.path.join(root, fn)
                tf.add(p, arcname=os.path.relpath(p, args.out))
    os.replace(tmp, args.tar)
    logs = os.path.join(args.out, "_logs")
    if os.path.isdir(logs):  # the workers' logs, next to the tar (not part of the zoo)
        ltar = re.sub(r"(\.tar\.gz|\.tgz)?$", "", args.tar, count=1) + "_logs.tar.gz"
        with tarfile.open(ltar + ".tmp", "w:gz") as tf:
            for fn in sorted(os.listdir(logs)):
                tf.add(os.path.join(logs, fn), arcname="zoo_logs/" + fn)
        os.replace(ltar + ".tmp", ltar)
    return os.path.getsize(args.tar)


def finish(args, specs, ended, source, tf_version):
    scalar_note = {"kwarg": None, "note": "unknown (no worker result)"}
    for spec in specs:
        rp = os.path.join(args.out, "_results", spec["arch"] + ".json")
        if os.path.isfile(rp):
            try:
                with open(rp) as f:
                    r = json.load(f)
                if "scalar_record_kwarg" in r:
                    kw = r["scalar_record_kwarg"]
                    scalar_note = {"kwarg": kw, "note": "post_grad.scalars graphs written with %s=True" % kw if kw
                                   else "fxfuse_export has no option to record lifted scalar values: "
                                        "post_grad_scalars skipped"}
                    break
            except Exception:  # noqa: BLE001
                pass
    manifest = collect(args, specs, ended, source, tf_version, scalar_note)
    kept = select_weights(args, manifest)
    manifest["weights_policy"] = {"weight_cap_kb": args.weight_cap_kb, "weights_budget_mb": args.weights_budget_mb,
                                  "kept_bytes": kept, "rule": "core ATen .pt2 keeps its weights when they are at "
                                  "most weight_cap_kb, in priority order while the total stays within "
                                  "weights_budget_mb; every train IR .pt2 and every other archive is stripped"}
    manifest["summary"] = summarize(manifest)
    manifest["elapsed_s"] = round(time.time() - T0, 1)
    size = pack(args, manifest)
    if size > args.max_tar_mb * 1024 * 1024 and kept:
        log("tar is %.1f MB > %d MB: stripping every archive and packing again" % (size / 2**20, args.max_tar_mb))
        args.weights_budget_mb = 0
        kept = select_weights(args, manifest)
        manifest["weights_policy"]["kept_bytes"] = kept
        manifest["weights_policy"]["note"] = "all weights stripped: the tar was over --max-tar-mb"
        size = pack(args, manifest)
    log("wrote %s (%.1f MB)" % (args.tar, size / 2**20))
    if size > args.max_tar_mb * 1024 * 1024:
        log("WARNING: %s is %.1f MB, over --max-tar-mb %d" % (args.tar, size / 2**20, args.max_tar_mb))
    return manifest, size


def print_table(manifest):
    forms = list(FORMS) + ["reference"]
    w = max([len(a) for a in manifest["architectures"]] + [12])
    print("%-*s  %s" % (w, "architecture", "  ".join("%-10s" % f[:10] for f in forms)))
    for a, r in sorted(manifest["architectures"].items()):
        if str(r.get("status", "")).startswith("excluded"):
            continue
        cells = []
        for f in forms:
            st = str(r["forms"].get(f, {}).get("status", "?"))
            cells.append("%-10s" % ("ok" if st == "ok" else st.split(":")[0][:10]))
        print("%-*s  %s" % (w, a, "  ".join(cells)))
    print(json.dumps(manifest["summary"], indent=1, sort_keys=True))


# --------------------------------------------------------------------------- dry run, self test

def dry_run(args, specs, source, tf_version):
    """What a real run would do, without torch: architectures, families, config overrides (when
    transformers is importable), files, time plan."""
    live = [s for s in specs if not s.get("excluded")]
    plan = {"source": source, "transformers": tf_version, "architectures": [], "excluded": {},
            "families": family_coverage(specs), "required_families": REQUIRED_FAMILIES,
            "forms": FORMS, "reference_files": REFERENCE_FILES, "jobs": args.jobs, "timeout_s": args.timeout,
            "budget_s": args.budget, "deadline_s": args.deadline,
            "waves_at_timeout": -(-len(live) // max(args.jobs, 1))}
    try:
        import transformers
    except Exception:  # noqa: BLE001
        transformers = None
    for s in specs:
        if s.get("excluded"):
            plan["excluded"][s["arch"]] = s["excluded"]
            continue
        ent = {"arch": s["arch"], "model_class": s["model_class"], "tags": s["tags"],
               "files": ["zoo/%s/%s.%s" % (s["arch"], s["arch"], v) for v in FORMS.values()] +
                        ["zoo/%s/%s.%s" % (s["arch"], s["arch"], v) for v in REFERENCE_FILES]}
        if transformers is not None and s.get("config_class"):
            try:
                cls = getattr(transformers, s["config_class"])
                ent["config_kwargs"] = tiny_config_kwargs(cls, cls(), 0)
            except Exception as e:  # noqa: BLE001
                ent["config_kwargs"] = "config class failed: " + one_line(e, 200)
        plan["architectures"].append(ent)
    if args.json:
        print(json.dumps(plan, indent=1, sort_keys=True))
    else:
        print("model zoo dry run: %d architectures from %s (%d excluded)" % (
            len(plan["architectures"]), source, len(plan["excluded"])))
        for e in plan["architectures"]:
            print("  %-20s %-34s %s" % (e["arch"], e["model_class"], ",".join(e["tags"])))
        print("families:", json.dumps({k: len(v) for k, v in sorted(plan["families"].items())}))
        print("per architecture:", ", ".join(list(FORMS.values()) + list(REFERENCE_FILES)))
        print("%d jobs, %ds per model, no new model after %ds, all killed at %ds" % (
            args.jobs, args.timeout, args.budget, args.deadline))
    missing = {t: n for t, n in REQUIRED_FAMILIES.items() if len(plan["families"].get(t, [])) < n}
    if missing:
        print("dry run: families short of the required count: %s" % missing, file=sys.stderr)
        return 1
    return 0


def self_test(args):
    """Real run on 2 architectures, then checks what was written. Exit 0 when every check holds."""
    checks = []

    def check(name, ok, detail=""):
        checks.append(ok)
        print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)

    try:
        import torch
        check("torch imports", True, torch.__version__)
        import transformers
        check("transformers imports", True, transformers.__version__)
    except Exception as e:  # noqa: BLE001
        check("torch and transformers import", False, one_line(e))
        return 2
    sys.path.insert(0, TOOLS)
    import fxfuse_export as fe
    kw = scalar_record_kwarg(fe, args.scalar_kwarg)
    print("note: fxfuse_export scalar recording option: %s" % (kw or "none (post_grad_scalars will be skipped)"))
    specs, source, version = enumerate_archs(only=SELF_TEST_ARCHS)
    check("enumerated from transformers", source == "transformers", source)
    allspecs, _, _ = enumerate_archs(args.include_non_decoder)
    live = [s for s in allspecs if not s.get("excluded")]
    check("at least 25 decoder architectures in the mapping", len(live) >= 25, "%d" % len(live))
    cov = family_coverage(allspecs)
    check("required families present in the mapping",
          all(len(cov.get(t, [])) >= n for t, n in REQUIRED_FAMILIES.items()),
          json.dumps({t: len(cov.get(t, [])) for t in REQUIRED_FAMILIES}))
    ended = run_pool(args, specs)
    manifest, size = finish(args, specs, ended, source, version)
    for a in SELF_TEST_ARCHS:
        r = manifest["architectures"].get(a, {})
        for f in list(FORMS) + ["reference"]:
            st = r.get("forms", {}).get(f, {}).get("status", "missing")
            ok = st == "ok" or (f == "post_grad_scalars" and kw is None and st.startswith("skipped"))
            check("%s %s" % (a, f), ok, st)
        d = os.path.join(args.out, "zoo", a)
        for f in ("train_ir", "core_aten"):
            p = os.path.join(d, "%s.%s" % (a, FORMS[f]))
            if os.path.isfile(p):
                try:
                    with zipfile.ZipFile(p) as z:
                        bad = z.testzip()
                    check("%s %s archive readable" % (a, f), bad is None, bad or "")
                except Exception as e:  # noqa: BLE001
                    check("%s %s archive readable" % (a, f), False, one_line(e))
        pg = os.path.join(d, "%s.%s" % (a, FORMS["post_grad"]))
        if os.path.isfile(pg):
            with gzip.open(pg, "rt") as fh:
                mod = json.load(fh)
            n = sum(fe.module_histogram(mod).values())
            check("%s post-grad JSON has nodes" % a, n > 10, "%d call nodes" % n)
        rj = os.path.join(d, a + ".reference.json")
        if os.path.isfile(rj):
            with open(rj) as fh:
                ref = json.load(fh)
            lg = read_raw(os.path.join(d, ref["logits"]["file"]), "f")
            shape = ref["logits"]["shape"]
            count = 1
            for s in shape:
                count *= s
            check("%s reference logits" % a, len(lg) == count and ref["logits"]["finite"],
                  "%s, %d values" % (shape, len(lg)))
    check("tar under --max-tar-mb", size <= args.max_tar_mb * 1024 * 1024, "%.2f MB" % (size / 2**20))
    print("self-test: %d passed, %d failed" % (checks.count(True), checks.count(False)))
    return 0 if all(checks) else 1


# --------------------------------------------------------------------------- main

def shard(specs, spec):
    """Every N-th not-excluded architecture from the I-th ('I/N'), in priority order."""
    if not spec:
        return specs
    i, n = (int(x) for x in spec.split("/"))
    if not 0 <= i < n:
        raise SystemExit("--shard %s: expected I/N with 0 <= I < N" % spec)
    live = [s for s in specs if not s.get("excluded")]
    return live[i::n]


def merge_manifests(manifests):
    """One manifest from those of several shards (architectures united, summary recomputed)."""
    out = dict(manifests[0])
    out["architectures"] = {}
    for m in manifests:
        out["architectures"].update(m.get("architectures", {}))
    out["merged_from"] = [m.get("argv") for m in manifests]
    out["summary"] = summarize(out)
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/fxfuse_zoo", help="work directory (zoo/ is written under it)")
    ap.add_argument("--tar", default=None, help="the packed zoo (default <out>/zoo.tar.gz)")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--timeout", type=int, default=170, help="seconds per architecture (process killed after)")
    ap.add_argument("--budget", type=int, default=380, help="seconds after which no architecture starts")
    ap.add_argument("--deadline", type=int, default=440, help="seconds after which every worker is killed")
    ap.add_argument("--archs", default="", help="comma-separated model types (default: all)")
    ap.add_argument("--shard", default="", help="I/N: only every N-th architecture from the I-th (0-based), for "
                    "runs split over several device calls; tools/zoo/install_zoo.sh merges the tars")
    ap.add_argument("--include-non-decoder", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--weight-cap-kb", type=int, default=384)
    ap.add_argument("--weights-budget-mb", type=int, default=16)
    ap.add_argument("--max-tar-mb", type=int, default=40)
    ap.add_argument("--scalar-kwarg", default=None,
                    help="fxfuse_export option that records lifted scalar values (default: detected)")
    ap.add_argument("--dry-run", action="store_true", help="list what would be done; needs no torch")
    ap.add_argument("--json", action="store_true", help="--dry-run: print the plan as JSON")
    ap.add_argument("--self-test", action="store_true", help="2 architectures, then check the outputs")
    ap.add_argument("--worker-spec", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out = os.path.abspath(args.out)
    args.tar = os.path.abspath(args.tar or os.path.join(args.out, "zoo.tar.gz"))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker_spec:
        return worker_main(args)
    only = [a for a in args.archs.split(",") if a] or None
    if args.dry_run:
        specs, source, version = enumerate_archs(args.include_non_decoder, only)
        return dry_run(args, specs, source, version)
    if os.path.isdir(os.path.join(args.out, "zoo")) or os.path.isdir(os.path.join(args.out, "_results")):
        for d in ("zoo", "_results", "_logs", "_tmp"):
            shutil.rmtree(os.path.join(args.out, d), ignore_errors=True)
    os.makedirs(os.path.join(args.out, "zoo"), exist_ok=True)
    os.makedirs(os.path.dirname(args.tar), exist_ok=True)
    if args.self_test:
        args.budget, args.deadline = min(args.budget, 200), min(args.deadline, 230)
        rc = self_test(args)
        shutil.rmtree(os.path.join(args.out, "_tmp"), ignore_errors=True)
        return rc
    specs, source, version = enumerate_archs(args.include_non_decoder, only)
    specs = shard(specs, args.shard)
    log("%d architectures from %s (%d excluded); %d jobs, %ds each, budget %ds, deadline %ds" % (
        len([s for s in specs if not s.get("excluded")]), source, len([s for s in specs if s.get("excluded")]),
        args.jobs, args.timeout, args.budget, args.deadline))
    if source != "transformers":
        log("transformers is not importable; a real run needs torch and transformers")
        return 2
    ended = run_pool(args, [s for s in specs if not s.get("excluded")])
    manifest, size = finish(args, specs, ended, source, version)
    shutil.rmtree(os.path.join(args.out, "_tmp"), ignore_errors=True)
    print_table(manifest)
    log("done")
    return 0 if size <= args.max_tar_mb * 1024 * 1024 else 1


if __name__ == "__main__":
    sys.exit(main())
