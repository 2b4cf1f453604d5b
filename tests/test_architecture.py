"""The import graph runs one way: every module imports only from its own floor or below
(ARCHITECTURE.md), and no two modules import each other, directly or around a loop."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "forensics"

# Floor of each top-level module or package of forensics/, lowest first (ARCHITECTURE.md).
FLOORS = {
    "forensics": 0,  # the package itself: __version__, and the API's names resolved lazily
    "schema": 0, "xid": 0, "safe_pickle": 0,
    "incident": 1, "catalog": 1,
    "ingest": 2, "discover": 2,
    "passes": 3,
    "verdict": 4, "run_state": 4, "triage": 4, "causal_chain": 4, "checklist": 4,
    "analysis": 5,
    "report": 6,
    "steps": 7, "sources": 7,
    "flow": 8, "output": 8,
    "batch": 9, "docs": 9, "cli": 9,
}  # fmt: skip


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the forensics modules it imports anywhere in its body (type-checking-only imports excepted)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
            for node in ast.walk(block)
        }
        names: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("forensics"):
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names if alias.name.startswith("forensics")}
        graph[_module(path)] = names
    return graph


def _floor(module: str) -> int:
    unit = module.split(".")[1] if "." in module else module
    return FLOORS[unit]


def test_every_module_has_a_floor():
    units = {m.split(".")[1] if "." in m else m for m in _imports()}
    assert units <= set(FLOORS), sorted(units - set(FLOORS))


def test_no_module_imports_from_a_higher_floor():
    upward = sorted(
        f"{module} (floor {_floor(module)}) imports {target} (floor {_floor(target)})"
        for module, targets in _imports().items()
        for target in targets
        if _floor(target) > _floor(module)
    )
    assert upward == []


def test_no_import_cycles_between_modules():
    graph = _imports()
    modules = set(graph)
    edges = {m: {t for t in targets if t in modules and t != m} for m, targets in graph.items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(modules):
        if module not in state:
            visit(module, [module])
    assert cycles == []
