"""Import hygiene of the Python packages (an AST scan of blis_fast/, like
tests/kernels/test_hygiene.py for the kernels): each module imports only from its own
layer or below (docs/architecture.md, "Layers"), the module graph -- top-level and
function-local imports alike -- has no cycle, a function-local import says which heavy
import it defers (``# deferred: <what>``), and no function is longer than 120 lines.

The allow-lists below record what is left over today; they may only shrink (a test
fails when an entry no longer applies, so a fixed one must be removed)."""

import ast
from collections import defaultdict
from pathlib import Path

import blis_fast
import blis_fast_kernels

PKG = Path(blis_fast.__file__).resolve().parent
ROOT = PKG.parent
KERNELS = Path(blis_fast_kernels.__file__).resolve().parent

# bottom to top; a module may import only from its own layer or a lower one
LAYERS = {
    "errors": 0, "paths": 0, "rng": 0, "version": 0, "text": 0,
    "config": 1,
    "workload": 2, "results": 2, "policy": 2,
    "run": 3, "agents": 3,
    "batch": 4,
    "studies": 5, "adapters": 5, "experiments": 5, "serve": 5, "observe": 5,
    "cli": 6,
    "__init__": 7, "__main__": 7,  # the package facade (lazy names) and ``python -m blis_fast``
}
MAX_FUNCTION_LINES = 120

# (importing module, imported module) upward imports left over
UPWARD_ALLOWED = {
    ("blis_fast.config.sim", "blis_fast.results.objectives"),  # objectives are validated with the scorecard's metric names
}
# functions longer than MAX_FUNCTION_LINES today ("path:function"); being shortened
LONG_ALLOWED: set[str] = set()


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_name(p): p for p in _modules()}


def _layer(module):
    parts = module.split(".")
    return LAYERS["__init__" if len(parts) == 1 else parts[1]]


def _targets(node, module, path):
    """The blis_fast modules an import statement loads (a submodule when it names one)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "blis_fast"]
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([base] if base else []))
    if base.split(".")[0] != "blis_fast":
        return []
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _imports():
    """(module, line, local, target modules, first source line) of every import of every module."""
    out = []
    for module, path in MODULES.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)

        def walk(node, local, type_only):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    if not type_only:
                        out.append((module, child.lineno, local, _targets(child, module, path),
                                    lines[child.lineno - 1], isinstance(child, ast.Import) or not child.level))
                    continue
                inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                only = type_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
                walk(child, inner, only)

        walk(tree, False, False)
    return out


IMPORTS = _imports()


def test_the_scan_sees_every_package():
    packages = {m.split(".")[1] for m in MODULES if "." in m}
    assert packages <= set(LAYERS), packages - set(LAYERS)  # a new package needs its layer
    assert len(IMPORTS) > 300 and any(local for _, _, local, *_ in IMPORTS)


def test_no_upward_imports():
    found = set()
    for module, line, _local, targets, _text, _abs in IMPORTS:
        for target in targets:
            if target in MODULES and _layer(target) > _layer(module):
                found.add((module, target))
                assert (module, target) in UPWARD_ALLOWED, \
                    f"{module}:{line} imports {target}, a higher layer (docs/architecture.md, Layers)"
    assert found == UPWARD_ALLOWED, f"fixed, remove from UPWARD_ALLOWED: {UPWARD_ALLOWED - found}"


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def test_no_import_cycles():
    graph = defaultdict(set)
    for module, _line, _local, targets, _text, _abs in IMPORTS:
        graph[module].update(t for t in targets if t in MODULES and t != module)
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_local_imports_say_what_they_defer():
    unmarked = [f"{module}:{line}: {text.strip()}" for module, line, local, _targets, text, _abs in IMPORTS
                if local and "# deferred:" not in text]
    assert not unmarked, ("function-local import without '# deferred: <heavy import>' (move it to the top, "
                          "or name what it defers):\n" + "\n".join(unmarked))
    assert sum(1 for _, _, local, *_ in IMPORTS if local) > 50  # the walk saw the function-local imports


def _long_functions(folder, prefix):
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    yield f"{prefix}/{path.relative_to(folder).as_posix()}:{node.name}", length


def test_no_function_longer_than_120_lines():
    found = dict(_long_functions(PKG, "blis_fast")) | dict(_long_functions(KERNELS, "kernels"))
    over = {k: n for k, n in found.items() if k not in LONG_ALLOWED}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them): {over}"
    assert set(found) == LONG_ALLOWED, f"now short enough, remove from LONG_ALLOWED: {LONG_ALLOWED - set(found)}"
