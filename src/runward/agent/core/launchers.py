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
from .wire import AgentFailure, bad_input

LAUNCHERS = ("slurm", "ray")  # each a NAME as above; the fork is every other attempt


def named(d):
    """The launcher a request or an attempt record names; None for the shim's fork."""
    return next((n for n in LAUNCHERS if d and d.get(n)), None)


def of_request(req, home):
    """The launcher of this start (the target's) or stop (the run's latest attempt's). A start
    whose target's launcher is not the one of the run's attempts is refused (refuse_start)."""
    try:
        latest = RunStore(home, req.get("name")).latest()
    except AgentFailure:
        latest = None
    if req.get("op") != "start":
        return named(latest)
    refuse_start(req, latest)
    return named(req)


def refuse_start(req, latest):
    """What a start (a restart, --replace) is refused for before any launcher runs: another
    launcher than the run's (refuse_other), a log rotation no shim would keep (refuse_rotation)."""
    refuse_other(req, latest)
    refuse_rotation(req)


def refuse_other(req, latest):
    """A run's attempts keep one launcher: a start (a restart, --replace) on a target whose
    launcher is not the one of the run's LATEST attempt is refused before anything is stopped
    or written, so an engine's run restarted without its --on never turns into a process
    forked here (nor a forked run into an engine's job)."""
    this, last = named(req), named(latest)
    if latest is not None and this != last:
        word = lambda n: "%s jobs" % n if n else "processes forked on this host"  # noqa: E731
        raise bad_input("run %s's attempts are %s; this target's would be %s" % (req.get("name"), word(last),
                                                                                word(this)),
                        "give the run's own target (--on as at its first start, or its runward.toml on), or start "
                        "under another name; `runward rm %s` forgets the old one" % req.get("name"))


def engine_alive(att):
    """Whether an engine's attempt lives (core/NAME.py's alive), None for the fork's."""
    name = named(att)
    return queries(name).alive(att) if name else None


def engine_workers(att):
    """{pid: Proc} of an engine's processes of the attempt on this host outside its tree and
    marker (workers the engine started: core/NAME.py's job_workers), {} for the fork's; where the
    engine cannot be asked, {} too (its own note goes with the stacks that ask it)."""
    name = named(att)
    q = queries(name) if name else None
    return q.job_workers(att)["here"] if hasattr(q, "job_workers") else {}


def refuse_rotation(req):
    """The log's rotation (log_max, log_keep) is the shim's (supervise/logfiles.py), and an
    engine's job has none: the engine writes the log, and a size saved here would never be
    kept. Refused as a supervision policy is, naming the options, before anything is submitted."""
    this = named(req)
    if this and req.get("log_max") is not None:
        said = "--log-max" + (" and --log-keep" if req.get("log_keep") is not None else "")
        raise bad_input("%s (runward.toml's log_max, log_keep) on a %s run: nothing here would rotate its log (the "
                        "log's rotation is the runward shim's, and a %s job has none)" % (said, this.capitalize(), this),
                        "start without them; bound the log in the job itself (its logging's own rotation)")


def queries(name):
    """The launcher's light module (core/NAME.py)."""
    return __import__(name, globals(), None, ["alive"], 1)
