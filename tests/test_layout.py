"""The shape of the source tree (issue 12): no import cycle among runward's modules, a local
cache that depends on nothing of runward's, a CLI side that reaches into the agent only
through its boot and logmetrics modules, and a top-level --help that loads no verb.

Imports are read with ast, at module level and inside functions alike (a function-level
import closes a cycle as surely as a module-level one, only later, at run time), and so are
imports by name (importlib.import_module): a string, an f-string (every module under its
constant prefix), or a module-level table of strings. No edge is dropped: `from P import m`,
m a submodule, is an edge to P.m (P itself was loaded before any module of it ran, and none
of its names is read); `from P import name` of anything else is an edge to P."""

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
AGENT_ALLOWED = ("runward.agent.core.boot", "runward.agent.core.runspec", "runward.agent.logmetrics", "runward.agent.core.secrets", "runward.agent.health.stackgroup")
# one module may run the agent's entry itself: the CLI, which hands its serve() to
# transport/inprocess.py for the CLI's local read-only calls (issue 27's start-up goal; that
# module's docstring says why it is safe and where it is not used)
AGENT_ENTRY_ALLOWED = {"runward.cli": "runward.agent.main"}


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


def _is_import_module(func: ast.expr) -> bool:
    return getattr(func, "attr", None) == "import_module" or getattr(func, "id", None) == "import_module"


def _dynamic(arg: ast.expr, package: str, tables: dict[str, ast.expr], params: set[str]) -> list[str] | None:
    """The dotted names an import_module(arg) can load: a string; an f-string's constant
    prefix with `*` (every module under it; `{__package__}` read as the package); each string
    of a module-level dict or tuple it indexes. A parameter of the function: [] here, its
    callers' arguments are checked (test_every_import_by_name_is_seen). None: unreadable."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.JoinedStr):
        prefix = ""
        for part in arg.values:
            if isinstance(part, ast.Constant):
                prefix += part.value
            elif getattr(part.value, "id", None) == "__package__":
                prefix += package
            else:
                return [prefix + "*"]
        return [prefix]
    if isinstance(arg, ast.Subscript) and getattr(arg.value, "id", None) in tables:
        table = tables[arg.value.id]
        items = table.values if isinstance(table, ast.Dict) else getattr(table, "elts", [])
        found = [v.value for v in items if isinstance(v, ast.Constant) and isinstance(v.value, str)]
        return found if len(found) == len(items) else None
    if isinstance(arg, ast.Name) and arg.id in params:
        return []
    return None


UNREAD: list[str] = []  # imports by name the walk could not read (a test fails on any)


def _imported_names(name: str, path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) of each runward name this module imports: `import runward.x`
    gives runward.x; `from P import n` gives P.n (a submodule or an attribute of P: the
    name says which once resolved against MODULES); import_module's names (_dynamic), a
    prefix ending in `*`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = []
    tree = ast.parse(path.read_text(), str(path))
    tables = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
              for t in node.targets if isinstance(t, ast.Name)}
    params: dict[ast.Call, set[str]] = {}  # an import_module call -> its enclosing functions' parameters
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for call in ast.walk(fn):
                params.setdefault(call, set()).update(a.arg for a in fn.args.args + fn.args.kwonlyargs)
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and _is_import_module(call.func) and call.args:
            found = _dynamic(call.args[0], package, tables, params.get(call, set()))
            if found is None:
                UNREAD.append(f"{path.relative_to(ROOT)}:{call.lineno}")
            names += [(d, call.lineno) for d in found or () if d.split(".")[0] == "runward"]
    for node in ast.walk(tree):
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


def _modules_of(dotted: str) -> set[str]:
    """The graph nodes a dotted name reaches: its module (_module_of), or for a prefix
    ending in `*` every module under it."""
    if dotted.endswith("*"):
        return {_node(m) for m in MODULES if m.startswith(dotted[:-1])}
    found = _module_of(dotted)
    return {found} if found else set()


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
            edges |= _modules_of(dotted) - {_node(name)}
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
    names = {d for d, _ in _imported_names("runward.operations.status", MODULES["runward.operations.status"])}
    assert "runward.api" in names            # `from .. import api`, inside status()
    assert "runward.views.render.render_status" in names  # `from ..render import render_status`
    assert _module_of("runward.views.render.render_status") == "runward.views.render"
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
    graph = _graph()
    # imports by name: cli's f-string reaches every verb
    assert {m for m in MODULES if m.startswith("runward.verbs.")} <= graph["runward.cli"]


def test_every_import_by_name_is_seen():
    """An import_module whose name the walk cannot read would hide an edge; one whose name
    is a parameter is read at its callers, which must pass strings that are not runward's."""
    _graph()
    assert not UNREAD, f"imports by name the layout test cannot read: {UNREAD}"
    passers = {}  # function -> (module, line) of an import_module(its parameter)
    for name, path in MODULES.items():
        for fn in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(fn, ast.FunctionDef):
                params = {a.arg for a in fn.args.args}
                for call in ast.walk(fn):
                    if (isinstance(call, ast.Call) and _is_import_module(call.func) and call.args
                            and getattr(call.args[0], "id", None) in params):
                        passers[fn.name] = [a.arg for a in fn.args.args].index(call.args[0].id)
    bad = []
    for name, path in MODULES.items():
        for call in ast.walk(ast.parse(path.read_text(), str(path))):
            fname = getattr(call.func, "id", None) or getattr(call.func, "attr", None) if isinstance(call, ast.Call) else None
            if fname in passers and len(call.args) > passers[fname]:
                arg = call.args[passers[fname]]
                if not isinstance(arg, ast.Constant) or str(arg.value).split(".")[0] == "runward":
                    bad.append(f"{path.relative_to(ROOT)}:{call.lineno} {fname}({ast.unparse(arg)})")
    assert not bad, "imports by name through a parameter that may be runward's: " + "; ".join(bad)


