"""Writes python/foo_rs/_C.pyi, the type stub of the PyO3 module, from the Rust bindings.

    python scripts/gen_c_stub.py          # write the stub
    python scripts/gen_c_stub.py --check  # exit 1 if the committed stub differs

The signatures live once, in rust/src/bindings/*.rs (`#[pyfunction]` and its
`#[pyo3(signature = ...)]`); this script turns each Rust parameter type into its Python type.
`make lint` runs the check and mypy's stubtest, which compares the stub with the built module.
"""

from __future__ import annotations

import keyword
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINDINGS = ROOT / "rust" / "src" / "bindings"
STUB = ROOT / "python" / "foo_rs" / "_C.pyi"

INT = {"i8", "i16", "i32", "i64", "isize", "u8", "u16", "u32", "u64", "usize"}
FLOAT = {"f32", "f64"}
#: `type Name = ...;` of the bindings (TensorDesc: a tensor as (address, dtype code, sizes,
#: strides), as foo_rs._ops passes it), read by render().
ALIASES: dict[str, str] = {}


def split_top(s: str, sep: str = ",") -> list[str]:
    """``s`` split at ``sep`` outside <>, () and []."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def py_type(rust: str, pyclasses: dict[str, str]) -> str:
    t = re.sub(r"'\w+\s*,?\s*", "", rust.strip()).replace("&", "").replace("mut ", "").strip()
    arr = re.fullmatch(r"\[(.*);\s*(\d+)\]", t)
    if arr:  # a fixed-size array: PyO3 takes any sequence of that length
        return f"list[{py_type(arr.group(1), pyclasses)}]"
    m = re.fullmatch(r"(\w+)(?:<(.*)>)?", t)
    if t.startswith("(") and t.endswith(")"):
        inner = split_top(t[1:-1])
        return "None" if not inner else f"tuple[{', '.join(py_type(x, pyclasses) for x in inner)}]"
    if m is None:
        raise SystemExit(f"gen_c_stub: cannot map Rust type {rust!r}")
    name, args = m.group(1), m.group(2)
    if name in ("PyResult", "Result"):
        return py_type(split_top(args)[0], pyclasses)
    if name == "Option":
        return f"{py_type(args, pyclasses)} | None"
    if name == "Vec":
        return f"list[{py_type(args, pyclasses)}]"
    if name in INT:
        return "int"
    if name in FLOAT:
        return "float"
    if name == "bool":
        return "bool"
    if name in ("String", "str"):
        return "str"
    if name == "PyDict":
        return "dict[str, Any]"
    if name in ("Bound", "Py"):
        return py_type(split_top(args)[-1], pyclasses)
    if name in ("PyAny", "PyObject"):
        return "Any"
    if name in pyclasses:
        return pyclasses[name]
    if name in ALIASES:
        return f"_{name}"
    raise SystemExit(f"gen_c_stub: cannot map Rust type {rust!r}")


def functions(src: str, pyclasses: dict[str, str]) -> list[tuple[str, str]]:
    """(name, stub line) of every #[pyfunction] in ``src``."""
    out = []
    for m in re.finditer(r"#\[pyfunction\]", src):
        rest = src[m.end() :]
        # attributes and comments up to the fn
        skip = re.match(r"(?:\s+|#\[(?:[^\[\]]|\[[^\]]*\])*\]|//[^\n]*)*", rest)
        attrs = rest[: skip.end()]
        head = re.match(r"(?:pub(?:\([^)]*\))?\s+)?fn\s+(\w+)\s*(?:<[^>]*>)?\s*\(", rest[skip.end() :])
        if head is None:
            raise SystemExit(f"gen_c_stub: no fn after #[pyfunction] at {rest[:80]!r}")
        name = head.group(1)
        body = rest[skip.end() + head.end() :]
        depth, i = 1, 0
        while depth:
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            i += 1
        params = split_top(body[: i - 1])
        ret_m = re.match(r"\s*->\s*([^{]*?)\s*(?:where\b[^{]*)?\{", body[i:])
        ret = py_type(ret_m.group(1), pyclasses) if ret_m else "None"
        rust_params = {}
        for p in params:
            pname, _, ptype = p.partition(":")
            pname = pname.replace("mut ", "").strip()
            ptype = ptype.strip()
            if ptype.startswith("Python<") or not ptype:
                continue
            rust_params[pname] = ptype
        sigattr = re.search(r"signature\s*=\s*\((.*?)\)\s*\)\s*\]", attrs, re.DOTALL)
        names: list[str]
        if sigattr:
            names = split_top(sigattr.group(1))
        else:
            names = list(rust_params)
        parts = []
        for n in names:
            if n.startswith("*"):
                star = n.lstrip("*")
                parts.append(f"*{star}: Any")
                continue
            pname, eq, default = n.partition("=")
            pname = pname.strip()
            ptype = py_type(rust_params[pname], pyclasses)
            default = {"true": "True", "false": "False"}.get(default.strip(), default.strip())
            parts.append(f"{pname}: {ptype}" + (f" = {default}" if eq else ""))
        # a Rust parameter named as a Python keyword (random_'s `from`) can only be passed by
        # position: rename it in the stub and make the parameters up to it positional-only
        last_kw = max((i for i, n in enumerate(names) if keyword.iskeyword(n.partition("=")[0].strip())), default=-1)
        for i in range(last_kw + 1):
            pname, colon, rest = parts[i].partition(":")
            if keyword.iskeyword(pname):
                parts[i] = f"{pname}_{colon}{rest}"
        if last_kw >= 0:
            parts.insert(last_kw + 1, "/")
        out.append((name, f"def {name}({', '.join(parts)}) -> {ret}: ..."))
    return out


