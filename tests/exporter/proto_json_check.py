"""Minimal proto3-JSON conformance checker for proto/fxfuse_ir.proto (no protobuf needed).

Parses the .proto (messages, oneofs, enums, maps, repeated/optional) and checks that a
JSON document only uses known fields (snake_case or lowerCamelCase), valid enum names,
values of the right JSON type, and at most one member of each oneof — i.e. what
protobuf's JsonStringToMessage would accept.
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto", "fxfuse_ir.proto")

_INTS = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64",
         "sfixed32", "sfixed64"}


class Schema:
    def __init__(self, path=PROTO):
        text = open(path).read()
        text = re.sub(r"//[^\n]*", "", text)
        self.enums = {}
        self.messages = {}
        for m in re.finditer(r"\benum\s+(\w+)\s*\{([^}]*)\}", text):
            self.enums[m.group(1)] = {a: int(b) for a, b in re.findall(r"(\w+)\s*=\s*(-?\d+)\s*;", m.group(2))}
        pos = 0
        while True:
            m = re.compile(r"\bmessage\s+(\w+)\s*\{").search(text, pos)
            if not m:
                break
            depth, i = 1, m.end()
            while depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end():i - 1]
            self.messages[m.group(1)] = self._fields(body)
            pos = i

    @staticmethod
    def _fields(body):
        fields = {}
        oneofs = {}
        for om in re.finditer(r"\boneof\s+(\w+)\s*\{([^}]*)\}", body):
            for fm in re.finditer(r"(\w+)\s+(\w+)\s*=\s*\d+\s*;", om.group(2)):
                oneofs[fm.group(2)] = om.group(1)
        body_wo = re.sub(r"\boneof\s+\w+\s*\{", "", body).replace("}", "")
        for fm in re.finditer(r"(repeated\s+|optional\s+)?(map\s*<\s*\w+\s*,\s*\w+\s*>|\w+)\s+(\w+)\s*=\s*\d+\s*;", body_wo):
            label = (fm.group(1) or "").strip()
            typ = fm.group(2).replace(" ", "")
            name = fm.group(3)
            fields[name] = {"type": typ, "repeated": label == "repeated", "oneof": oneofs.get(name)}
        return fields


def _snake(k):
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k)


def check(obj, msg="Module", schema=None, path="$", errors=None, limit=50):
    """Return a list of error strings (empty = conforms)."""
    schema = schema or _default()
    errors = [] if errors is None else errors
    if len(errors) >= limit:
        return errors
    fields = schema.messages[msg]
    if not isinstance(obj, dict):
        errors.append("%s: %s must be an object" % (path, msg))
        return errors
    seen_oneof = {}
    for k, v in obj.items():
        name = k if k in fields else _snake(k)
        f = fields.get(name)
        if f is None:
            errors.append("%s: unknown field %s.%s" % (path, msg, k))
            continue
        if f["oneof"]:
            if f["oneof"] in seen_oneof:
                errors.append("%s: oneof %s has %s and %s" % (path, f["oneof"], seen_oneof[f["oneof"]], k))
            seen_oneof[f["oneof"]] = k
        p = path + "." + k
        if f["type"].startswith("map<"):
            if not isinstance(v, dict) or not all(isinstance(a, str) and isinstance(b, str) for a, b in v.items()):
                errors.append("%s: map<string,string> expected" % p)
        elif f["repeated"]:
            if not isinstance(v, list):
                errors.append("%s: list expected" % p)
                continue
            for i, x in enumerate(v):
                _value(x, f["type"], schema, "%s[%d]" % (p, i), errors, limit)
        else:
            _value(v, f["type"], schema, p, errors, limit)
    return errors


def _value(v, typ, schema, p, errors, limit):
    if len(errors) >= limit:
        return
    if typ in _INTS:
        ok = (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and re.fullmatch(r"-?\d+", v))
        if ok and typ.startswith("uint") and int(v) < 0:
            ok = False
        if not ok:
            errors.append("%s: %s expected, got %r" % (p, typ, v))
    elif typ in ("double", "float"):
        if not ((isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("Infinity", "-Infinity", "NaN")):
            errors.append("%s: number expected, got %r" % (p, v))
    elif typ == "bool":
        if not isinstance(v, bool):
            errors.append("%s: bool expected, got %r" % (p, v))
    elif typ in ("string", "bytes"):
        if not isinstance(v, str):
            errors.append("%s: string expected, got %r" % (p, v))
    elif typ in schema.enums:
        if not ((isinstance(v, str) and v in schema.enums[typ]) or (isinstance(v, int) and not isinstance(v, bool))):
            errors.append("%s: %s enum name expected, got %r" % (p, typ, v))
    elif typ in schema.messages:
        check(v, typ, schema, p, errors, limit)
    else:
        errors.append("%s: unknown type %s" % (p, typ))


_SCHEMA = None


def _default():
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = Schema()
    return _SCHEMA


def semantic_errors(mod, limit=50):
    """fxfuse conventions beyond the schema: value ids >= 1 unique per graph, every
    referenced value id defined, graph indices valid, symbols declared, no getitem nodes."""
    errs = []
    ngraphs = len(mod.get("graphs", []))
    symbols = {s["name"] for s in mod.get("symbols", [])}

    def syms(e, out):
        if isinstance(e, dict):
            if "sym" in e and isinstance(e["sym"], str):
                out.add(e["sym"])
            for v in e.values():
                syms(v, out)
        elif isinstance(e, list):
            for v in e:
                syms(v, out)

    used = set()
    for gi, g in enumerate(mod.get("graphs", [])):
        ids = [v["id"] for v in g.get("values", [])]
        if len(ids) != len(set(ids)) or any(i < 1 for i in ids):
            errs.append("graph %d: value ids not unique/>=1" % gi)
        idset = set(ids)

        def refs(a, where):
            if isinstance(a, dict):
                if "value" in a and isinstance(a["value"], int) and a["value"] not in idset:
                    errs.append("graph %d: %s refers to undefined value %d" % (gi, where, a["value"]))
                if "graph" in a and not (0 <= a["graph"] < ngraphs):
                    errs.append("graph %d: %s bad graph index" % (gi, where))
                for k in ("list",):
                    if k in a:
                        for it in a[k].get("items", []):
                            refs(it, where)
        for n in g.get("nodes", []):
            if n.get("target") in ("_operator.getitem", "operator.getitem"):
                errs.append("graph %d: getitem node %s emitted" % (gi, n.get("name")))
            for a in n.get("args", []):
                refs(a.get("value", {}), n.get("name"))
            for o in n.get("outputs", []):
                if o and o not in idset:
                    errs.append("graph %d: node %s output %d undefined" % (gi, n.get("name"), o))
        for o in g.get("outputs", []):
            if o.get("value") and o["value"] not in idset:
                errs.append("graph %d: output value %d undefined" % (gi, o["value"]))
        for i in g.get("inputs", []):
            if i["value"] not in idset:
                errs.append("graph %d: input value %d undefined" % (gi, i["value"]))
        syms(g.get("values", []), used)
    missing = used - symbols
    if missing:
        errs.append("symbols used but not declared: %s" % sorted(missing))
    return errs[:limit]