def test_no_import_cycle_among_runward_modules():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# Layers point one way (issue 40): a folder never imports the layers above it. The imports
# that still do are listed with their count; a new one fails, and one removed must be crossed
# off here (the list only shrinks).
NEVER_IMPORTS = {
    "runward.verbs": ("runward.mcp",),  # `runward mcp` is a front end beside the verbs (cli.py runs mcp/verb.py)
    "runward.transport": ("runward.operations", "runward.spec"),
    "runward.targets": ("runward.transport",),  # what a hop is and resolves to sits below what runs it
    "runward.multinode": ("runward.operations", "runward.views"),
    "runward.api": ("runward.views",),  # the client asks and returns data; views/ say it
    "runward.views": ("runward.files", "runward.sync"),  # a view says a result, it moves no file
    "runward.spec": ("runward.api", "runward.library", "runward.transport"),  # the client
    # the agent's side, bottom up: logmetrics, core (the wire, the home, /proc read), proc, health
    # (the judges), supervise (the shim), ops (the verbs), the entry (main, __main__)
    "runward.agent.logmetrics": ("runward.agent.core", "runward.agent.proc", "runward.agent.health",
                                 "runward.agent.supervise", "runward.agent.ops", "runward.agent.main",
                                 "runward.agent.__main__"),
    "runward.agent.core": ("runward.agent.proc", "runward.agent.health", "runward.agent.supervise",
                           "runward.agent.ops", "runward.agent.main", "runward.agent.__main__"),
    "runward.agent.proc": ("runward.agent.health", "runward.agent.supervise", "runward.agent.ops", "runward.agent.main"),
    "runward.agent.health": ("runward.agent.supervise", "runward.agent.ops", "runward.agent.main"),
    "runward.agent.supervise": ("runward.agent.ops", "runward.agent.main"),
    "runward.agent.ops": ("runward.agent.main",),
}
STILL_UPWARD: dict[tuple[str, str], int] = {}  # (importer, imported module): names imported; none left


