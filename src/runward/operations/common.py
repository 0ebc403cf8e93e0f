"""What the operations share: runward.toml and --on resolution, --gpus, "did you mean", and
`--all` over runs or targets. OPTS is a verb's options object (or, for the verbs not moved
yet, argparse's namespace): read by attribute (config, on, nodes, name)."""

from __future__ import annotations

import os

from ..errors import EXIT_OK, BadInput
from ..transport.fanout import fan_out, fan_out_runs, worst_code
from . import Outcome


def load_config(opts):
    """runward.toml, and its [ssh] config in force for every ssh call this verb makes (unless
    RUNWARD_SSH_CONFIG already names one): here, since `status --all` and `top` reach targets
    without target_of."""
    from ..spec import config
    cfg = config.load(getattr(opts, "config", None))
    ssh_settings(cfg, whole=True)
    return cfg


# What a runward.toml's [ssh] put in the environment (variable -> value), told apart from
# what the user set: in one process (`runward mcp`, `import runward`) a value already there
# would be taken for the user's own, and the first config's [ssh] config would stay in force
# for every later call, another project's or the same file edited.
_FROM_CONFIG: dict[str, str] = {}


def ssh_settings(cfg, whole: bool = False) -> None:
    """cfg's [ssh] config and alive_timeout in force for the ssh calls that follow, unless
    the user's own RUNWARD_SSH_CONFIG / RUNWARD_SSH_ALIVE_TIMEOUT names one. whole (the
    config just loaded): a setting this file lacks also takes away what an earlier config
    put there; otherwise only what cfg has is put."""
    for var, value in (("RUNWARD_SSH_CONFIG", cfg.ssh_config),
                       ("RUNWARD_SSH_ALIVE_TIMEOUT", str(cfg.ssh_alive_timeout) if cfg.ssh_alive_timeout else None)):
        now = os.environ.get(var)
        if now and _FROM_CONFIG.get(var) != now:
            continue  # the user's own
        if value:
            os.environ[var] = _FROM_CONFIG[var] = value
        elif whole and now:
            del os.environ[var]
            _FROM_CONFIG.pop(var, None)


def target_of(opts, cfg, run: str | None = None):
    """--on, else the run's `on` in runward.toml, else local; runward.toml's [ssh] config
    applies unless RUNWARD_SSH_CONFIG already names one."""
    ssh_settings(cfg)
    return cfg.target(getattr(opts, "on", None), run)


def config_dir(cfg) -> str | None:
    """The directory runward.toml's relative LOCAL paths are read from."""
    return os.path.dirname(cfg.path) if cfg.path else None


def gpu_list(text: str | list | None) -> list[int] | None:
    if text is None:
        return None
    if isinstance(text, list):
        return [int(g) for g in text]
    try:
        gpus = [int(g) for g in str(text).split(",") if g.strip() != ""]
    except ValueError:
        raise BadInput(f"invalid --gpus {text!r}", "give GPU indices like 0,1,2")
    if any(g < 0 for g in gpus):
        raise BadInput(f"invalid --gpus {text!r}", "GPU indices are >= 0")
    return gpus


def config_targets(cfg) -> list:
    """Every target runward.toml names: its [targets], then each run's own (its nodes for a
    multi-node run, local for a run without `on`), each once."""
    seen: list = []
    own = [t for run in cfg.runs for t in ([cfg.target(n) for n in cfg.runs.placement(run)["nodes"]]
                                           if cfg.runs.placement(run).get("nodes") else [cfg.target(None, run)])]
    for t in [*cfg.named_targets(), *own]:
        if t not in seen:
            seen.append(t)
    return seen


def did_you_mean(name: str, cfg, target=None) -> str | None:
    """"did you mean train?" for a run name that is neither in runward.toml nor on the
    target, from the names of both (the target's asked only when given: one status call)."""
    import difflib
    names = set(cfg.runs)
    if target is not None:
        from .. import api
        from ..errors import RunwardError
        try:
            names |= {r["name"] for r in api.status(target).get("runs") or []}
        except RunwardError:
            pass  # the suggestion is a courtesy: the error it goes with is the answer
    close = difflib.get_close_matches(name, sorted(names - {name}), n=3)
    return f"did you mean {' or '.join(close)}?" if close else None


