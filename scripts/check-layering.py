#!/usr/bin/env python3
"""The data flow as a rule, checked on every file of vtrace/src. Part of the
test command (scripts/test.sh); exits 1 naming every reference against it
(file:line), after printing the module dependency order.

1. Between modules: vtrace's top-level modules form levels (LEVELS). A module
   may use only modules on its own level or below, and no cycle. `report`
   names no layer (NAMES_NO_LAYER): only the frame and the registry.
2. Inside a module: the files and folders right under a top-level module
   (its `mod.rs` one of them) use one another without a cycle. A `pub use`
   re-export is the module's face, not a use: a reference to a re-exported
   item counts as one to the file that defines it.
3. Inside `layers/`: every file belongs to a layer (`layers/<name>/`), to
   the frame every layer is written against (FRAME), or to the registry
   that names them all (REGISTRY). A layer uses the frame and the CPU layer
   (whose thread table attributes every other layer's rows), no other
   layer and not the registry; the frame uses no layer.

`--root DIR` checks another tree (the tests plant back-references in a
copy). Test modules (`#[cfg(test)] mod tests { ... }` at a file's end) and
comments are not counted.
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
    ["views"],
    ["report", "compare"],
    ["record", "lab", "bench", "demo"],
    ["serve"],
    ["cli"],
]
# Modules that show every layer's output without naming one: they reach the
# layers through the registry and the frame (`crate::layers::...` items of
# layers/mod.rs and registry.rs), and a join of several layers through views/.
NAMES_NO_LAYER = {"report"}
LEVEL = {m: i for i, names in enumerate(LEVELS) for m in names}
BASE_LAYER = "cpu"
# layers/: the frame every layer is written against, and the registry.
FRAME = {"layers/mod.rs", "layers/switches.rs"}
REGISTRY = "layers/registry.rs"
IDENT = r"[A-Za-z_]\w*"


def code_text(path):
    """The file's code: comments, string literals and a trailing test module blanked (lines kept)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and lines[i + 1].strip().startswith("mod tests"):
            lines = lines[:i]
            break
    text = "\n".join(re.sub(r"//.*", "", line) for line in lines)
    text = re.sub(r'r#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"', lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return text


class Source:
    """One file: its module directory, child modules, and every path it names."""

    def __init__(self, root, rel):
        self.rel = rel
        self.text = code_text(os.path.join(root, rel))
        d, f = os.path.split(rel)
        self.dir = d if f in ("mod.rs", "lib.rs", "main.rs") else os.path.join(d, f[:-3])
        self.children = set(re.findall(rf"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+({IDENT})\s*;", self.text, re.M))
        # The binary's modules (cli/) name the library by its crate name.
        self.library = "vtrace" if rel.split(os.sep)[0] == "cli" else "crate"
        self.paths = []  # (line, head, segments, re-exported name or None)
        self._parse()

    def line_of(self, pos):
        return self.text.count("\n", 0, pos) + 1

    def _parse(self):
        text = self.text
        self.body = None  # the code with its use statements blanked
        # Use statements first, their groups expanded; then blanked so that
        # their inner paths are not read again as paths of their own.
        for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", text):
            public = bool(m.group(1)) and "(" not in (m.group(1) or "")
            for segs, alias in expand(m.group(2)):
                if segs and segs[-1] != "*":
                    self.paths.append((self.line_of(m.start()), segs[0], segs[1:], alias if public else None))
            text = text[:m.start()] + re.sub(r"[^\n]", " ", m.group(0)) + text[m.end():]
        # Module declarations name no item.
        self.body = re.sub(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*;", lambda m: " " * len(m.group(0)), text,
                           flags=re.M)
        for m in re.finditer(rf"(?<![\w:])({IDENT})((?:::{IDENT})+)(::\{{)?", text):
            segs = m.group(2).split("::")[1:]
            if m.group(3):
                # An inline group in an expression or type: expand it.
                end = matching_brace(text, m.end() - 1)
                for inner, _ in expand(text[m.end():end]):
                    self.paths.append((self.line_of(m.start()), m.group(1), segs + inner, None))
            else:
                self.paths.append((self.line_of(m.start()), m.group(1), segs, None))


def matching_brace(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def expand(tree):
    """Every path of a use tree, as (segments, alias)."""
    tree = tree.strip()
    out = []
    depth, start, parts = 0, 0, []
    for i, c in enumerate(tree + ","):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(tree[start:i].strip())
            start = i + 1
    for part in parts:
        if not part:
            continue
        if "{" in part:
            prefix, inner = part.split("{", 1)
            prefix = [s for s in prefix.strip().rstrip(":").split("::") if s]
            for segs, alias in expand(inner.rsplit("}", 1)[0]):
                out.append((prefix + segs, alias))
        else:
            name, _, alias = part.partition(" as ")
            segs = [s.strip() for s in name.split("::") if s.strip()]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            out.append((segs, alias.strip() or (segs[-1] if segs else None)))
    return out


class Tree:
    def __init__(self, root):
        self.root = root
        self.files = {}
        for dirpath, _, names in os.walk(root):
            for f in sorted(names):
                if f.endswith(".rs"):
                    rel = os.path.relpath(os.path.join(dirpath, f), root)
                    self.files[rel] = Source(root, rel)
        self._exports = {}

    def file_of_dir(self, d):
        if d == "":
            return "lib.rs"
        return os.path.join(d, "mod.rs") if os.path.join(d, "mod.rs") in self.files else d + ".rs"

    def resolve(self, src, head, segs, depth=0):
        """The file a path names (the deepest module it reaches, or the file
        that defines the item a module re-exports), or None outside the crate."""
        if head == src.library:
            d = ""
        elif head == "self":
            d = src.dir
        elif head == "super":
            d = os.path.dirname(src.dir)
            while segs and segs[0] == "super":
                d, segs = os.path.dirname(d), segs[1:]
        elif head in src.children:
            d, segs = src.dir, [head] + segs
        else:
            return None
        f = self.file_of_dir(d)
        for i, s in enumerate(segs):
            sub = os.path.join(d, s)
            if sub + ".rs" in self.files or os.path.join(sub, "mod.rs") in self.files:
                d, f = sub, self.file_of_dir(sub)
                continue
            if depth < 8 and f in self.files:
                target = self.exports(f, depth).get(s)
                if target:
                    return target
            break
        return f

    def exports(self, rel, depth=0):
        """Name -> defining file of what `rel` re-exports (`pub use`)."""
        if rel not in self._exports:
            self._exports[rel] = {}
            src = self.files[rel]
            found = {}
            for _, head, segs, alias in src.paths:
                if alias:
                    target = self.resolve(src, head, segs, depth + 1)
                    if target and target != rel:
                        found[alias] = target
            self._exports[rel] = found
        return self._exports[rel]

    def uses(self, rel):
        """(line, file) of every other file of the crate that `rel` uses; re-exports are not uses,
        but a re-exported name the file itself uses is a use of the file that defines it."""
        src = self.files[rel]
        for line, head, segs, alias in src.paths:
            if alias:
                continue
            target = self.resolve(src, head, segs)
            if target and target != rel and target in self.files:
                yield line, target
        for name, target in self.exports(rel).items():
            # A name in an expression or a type: not a method (`.name`), a
            # definition (`fn name`), a field (`name: T`), or a path's later
            # segment (`x::name`).
            m = re.search(rf"(?<![\w:.])(?<!fn ){re.escape(name)}\b(?!\s*:(?!:))", src.body)
            if m and target in self.files:
                yield src.line_of(m.start()), target


def top_module(rel):
    parts = rel.split(os.sep)
    if len(parts) == 1:
        name = parts[0][:-3]
        return None if name in ("lib", "main") else name
    return parts[0]


def part_of(rel):
    """The file or folder right under its top-level module that holds `rel`."""
    parts = rel.split(os.sep)
    return os.sep.join(parts[:2]) if len(parts) > 1 else parts[0]


def layer_part(rel):
    """'frame', 'registry', a layer's name, or None (a stray file) for a file under layers/."""
    if rel in FRAME:
        return "frame"
    if rel == REGISTRY:
        return "registry"
    parts = rel.split(os.sep)
    return parts[1] if len(parts) > 2 else None


def cycles(nodes, edges):
    """Strongly connected components of more than one node, each as a cycle path."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def describe(comp, edges):
    arrows = [f"{a} -> {b} ({edges[a][b]})" for a in comp for b in sorted(edges.get(a, {})) if b in comp]
    return f"cycle of {len(comp)}: " + "; ".join(arrows)


def check(root):
    tree = Tree(root)
    problems = []
    module_edges = {}
    part_edges = {}  # top module -> {part: {part: where}}
    for rel in sorted(tree.files):
        src_mod = top_module(rel)
        if src_mod is None:
            continue
        if src_mod not in LEVEL:
            problems.append(f"{rel}: module '{src_mod}' has no level in scripts/check-layering.py")
            continue
        in_layers = src_mod == "layers"
        mine = layer_part(rel) if in_layers else None
        if in_layers and mine is None:
            problems.append(f"{rel}: a file under layers/ belongs to a layer (layers/<name>/), the frame "
                            f"({', '.join(sorted(FRAME))}) or the registry ({REGISTRY})")
        for line, target in tree.uses(rel):
            dst_mod = top_module(target)
            where = f"{rel}:{line}"
            if dst_mod is None or dst_mod not in LEVEL:
                continue
            if dst_mod != src_mod:
                module_edges.setdefault(src_mod, {}).setdefault(dst_mod, where)
                if src_mod in NAMES_NO_LAYER and dst_mod == "layers" and layer_part(target) not in ("frame", "registry"):
                    problems.append(f"{where}: '{src_mod}' names layer '{layer_part(target)}' ({target}): it "
                                    f"shows layers through the registry, and joins of several through views/")
                if LEVEL[dst_mod] > LEVEL[src_mod]:
                    problems.append(f"{where}: '{src_mod}' (level {LEVEL[src_mod]}) uses '{dst_mod}' "
                                    f"(level {LEVEL[dst_mod]}), above it")
                continue
            a, b = part_of(rel), part_of(target)
            if a != b:
                part_edges.setdefault(src_mod, {}).setdefault(a, {}).setdefault(b, where)
            if in_layers and mine is not None:
                theirs = layer_part(target)
                if theirs == "registry" and mine != "registry":
                    problems.append(f"{where}: {'the frame' if mine == 'frame' else f'layer {mine!r}'} uses "
                                    f"the registry ({REGISTRY}), which is above every layer")
                elif mine == "frame" and theirs not in ("frame", None):
                    problems.append(f"{where}: the frame ({rel}) uses layer '{theirs}': it is below every layer")
                elif mine not in ("frame", "registry") and theirs not in ("frame", "registry", None) \
                        and theirs != mine and theirs != BASE_LAYER:
                    problems.append(f"{where}: layer '{mine}' uses layer '{theirs}' (only '{BASE_LAYER}' may be used)")
    for comp in cycles(set(LEVEL), module_edges):
        problems.append("between modules: " + describe(comp, module_edges))
    inner = []
    for mod, edges in sorted(part_edges.items()):
        nodes = set(edges) | {b for e in edges.values() for b in e}
        for comp in cycles(nodes, edges):
            inner.append(f"inside '{mod}': " + describe(comp, edges))
    problems += inner

    print("module dependency order (each uses only those on its level or before it):")
    present = set(module_edges) | {d for e in module_edges.values() for d in e}
    for i, names in enumerate(LEVELS):
        print(f"  level {i}: {', '.join(m for m in names if m in present)}")
    if problems:
        print(f"\n{len(problems)} reference(s) against the layering:")
        for p in problems:
            print("  " + p)
        return 1
    print("ok: no reference goes up a level, no cycle between modules or inside one, "
          "every layer uses only the frame and the CPU layer")
    return 0


def main(argv):
    root = ROOT
    if len(argv) == 3 and argv[1] == "--root":
        root = argv[2]
    elif len(argv) != 1:
        print("usage: check-layering.py [--root DIR]", file=sys.stderr)
        return 2
    return check(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
