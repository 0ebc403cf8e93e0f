"""The launcher of an attempt: how its processes come to exist on this host. It is chosen
once, at start, and the attempt record keeps it: a request to an engine's target carries
that engine's entry under the launcher's name (the CLI's targets/NAME.py adds it), and the
attempt record written by that launcher keeps an entry of the same name. Every other attempt
is the shim's fork (ops/start.py), the default launcher.

A launcher NAME is two modules of the agent (docs/architecture.md, "a new engine"):
- core/NAME.py, light (health, prune and history ask it on every call): alive(att) -> bool;
  live(store, att) -> None or what lives (prune's refusal; raises where the engine cannot
  be asked); history_row(att) -> the history row's entry for NAME, or None.
- ops/NAME.py: start(req, home) and stop(req, home), the ops themselves; status_of(store,
  att) -> the attempt's status (ops.launcher_ops imports it: ops/ sits above this package).
Here, not in the launchers: choosing must not import them (ops/NAME.py may import
subprocess, which would cost every default stop ~30 ms of CPU for nothing)."""

from .store import RunStore
from .wire import AgentFailure

LAUNCHERS = ("slurm", "ray")  # each a NAME as above; the fork is every other attempt


def named(d):
    """The launcher a request or an attempt record names; None for the shim's fork."""
    return next((n for n in LAUNCHERS if d and d.get(n)), None)


def of_request(req, home):
    """The launcher of this start (the target's) or stop (the run's latest attempt's)."""
    if req.get("op") == "start":
        return named(req)
    try:
        return named(RunStore(home, req.get("name")).latest())
    except AgentFailure:
        return None


def queries(name):
    """The launcher's light module (core/NAME.py)."""
    return __import__(name, globals(), None, ["alive"], 1)