def _within(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def test_layers_point_one_way():
    found: dict[tuple[str, str], int] = {}
    for name, path in MODULES.items():
        for layer, above in NEVER_IMPORTS.items():
            if not _within(name, layer):
                continue
            for dotted, _ in _imported_names(name, path):
                target = _module_of(dotted)
                if target and any(_within(target, a) for a in above):
                    found[(name, target)] = found.get((name, target), 0) + 1
    assert found == STILL_UPWARD, {k: v for k, v in found.items() if STILL_UPWARD.get(k) != v} or \
        {k: 0 for k in STILL_UPWARD if k not in found}


def test_no_module_imports_another_modules_private_names():
    """A name another module imports is part of its interface, so it is spelled without a
    leading underscore (issue 40): `from runward.X import _name`, _name not a module, between
    two modules fails here (scripts/shape also counts `m._name` read off an imported module)."""
    bad = []
    for name, path in MODULES.items():
        for dotted, line in _imported_names(name, path):
            leaf = dotted.rpartition(".")[2]
            if dotted in MODULES or not leaf.startswith("_") or leaf.startswith("__"):
                continue
            owner = dotted.rpartition(".")[0]
            while owner and owner not in MODULES:
                owner = owner.rpartition(".")[0]
            if owner and owner != name:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {dotted}")
    assert not bad, "\n".join(bad)


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
            if AGENT_ENTRY_ALLOWED.get(name) == dotted:
                continue
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
    heavy = sorted(m for m in imported if m in ("json", "runward.transport.agentcall") or _node(m) == AGENT)
    assert heavy == [], heavy


def test_a_named_runs_status_imports_no_secrets(tmp_path):
    """Every status and stop of a named run loads runward.multinode.nodes (is it a multi-node
    run?); the run id's `secrets` (base64, hmac, hashlib: about half of that module's
    import) is for a multi-node start alone."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "runward", "status", "nosuchrun", "--json"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(SRC), RUNWARD_HOME=str(tmp_path / "home")))
    imported = {ln.split("|")[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert "runward.multinode.nodes" in imported, p.stderr[-2000:]  # the check sees the path it guards
    assert "secrets" not in imported and "hmac" not in imported
    # spec/options.py's declarations are read by status's parser: a NamedTuple there cost typing's
    # import (~2 ms, a tenth of bench/startup.py's margin); dataclasses likewise (Options)
    assert "runward.spec.options" in imported and "typing" not in imported and "dataclasses" not in imported


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
            if target is not None and target != name:
                edges.add(target)
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


MAX_MODULE_LINES = 600  # as the agent's own (tests/test_agent_package.py)


def test_no_module_over_600_lines_anywhere():
    """A module past 600 lines holds more than one concern: split it by concern (say which in
    its docstring) and re-export what callers import, as transport/agentcall.py and api.py were."""
    too_long = [f"{path.relative_to(ROOT)}: {n} lines" for path in MODULES.values()
                if (n := path.read_text().count("\n")) > MAX_MODULE_LINES]
    assert not too_long, "\n".join(too_long)


def test_only_the_cli_side_imports_verbs_and_the_operations_none():
    """issue 27: verbs/ parse, call an operation and render; the operations layer (and what
    it uses) never imports a verb. Who else still imports verbs/ is listed, each with why,
    so the list can only shrink (library.py ran the verbs not moved yet through argv until
    logs and watch moved)."""
    still = {"runward.cli": "the CLI itself"}
    bad = []
    for name, path in MODULES.items():
        if name.startswith("runward.verbs") or _node(name) == AGENT:
            continue
        for dotted, line in _imported_names(name, path):
            if dotted == "runward.verbs" or dotted.startswith("runward.verbs."):
                if name.startswith("runward.operations") or name not in still:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {dotted}")
    assert not bad, "\n".join(bad)


def test_the_library_calls_a_moved_verb_directly():
    """A verb moved to operations/ is not run through its argv parser by the library."""
    moved = {p.stem for p in (ROOT / "src" / "runward" / "operations").glob("*.py")} - {"__init__", "common"}
    via_argv = {d.rsplit(".", 1)[1] for d, _ in _imported_names("runward.library", MODULES["runward.library"])
                if d.startswith("runward.verbs.")}
    assert moved and not moved & via_argv, moved & via_argv


def test_nothing_outside_the_cli_parses_argv():
    """issue 27: the Python API and the MCP tools build typed options; argparse is the CLI's
    (cli.py, verbs/) and the declarations' (spec/options.py makes each flag's argparse type)."""
    allowed = ("runward.cli", "runward.spec.options")
    bad = [f"{path.relative_to(ROOT)}" for name, path in MODULES.items()
           if not name.startswith(allowed + ("runward.verbs",)) and _node(name) != AGENT
           and any(w in path.read_text() for w in ("import argparse", "parse_args(", "ArgumentParser("))]
    assert not bad, "argv parsed outside the CLI: " + ", ".join(bad)
