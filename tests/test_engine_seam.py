"""The engine seam (docs/architecture.md, "a new engine"): each engine is registered on both
sides, each side's module has the calls the other code makes, what the CLI's scheme puts
in a request is what the agent chooses the launcher by, and no other file names an engine
(scripts/shape's measure, held to the list below)."""

import importlib.machinery
import importlib.util
import re
from pathlib import Path

import pytest

from runward.views import render
from runward.agent.core import launchers
from runward.agent.ops import launcher_ops
from runward.targets import ENGINE_OPTION_KEYS, ENGINES, engine_of, engine_options, parse_target

SCHEME_CALLS = ("parse", "render", "request")
LAUNCHER_QUERIES = ("alive", "live", "history_row")
LAUNCHER_OPS = ("start", "stop", "status_of")
VIEW_CALLS = ("start", "stop", "status_line", "history_where", "job")
ROOT = Path(__file__).resolve().parent.parent

# The files outside an engine's own that may name it, each with the lines it may name it on (the
# same for every engine): the three registries, each an import and a table (the agent's, a
# table of names: choosing a launcher imports none).
REGISTRIES = {
    "runward/targets/__init__.py": 2,       # ENGINES: the schemes
    "runward/views/render.py": 2,           # ENGINE_VIEWS: the views
    "runward/agent/core/launchers.py": 1,   # LAUNCHERS: the names a request or record is read by
}
# A log's words, not the engine's code: a batch system's own lines in a job's log (srun's,
# slurmstepd's; a job of any launcher may run srun), which the log parser skips; it sits below
# the launchers, and both sides read it.
LOG_WORDS = {"slurm": {"runward/agent/logmetrics/patterns.py": 1}}
# Where one engine reaches past the three registries, each named with why. None now: a Ray
# job's processes on nodes other than the head (docs/ray.md, Nodes) are stopped by the agent op
# node_check, which runs the engine's own agent/ops/NAMEnode.py (ops/nodes.py), asked by
# transport/nodeagents.py where the scheme says NODE_CHECK; neither names an engine.
REACHES: dict = {}
# An engine's own files: its scheme, its launcher's queries and ops, its CLI-side operations,
# its view.
OWN = (r"runward/targets/{n}\.py", r"runward/agent/core/{n}\w*\.py", r"runward/agent/ops/{n}\w*\.py",
       r"runward/operations/{n}\w*\.py", r"runward/views/{n}view\.py")


def _shape():
    loader = importlib.machinery.SourceFileLoader("shape", str(ROOT / "scripts" / "shape"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("shape", loader))
    loader.exec_module(module)
    return module


def test_every_engine_has_a_scheme_a_launcher_and_a_view():
    assert set(ENGINES) == set(launchers.LAUNCHERS) == set(render.ENGINE_VIEWS)
    for name, scheme in ENGINES.items():
        assert scheme.NAME == name and scheme.SCHEME.endswith("://") and scheme.FORM.startswith(scheme.SCHEME)
        assert render.ENGINE_VIEWS[name].ENGINE == name
        for module, calls in ((scheme, SCHEME_CALLS), (launchers.queries(name), LAUNCHER_QUERIES),
                              (launcher_ops(name), LAUNCHER_OPS), (render.ENGINE_VIEWS[name], VIEW_CALLS)):
            missing = [c for c in calls if not callable(getattr(module, c, None))]
            assert not missing, f"{module.__name__} lacks {missing}"


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_the_request_of_an_engine_target_chooses_its_launcher(name):
    scheme = ENGINES[name]
    target = parse_target(scheme.FORM.replace("LOGIN", "local"))
    assert target.engine is scheme and str(target) == scheme.render(target)
    req = scheme.request(target, {"op": "start", "name": "r"})
    assert launchers.named(req) == name
    assert launchers.named(dict(req, op="status")) == name  # the attempt record keeps the same entry
    assert render.engine_view({name: req[name]}) is render.ENGINE_VIEWS[name]
    assert engine_of({name: req[name]}) is scheme  # what the CLI side reads a result's engine by
    # what restart's "changed" compares: the keys of the target's spec the attempt entry keeps
    keys = launchers.queries(name).TARGET_KEYS
    assert keys and set(keys) <= set(target.engine_spec), (keys, target.engine_spec)


def test_a_forked_run_has_no_launcher_nor_view():
    target = parse_target("local")
    assert target.engine is None and target.engine_spec is None
    assert launchers.named({"op": "start", "name": "r"}) is None and launchers.named(None) is None
    assert render.engine_view({"name": "r", "pid": 1}) is None and engine_of({"name": "r", "pid": 1}) is None
    assert render.engine_job({"name": "r", "attempt": 1, "pid": None}) is None


def test_engine_option_keys_belong_to_one_engine_and_are_refused_elsewhere():
    owners = [n for n, m in ENGINES.items() for _ in m.OPTION_KEYS]
    assert len(ENGINE_OPTION_KEYS) == len(set(ENGINE_OPTION_KEYS)) == len(owners)
    key = ENGINE_OPTION_KEYS[0]
    assert engine_options({"on": "local", key: "x", "home": "/h"}) == {key: "x"}
    from runward.errors import BadInput
    with pytest.raises(BadInput, match="but is not a"):
        parse_target("ssh://h", label="x", engine_options={key: "1"})


def test_no_file_but_an_engines_own_and_the_registries_names_it():
    shape = _shape()
    assert shape.engine_names() == sorted(ENGINES)  # the measure finds every engine, by its scheme
    for name, files in shape.engine_mentions().items():
        said = {f: len(lines) for f, lines in files.items()}
        assert said == dict(REGISTRIES, **LOG_WORDS.get(name, {}), **REACHES.get(name, {})), (name, files)
        own = sorted(p.relative_to(shape.SRC).as_posix() for p in shape.PKG.rglob(f"{name}*.py"))
        strays = [f for f in own if not any(re.fullmatch(o.format(n=name), f) for o in OWN)]
        assert not strays, f"{strays}: a file named after {name} is not one of an engine's own places"


def test_node_check_runs_the_engines_own_node_module_and_names_an_engine_without_one(tmp_path, monkeypatch):
    """The agent's one op for an engine job's processes on a node not its head: the engine's
    ops/NAMEnode.py answers (here Ray's, for a marker no process carries: nothing to stop);
    an engine with no node module, or a name no launcher has, is a BadInput naming it."""
    from runward.errors import BadInput
    from runward.transport import agentcall
    from runward.targets import parse_target
    monkeypatch.setenv("RUNWARD_HOME", str(tmp_path / "home"))
    req = {"op": "node_check", "marker": "nc-" + tmp_path.name, "home_id": "h", "workers": [], "signal": "TERM", "grace": 1}
    res = agentcall.call(parse_target("local"), dict(req, engine="ray"))
    assert res["processes"] == [] and res["survivors"] == [] and res["signal"] == "SIGTERM", res
    for engine, said in (("slurm", "the engine 'slurm' has no node check"), ("bogus", "unknown engine 'bogus'")):
        with pytest.raises(BadInput, match=said):
            agentcall.call(parse_target("local"), dict(req, engine=engine))
    assert {n for n in ENGINES if getattr(ENGINES[n], "NODE_CHECK", False)} == {"ray"}
