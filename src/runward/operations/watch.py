"""watch: judge a run's health through a window; exit 1 on the first alert (NaN, OOM,
throughput under a floor or a baseline, a stall, a straggler, the job ended); every node of
a multi-node run, healthy only if all are. The points as they come reach the caller
(ON_POINTS); printing them is the CLI's (verbs/watch.py)."""

from __future__ import annotations

from ..errors import EXIT_FAILED, BadInput
from . import Outcome, Targeted, single
from .common import load_config


class WatchOptions(Targeted):
    """What `runward watch` takes (verbs/watch.py's flags). min and max: the flags' METRIC=V
    words, or {METRIC: V} as the Python API and MCP give them."""
    name: str | None = None
    for_s: float = 60.0
    min: list | dict = []
    max: list | dict = []
    stall_after: str | float | None = None
    straggler_ratio: float | None = None
    drop: float | None = None
    since: str | None = None
    node: int | None = None
    all_nodes: bool = False


def watch(opts: WatchOptions, on_points=None) -> Outcome:
    from .. import api
    from . import nodes as on_nodes
    _check(opts)
    cfg = load_config(opts)
    target, nodes = on_nodes.pick_node(opts, cfg, opts.name, opts.node, opts.all_nodes)
    rules = api.health_rules({"health": cfg.runs.value(opts.name, "health")}, mins=_limits(opts.min, "--min"),
                             maxs=_limits(opts.max, "--max"), drop=opts.drop, **_stall(opts, cfg))
    since = api.parse_duration(opts.since, "--since")
    if nodes:
        return on_nodes.watch_all(nodes, opts.name, for_s=opts.for_s, rules=rules, since_s=since)
    res = api.watch(target, opts.name, for_s=opts.for_s, rules=rules, on_points=on_points, since_s=since)
    acted = "".join(f"\nhealth action: {a.get('action')} on {a.get('kind')}"
                    + (f" (line {a['line_no']}: {a.get('line')})" if a.get("line_no") else "")
                    for a in res.get("actions") or [])
    acted += _unsupervised(opts.name, res)
    if res["healthy"]:
        return single("watch", target, res, lambda: _healthy(opts.name, res) + _unjudged(res) + acted)
    from ..views.health import format_alert
    text = "\n".join(f"ALERT {format_alert(a)}" for a in res["alerts"])
    if res.get("ended"):
        text += f"\n{opts.name}: the job is not running"
    out = single("watch", target, res, None, EXIT_FAILED, notes=text + acted)
    out.document["error"] = {"type": "Alert", "message": res["alert"].get("detail", res["alert"]["kind"]),
                             "exit_code": EXIT_FAILED}
    return out


def _limits(given, flag: str) -> dict:
    """{METRIC: V} from the flag's words, or from the API's mapping: its items read as the words
    `METRIC=V` would be (so a value the flag takes, the mapping takes, and a bad one is the same
    BadInput naming the flag)."""
    from ..spec.inputs import parse_limits
    if hasattr(given, "items"):
        given = [f"{k}={v}" for k, v in given.items()]
    return parse_limits(given, flag)


def _unsupervised(name: str, res: dict) -> str:
    """The run's shim failed (its record's shim_failed) while the job lives: nothing acts on
    its health rules or restarts it, whatever this window's verdict."""
    f = res.get("shim_failed")
    u = res.get("idle_unjudged")
    idle = f"\nidle: not judged by the shim: {u.get('why')}" if u else ""
    if not f:
        return idle
    return idle + (f"\nnote: the shim failed ({f.get('error')}; its log: {f.get('log')}): the job runs unsupervised, "
            f"no health action or restart is taken; `runward restart {name}` starts a supervised attempt")


def _healthy(name: str, res: dict) -> str:
    return (f"{name}: healthy for {res['watched_s']:.0f}s"
            + (f"; {res['throughput_metric']} last {res['metrics'].get(res['throughput_metric'])}"
               if res.get("throughput_metric") else ""))


def _stall(opts, cfg) -> dict:
    """stall_after and straggler_ratio, runward.toml's checked, the flags over them."""
    from ..spec.stallopts import options
    o = options({"health": cfg.runs.value(opts.name, "health")}, opts, opts.name)
    return {"stall": o.get("after"), "ratio": o.get("ratio")}


def _unjudged(res: dict) -> str:
    """The baseline rules that judged nothing: a healthy watch is no pass of a rule that could
    not be judged (a baseline attempt that is not there, too few points yet)."""
    return "".join(f"\n{m} vs baseline: not judged: {b.get('why') or b.get('verdict') or 'no points yet'}"
                   for m, b in (res.get("baseline") or {}).items() if b.get("ratio") is None)


def _check(opts) -> None:
    """What argparse checks of the flags, for a caller without argv (the Python API, MCP):
    --for, --drop and --straggler-ratio are declared options (spec/options.py; --for is checked by
    operations.check, --drop and --straggler-ratio here, by the same problem())."""
    from ..spec import options
    for key in ("drop", "straggler_ratio"):  # declared options (spec/options.py): the flag's own check
        opt, v = options.OPTS[key], getattr(opts, key)
        bad = v is not None and options.problem(opt, v)
        if bad:
            raise BadInput(f"invalid {opt.flag} {v!r}: {bad}", options.fix(opt))
    if opts.node is not None and (isinstance(opts.node, bool) or not isinstance(opts.node, int)):
        raise BadInput(f"invalid --node {opts.node!r}: not a whole number", "give --node a rank, e.g. --node 1")
    for key in ("min", "max"):
        given = getattr(opts, key) or []
        if not hasattr(given, "items") and not (isinstance(given, (list, tuple)) and all(isinstance(w, str) for w in given)):
            raise BadInput(f"invalid --{key} {getattr(opts, key)!r}", f"give --{key} METRIC=V words, e.g. tok_s=14500")