def render() -> str:
    srcs = {p.name: p.read_text() for p in sorted(BINDINGS.glob("*.rs"))}
    pyclasses = {}
    for src in srcs.values():
        for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?type\s+(\w+)\s*=\s*([^;]+);", src, re.MULTILINE):
            ALIASES[m.group(1)] = m.group(2)
    for src in srcs.values():
        for m in re.finditer(
            r"#\[pyclass[^\]]*\]\s*(?:#\[[^\]]*\]\s*)*pub(?:\([^)]*\))?\s+(?:struct|enum)\s+(\w+)", src
        ):
            pyclasses[m.group(1)] = m.group(1)
    lines = [
        '"""Type stub of foo_rs._C (the PyO3 module), generated by scripts/gen_c_stub.py from',
        'rust/src/bindings/*.rs: do not edit; run `python scripts/gen_c_stub.py`."""',
        "",
        "from typing import Any, TypeAlias",
        "",
    ]
    lines += [f"_{k}: TypeAlias = {py_type(v, pyclasses)}" for k, v in sorted(ALIASES.items())]
    lines.append("")
    consts = []
    for src in srcs.values():
        for m in re.finditer(r'm\.add\(\s*"(\w+)"\s*,\s*([^)]*)\)', src):
            value = m.group(2).strip()
            kind = "str" if value.startswith('"') or "VERSION" in value or "env!" in value else "int"
            consts.append(f"{m.group(1)}: {kind}")
    lines += sorted(set(consts))
    if consts:
        lines.append("")
    fns = sorted(f for src in srcs.values() for f in functions(src, pyclasses))
    exported = sorted([c.split(":")[0] for c in set(consts)] + [name for name, _ in fns])
    lines.append("__all__ = [" + ", ".join(f'"{n}"' for n in exported) + "]")
    lines.append("")
    lines += [line for _, line in fns]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not STUB.exists() or STUB.read_text() != text:
            print(f"{STUB.relative_to(ROOT)} is out of date: run `python scripts/gen_c_stub.py`", file=sys.stderr)
            return 1
        return 0
    STUB.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
