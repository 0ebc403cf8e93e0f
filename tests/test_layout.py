"""The shape of the source tree (issue 12): no import cycle among runward's modules, a local
cache that depends on nothing of runward's, a CLI side that reaches into the agent only
through its boot and logmetrics modules, and a top-level --help that loads no verb.

Imports are read with ast, at module level and inside functions alike (a function-level
import closes a cycle as surely as a module-level one, only later, at run time)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PKG = SRC / "runward"
AGENT = "runward.agent"  # the far side: one node, whether a module or a package
# stackgroup: pure grouping of stack captures, so a multi-node merge says it as one node does
AGENT_ALLOWED = ("runward.agent.boot", "runward.agent.logmetrics", "runward.agent.secrets", "runward.agent.stackgroup")


def _modules() -> dict[str, Path]:
    """Every module under src/runward by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported_names(name: str, path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) of each runward name this module imports: `import runward.x`
    gives runward.x; `from P import n` gives P.n (a submodule or an attribute of P: the
    name says which once resolved against MODULES)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "runward"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] == "runward":
                names += [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return names


def _module_of(dotted: str) -> str | None:
    """The runward module a dotted name lives in (the longest known prefix), as a graph
    node: anything of the agent is the one node AGENT."""
    if dotted == AGENT or dotted.startswith(AGENT + "."):
        return AGENT
    while dotted:
        if dotted in MODULES:
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def _node(name: str) -> str:
    return AGENT if name == AGENT or name.startswith(AGENT + ".") else name


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges = graph.setdefault(_node(name), set())
        for dotted, _ in _imported_names(name, path):
            target = _module_of(dotted)
            if target is not None and target != _node(name):
                edges.add(target)
    # cli imports each verb's module by name (importlib), out of ast's sight
    graph["runward.cli"] |= {m for m in MODULES if m.startswith("runward.verbs.")}
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path a -> ... -> a, or None (depth-first, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_module_walk_sees_every_kind_of_import():
    names = {d for d, _ in _imported_names("runward.verbs.status", MODULES["runward.verbs.status"])}
    assert "runward.api" in names            # `from .. import api`, inside run()
    assert "runward.render.render_status" in names  # `from ..render import render_status`
    assert _module_of("runward.render.render_status") == "runward.render"
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_runward_modules():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cache_imports_nothing_of_runward():
    names = _imported_names("runward.cache", MODULES["runward.cache"])
    assert names == [], f"runward/cache.py imports {names}"


def test_the_cli_side_uses_only_the_agents_boot_and_logmetrics():
    """The far side's code is the agent's own: the CLI reaches into it only for the wire
    constants and blob (boot) and the log parser it renders with (logmetrics)."""
    bad = []
    for name, path in MODULES.items():
        if _node(name) == AGENT:
            continue
        for dotted, line in _imported_names(name, path):
            if _node(dotted) == AGENT and not any(dotted == a or dotted.startswith(a + ".") for a in AGENT_ALLOWED):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {dotted}")
    assert not bad, "\n".join(bad)


def test_top_level_help_loads_no_verb_and_nothing_heavy():
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "runward", "--help"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(SRC)))
    assert p.returncode == 0, p.stderr
    imported = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert "runward.cli" in imported  # the check can see runward's imports at all
    verbs = sorted(m for m in imported if m == "runward.verbs" or m.startswith("runward.verbs."))
    assert verbs == [], verbs
    heavy = sorted(m for m in imported if m in ("json", "runward.transport") or _node(m) == AGENT)
    assert heavy == [], heavy


def test_a_named_runs_status_imports_no_secrets(tmp_path):
    """Every status and stop of a named run loads runward.multinode (is it a multi-node
    run?); the run id's `secrets` (base64, hmac, hashlib: about half of that module's
    import) is for a multi-node start alone."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "runward", "status", "nosuchrun", "--json"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(SRC), RUNWARD_HOME=str(tmp_path / "home")))
    imported = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert "runward.multinode" in imported, p.stderr[-2000:]  # the check sees the path it guards
    assert "secrets" not in imported and "hmac" not in imported


def _module_in_agent(dotted: str) -> str | None:
    """The agent module a dotted name lives in (the longest known prefix)."""
    while dotted:
        if dotted in MODULES and (dotted == AGENT or dotted.startswith(AGENT + ".")):
            return dotted
        dotted = dotted.rpartition(".")[0]
    return None


def test_no_import_cycle_among_the_agents_own_modules():
    """The agent is one node above; inside it, its modules must not form a cycle either (a
    module that imports its own importer, even inside a function, belongs with it)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if name != AGENT and not name.startswith(AGENT + "."):
            continue
        edges = graph.setdefault(name, set())
        for dotted, _ in _imported_names(name, path):
            target = _module_in_agent(dotted)
            # a package's own modules are loaded through it: that edge is the import system's
            if target is not None and target != name and not name.startswith(target + "."):
                edges.add(target)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