def suggest_for(opts, e) -> None:
    """A run that is not found (any verb naming one): add "did you mean ...?" to the hint."""
    name = getattr(opts, "name", None)
    if e.kind != "RunNotFound" or not isinstance(name, str):
        return
    try:
        cfg = load_config(opts)
        if name in cfg.runs:
            # defined, just not on the target asked: runward.toml's own target is meant when --on
            # named another (`--on ssh://host` for a run in a container on that host)
            on = getattr(opts, "on", None)
            configured = cfg.target(None, name)
            if isinstance(on, str) and cfg.target(on) != configured:
                hint = (f"runward.toml's [runs.{name}] runs on {configured.display()}: leave out --on, "
                        f"or give --on {configured.label or configured}")
                e.hint = hint
                e.details["configured_target"] = configured.display()
            return
        hint = did_you_mean(name, cfg, target_of(opts, cfg, name))
    except BadInput:
        return
    if hint:
        e.hint = hint + (f" ({e.hint})" if e.hint else "")
        e.details["did_you_mean"] = hint


def on_runs(opts, cfg, command: str, one, render) -> Outcome:
    """`COMMAND --all`: one(name, target) for every run of runward.toml, each on its own
    target, in parallel (fan_out_runs); one section per run, or one JSON document
    {"runs": [{"name", "target", "ok", "result" | "error"}]}; exit code: worst_code."""
    if getattr(opts, "name", None):
        raise BadInput(f"both a run name ({opts.name}) and --all were given", "give one of them")
    if getattr(opts, "on", None):
        raise BadInput("--on with --all", "--all acts on each run of runward.toml on its own target (its `on`)")
    if not cfg.runs:
        raise BadInput("--all: no [runs] in runward.toml" + ("" if cfg.path else " (no runward.toml found)"),
                       "define runs in runward.toml, or name one run")
    runs = [(name, target_of(opts, cfg, name)) for name in cfg.runs]
    results = fan_out_runs(runs, one)
    for r in results:
        nodes = cfg.runs.placement(r["name"]).get("nodes")
        if nodes:  # a multi-node run is where its nodes are, not local
            r["target"] = ",".join(cfg.target(t).display() for t in nodes)
    code = worst_code(results)
    return Outcome(command, code, {"ok": code == EXIT_OK, "command": command, "runs": results}, lambda: "\n".join(
        f"== {r['name']} on {r['target']}\n" + _indent(render(r["result"]) if r["ok"] else _failure(r))
        for r in results))


def _failure(r: dict) -> str:
    e = r["error"]
    return f"error ({e['type']}, exit {e.get('exit_code')}): {e['message']}" + (
        f"\nhint: {e['hint']}" if e.get("hint") else "")


def _indent(text: str) -> str:
    return "\n".join("  " + ln for ln in text.splitlines())


def on_all(cfg, command: str, op, render, *, failed, exit_code, targets=None) -> Outcome:
    """`COMMAND --all`: op on every named target of runward.toml (or on targets) at once, one
    section each; a target's failure is labelled failed(error); the exit code is
    exit_code(the failed results, all results)."""
    targets = cfg.named_targets() if targets is None else targets
    if not targets:
        raise BadInput("--all: no [targets] in runward.toml", "define named targets, or use --on")
    results = fan_out(targets, op)
    failures = [r for r in results if not r["ok"]]
    code = exit_code(failures, results) if failures else EXIT_OK
    return Outcome(command, code, {"ok": code == EXIT_OK, "command": command, "targets": results}, lambda: "\n".join(
        f"== {r['target']}\n" + (render(r) if r["ok"] else f"  {failed(r['error'])}: {r['error']['message']}" + (
            f"\n  hint: {r['error']['hint']}" if r["error"].get("hint") else ""))
        for r in results))


def require_extra(module: str, verb: str, what: str, extra: str) -> None:
    """The optional library VERB needs (runward[EXTRA]), checked before anything else: its
    absence is bad input naming the extra to install, never an ImportError traceback."""
    import importlib
    try:
        importlib.import_module(module)
    except ImportError:
        raise BadInput(f"runward {verb} needs {what}", f"pip install 'runward[{extra}]'") from None
