"""history: every attempt of a run as an experiment -- when it ran, how it ended, how far and
how fast it got, and what changed against the attempt before -- read here in one round trip.

The facts come from each attempt's own record (command, cwd, env, the sha256 of its files at
start) and from its section of the log (logselect.section), parsed by logmetrics.parse_line.
What changed is worked out here, where the env values are: a secret whose value changed is
said to have changed without either value leaving the target (secrets.redact_value)."""

import time

from .. import launchers
from ..logmetrics import is_loss, parse_line, throughput_metric
from ..logmetrics.rules import median
from ..logselect import _forwards, section
from ..proc.procfs import boot_id, scan
from ..proc.runs import attempt_state
from ..secrets import mask_url_passwords, redact_value
from ..store import RunStore

SECTION_MAX = 16 << 20  # bytes of one attempt's log parsed at most: a reply stays quick
WARMUP_FRACTION = 0.1  # the first tenth of an attempt's throughput points is warm-up...
WARMUP_MIN = 2  # ... and at least this many (compilation, autotuning, data loader start)


def history(req, home):
    """{"name", "attempts": [facts of each attempt, oldest first]}."""
    store = RunStore.existing(home, req.get("name"))
    procs, bid = scan(), boot_id()
    rows, prev = [], None
    for n in store.attempts():
        att = store.attempt(n)
        if not att:
            continue
        row = facts(store, att, attempt_state(att, procs, bid), False)
        row["changed"] = changes(prev, att) if prev is not None else None
        rows.append(row)
        prev = att
    return {"name": store.name, "attempts": rows, "time": time.time()}


def facts(store, att, state, series, metric=None):
    """One attempt's facts; series: its points too, [step, throughput, loss] (compare);
    metric: the throughput to read (a baseline rule's), else the main one."""
    ex = att.get("exit") or {}
    started, ended = att.get("started_at"), ex.get("at")
    row = {"attempt": att.get("attempt"), "state": state, "started_at": started, "exit": att.get("exit"),
           "ran_s": round((ended or time.time()) - started, 1) if started and (ended or state == "running") else None,
           "command": command(att), "cwd": att.get("cwd"), "files": short_hashes(att.get("hashes"))}
    if att.get("error"):
        row["error"] = att["error"]
    extra(row, att)
    row.update(metrics(store, att, series, metric))
    return row


def extra(row, att):
    """What only some attempts have: a supervised restart's cause (the shim started it, with
    the files as they were on disk then), an engine's job (its launcher's row), a node's rank."""
    r = att.get("restart")
    if r:
        row["restart"] = {"of": r.get("of"), "number": r.get("number"), "reason": r.get("reason"),
                          "delay_s": r.get("delay_s"), "by": "shim"}
    launcher = launchers.named(att)
    if launcher is not None:
        row[launcher] = launchers.queries(launcher).history_row(att)
    mn = att.get("multinode")
    if mn:
        row["node"] = {"rank": mn.get("rank"), "nnodes": mn.get("nnodes")}


def command(att):
    """The attempt's command as shown: a URL's password in it as *** (secrets.mask_url_passwords)."""
    return mask_url_passwords(att["sh"] if att.get("sh") is not None else " ".join(att.get("argv") or []))


def short_hashes(hashes):
    return {p: (h or "")[:8] or None for p, h in sorted((hashes or {}).items())}


def metrics(store, att, series, metric=None):
    """steps reached, the main throughput (its name, median after warm-up, the points it
    had), the last loss; "log_partial" when the section was longer than SECTION_MAX."""
    if not att.get("log"):
        return {"steps": None, "throughput": None, "loss": None}
    lo, hi = section(store, att)
    pts, names = [], set()
    partial = hi - lo > SECTION_MAX
    for line in _forwards(att["log"], lo, min(hi, lo + SECTION_MAX)):
        if not any(c.isdigit() for c in line):
            continue
        m = parse_line(line)
        if m:
            pts.append(m)
            names.update(m)
    return summarize(pts, names, partial, series, metric)


def summarize(pts, names, partial, series, metric=None):
    tp = metric or throughput_metric(n for n in names if not n.startswith("lr"))
    loss = next((n for n in ("loss", "train_loss", "lm_loss") if n in names), None) or next(
        (n for n in sorted(names) if is_loss(n)), None)
    step_name = next((n for n in ("step", "global_step", "iter", "iteration", "num_updates") if n in names), None)
    steps = [p[step_name] for p in pts if step_name in p] if step_name else []
    tps = [p[tp] for p in pts if tp in p and p[tp] == p[tp]] if tp else []
    losses = [p[loss] for p in pts if loss in p] if loss else []
    warm = max(WARMUP_MIN, int(len(tps) * WARMUP_FRACTION))
    out = {"steps": int(max(steps)) if steps else None,
           "throughput": {"metric": tp, "median": median(tps[warm:]), "points": len(tps) - warm,
                          "warmup_points": warm} if len(tps) > warm else
           ({"metric": tp, "median": None, "points": 0, "warmup_points": len(tps)} if tp else None),
           "loss": {"metric": loss, "last": _num(losses[-1])} if losses else None}
    if partial:
        out["log_partial"] = SECTION_MAX
    if series:
        out["series"] = {"step": step_name, "throughput": tp, "loss": loss, "warmup_points": warm,
                         "points": [[p.get(step_name), p.get(tp), _num(p.get(loss))] for p in pts
                                    if step_name in p and (tp in p or loss in p)]}
    return out


def _num(v):
    """A number as JSON can carry it: NaN and inf as strings."""
    if v is None or v == v and v not in (float("inf"), float("-inf")):
        return v
    return str(v)


def changes(prev, att):
    """What att changed against prev: files (path -> [old, new] short hashes), env (added,
    changed, removed; values shown as status shows them), command and cwd ([old, new])."""
    out = {}
    a, b = prev.get("hashes") or {}, att.get("hashes") or {}
    files = {p: [(a.get(p) or "")[:8] or None, (b.get(p) or "")[:8] or None]
             for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)}
    if files:
        out["files"] = files
    env = env_changes(_env(prev), _env(att))
    if env:
        out["env"] = env
    for key, old, new in (("command", command(prev), command(att)), ("cwd", prev.get("cwd"), att.get("cwd"))):
        if old != new:
            out[key] = [old, new]
    return out


def _env(att):
    """The attempt's env as compared: an entry given as `--env NAME` or in an `--env-file` is
    in env_from only (its value is stored nowhere): the key is said when added or removed,
    never as changed -- that is not known, and a new source need not mean a new value."""
    env = dict(att.get("env") or {})
    for k in att.get("env_from") or {}:
        env[k] = "(value not kept)"
    return env


def env_changes(a, b):
    out = {}
    added = {k: redact_value(k, b[k]) for k in sorted(set(b) - set(a))}
    removed = sorted(set(a) - set(b))
    changed = {k: [redact_value(k, a[k]), redact_value(k, b[k])] for k in sorted(set(a) & set(b)) if a[k] != b[k]}
    for k, v in (("added", added), ("changed", changed), ("removed", removed)):
        if v:
            out[k] = v
    return out
