"""The package's import graph has no cycle, function-level and TYPE_CHECKING imports included (issue 17)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, Path]:
    """Every module of ctxagent by dotted name (a package by its own name)."""
    found = {}
    for path in (SRC / "ctxagent").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom, is_package: bool, known: set[str]) -> list[str]:
    """The ctxagent modules one import statement imports (a submodule, not its package, when named)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(max(node.level - 1, 0)):
        base = base.rpartition(".")[0]
    target = (f"{base}.{node.module}" if node.module else base) if node.level else (node.module or "")
    subs = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
    return subs if len(subs) == len(node.names) else [*subs, target]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(name, node, path.name == "__init__.py", set(modules)):
                    while target and target not in modules:
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        deps.add(target)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a path that comes back to its start), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_graph_sees_function_level_imports():
    graph = _graph()
    assert "ctxagent.agent.litellm_backend" in graph["ctxagent.agent.model"]  # imported inside make_model
    assert "ctxagent.cli" not in graph["ctxagent.cli.inspect"]  # `from ctxagent.cli import outputs_cmd`


def test_no_import_cycles():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


DOCUMENTED = {"os._exit"}
"""Names with a leading underscore that their library documents as public API."""


def _private_reaches(tree: ast.AST) -> list[str]:
    """What ``tree`` takes from another project's private names: an import from a module path
    with a ``_private`` part (``typer._click.utils``), or an attribute ``_private`` of a module
    imported from outside ctxagent (``atexit._run_exitfuncs``). Dunders are public."""

    def private(name: str) -> bool:
        return name not in DOCUMENTED and any(p.startswith("_") and not p.startswith("__") for p in name.split("."))

    outside: dict[str, str] = {}  # local name -> the module of another project it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("ctxagent"):
                    local = alias.asname or alias.name.split(".")[0]
                    outside[local] = alias.name if alias.asname else local
                    found += [f"import {alias.name}"] if private(alias.name) else []
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                not node.module.startswith("ctxagent") and node.module != "__future__":
            found += [f"from {node.module} import {a.name}" for a in node.names if private(f"{node.module}.{a.name}")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in outside \
                and private(node.attr) and f"{outside[node.value.id]}.{node.attr}" not in DOCUMENTED:
            found.append(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 and \
                isinstance(name := node.args[1], ast.Constant) and isinstance(name.value, str) and \
                private(name.value) and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls")):
            found.append(f"{node.func.id}({ast.unparse(node.args[0])}, {name.value!r})")  # os.environ._data
    return found


def test_no_module_reaches_into_another_projects_private_names():
    """Issue 35: speed through public APIs only (``typer._click``, ``atexit._run_exitfuncs`` and
    tiktoken's private attributes were used; a release that moved them broke ``--help``)."""
    found = {name: reach for name, path in _modules().items()
             if (reach := _private_reaches(ast.parse(path.read_text(encoding="utf-8"))))}
    assert found == {}


def test_a_private_reach_is_found():
    code = ("import atexit\nimport os.path as p\nfrom typer._click.utils import x\nfrom ctxagent import _y\n"
            "atexit._run_exitfuncs()\np._joinrealpath\nos = 1\nself._own\natexit.__name__\nimport os\nos._exit(0)\n"
            "getattr(os.environ, '_data', None)\ngetattr(self, '_own')\ngetattr(fn, '__name__')\n")
    assert sorted(_private_reaches(ast.parse(code))) == ["atexit._run_exitfuncs", "from typer._click.utils import x",
                                                         "getattr(os.environ, '_data')", "p._joinrealpath"]


def test_nothing_is_unpickled():
    """Issue 36: a ``write_file`` into the data dir planted a folded-state snapshot pickle that ran
    code when the session was opened. No module of ctxagent imports a deserializer that runs code."""
    runs_code = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
    found = {name: sorted(hits) for name, deps in _imports().items()
             if (hits := {d.split(".")[0] for d in deps} & runs_code)}
    assert found == {}


def _imports() -> dict[str, set[str]]:
    """Every module of ctxagent, and the dotted names of the modules it imports (any package)."""
    found: dict[str, set[str]] = {}
    for name, path in _modules().items():
        deps = found.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                deps.add(node.module)
    return found
