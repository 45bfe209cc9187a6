#!/usr/bin/env python3
"""The data flow as a rule: vtrace's top-level modules form layers, and a
module may use only modules on its own level or below, with no cycle. Prints
the dependency order and exits 1 naming every reference that goes against it
(file:line). Part of the test command (scripts/test.sh).

Within `layers/`, every layer may use the CPU layer (whose thread table
attributes every other layer's rows) and nothing else of another layer.

Test modules (`#[cfg(test)] mod tests { ... }` at a file's end) and comments
are not counted.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vtrace", "src")

# Lowest first. A module may use any module on a lower level, or on its own.
LEVELS = [
    ["error", "ebpf", "privileges", "analysis", "workload", "probes", "platforms", "collectors", "report_model",
     "exposition"],
    ["recording"],
    ["layers"],
    ["report", "compare"],
    ["record", "lab", "bench", "demo"],
    ["serve"],
]
LEVEL = {m: i for i, names in enumerate(LEVELS) for m in names}
BASE_LAYER = "cpu"
# Named exceptions, each with its reason; a new one needs one here.
ALLOWED_LAYER_USES = {}


def code_lines(path):
    """(line number, text) of the file's code, comments and a trailing test module removed."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].strip().startswith("mod tests"):
            lines = lines[:i]
            break
    for n, line in enumerate(lines, 1):
        yield n, re.sub(r"//.*", "", line)


def crate_refs(path):
    """(line, first path segment, second segment or None) of every `crate::...` path."""
    text = list(code_lines(path))
    joined = "\n".join(t for _, t in text)
    starts = [0]
    for _, t in text:
        starts.append(starts[-1] + len(t) + 1)

    def line_of(pos):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return text[lo][0]

    for m in re.finditer(r"\bcrate::", joined):
        pos = m.end()
        if joined.startswith("{", pos):
            depth, item, i = 0, "", pos
            while i < len(joined):
                c = joined[i]
                if c == "{":
                    depth += 1
                    if depth == 1:
                        item = ""
                        i += 1
                        continue
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        yield from group_item(item, line_of(i))
                        break
                if depth == 1 and c == ",":
                    yield from group_item(item, line_of(i))
                    item = ""
                else:
                    item += c
                i += 1
        else:
            seg = re.match(r"(\w+)(?:::(\w+))?", joined[pos:])
            if seg:
                yield line_of(pos), seg.group(1), seg.group(2)


def group_item(item, line):
    seg = re.match(r"\s*(\w+)(?:::(\w+))?", item)
    if seg:
        yield line, seg.group(1), seg.group(2)


def module_of(rel):
    """Top-level module of a file under src/ (None for lib.rs and main.rs)."""
    parts = rel.split(os.sep)
    if len(parts) == 1:
        name = parts[0][:-3]
        return None if name in ("lib", "main") else name
    return parts[0]


def main():
    edges = {}
    problems = []
    for dirpath, _, files in os.walk(ROOT):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)
            src = module_of(rel)
            if src is None:
                continue
            if src not in LEVEL:
                problems.append(f"{rel}: module '{src}' has no level in scripts/check-layering.py")
                continue
            parts = rel.split(os.sep)
            own_layer = parts[1] if src == "layers" and len(parts) > 2 else None
            for line, dst, sub in crate_refs(path):
                if dst in ("Error", "Result") or dst[0].isupper():
                    dst = "error" if dst in ("Error", "Result") else dst
                if dst == src:
                    if own_layer and sub and sub in layer_names() and not layer_use_ok(own_layer, sub):
                        problems.append(f"{rel}:{line}: layer '{own_layer}' uses layer '{sub}' (only '{BASE_LAYER}' may be used)")
                    continue
                if dst not in LEVEL:
                    continue
                edges.setdefault(src, {}).setdefault(dst, f"{rel}:{line}")
                if LEVEL[dst] > LEVEL[src]:
                    problems.append(f"{rel}:{line}: '{src}' (level {LEVEL[src]}) uses '{dst}' (level {LEVEL[dst]}), above it")
            if own_layer:
                for line, text in code_lines(path):
                    for other in re.findall(r"\bsuper::super::(\w+)|\bsuper::(\w+)::", text):
                        name = other[0] or other[1]
                        if name in layer_names() and not layer_use_ok(own_layer, name):
                            if parts[-1] == "mod.rs" and other[1]:
                                continue
                            problems.append(f"{rel}:{line}: layer '{own_layer}' uses layer '{name}' (only '{BASE_LAYER}' may be used)")
    # Cycles within a level.
    order, state = [], {}

    def visit(m, stack):
        if state.get(m) == "done":
            return
        if state.get(m) == "open":
            cycle = stack[stack.index(m):] + [m]
            problems.append("cycle: " + " -> ".join(f"{a} ({edges[a][b]})" if b in edges.get(a, {}) else a
                                                    for a, b in zip(cycle, cycle[1:])) + f" -> {m}")
            return
        state[m] = "open"
        for d in sorted(edges.get(m, {})):
            visit(d, stack + [m])
        state[m] = "done"
        order.append(m)

    for m in sorted(LEVEL, key=lambda m: (LEVEL[m], m)):
        visit(m, [])
    present = set(edges) | {d for e in edges.values() for d in e}
    print("module dependency order (each uses only those before it):")
    for i, names in enumerate(LEVELS):
        shown = [m for m in order if m in names and m in present]
        print(f"  level {i}: {', '.join(shown)}")
    if problems:
        print(f"\n{len(problems)} reference(s) against the layering:")
        for p in problems:
            print("  " + p)
        return 1
    for (a, b), why in ALLOWED_LAYER_USES.items():
        print(f"  allowed: layer '{a}' uses layer '{b}': {why}")
    print("ok: no reference goes up a level, no cycle")
    return 0


_LAYERS = None


def layer_use_ok(layer, other):
    return other == layer or (other == BASE_LAYER and layer != BASE_LAYER) or (layer, other) in ALLOWED_LAYER_USES


def layer_names():
    global _LAYERS
    if _LAYERS is None:
        d = os.path.join(ROOT, "layers")
        _LAYERS = {n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))}
    return _LAYERS


if __name__ == "__main__":
    sys.exit(main())
