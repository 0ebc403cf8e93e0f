"""history: every attempt of a run as an experiment -- when it ran, how it ended, how far and
how fast it got, and what changed against the attempt before -- read here in one round trip.

The facts come from each attempt's own record (command, cwd, env, the sha256 of its files at
start) and from its section of the log (logselect.section), parsed by logmetrics.parse_line.
What changed is worked out here, where the env values are: a secret whose value changed is
said to have changed without either value leaving the target (secrets.redact_value)."""

import time

from ..core import launchers
from ..health.attempts import command, facts
from ..core.procfs import boot_id, scan
from ..proc.runs import attempt_state
from ..core.secrets import redact_value
from ..core.store import RunStore
from ..core.wire import AgentFailure
from . import launcher_ops

def history(req, home):
    """{"name", "attempts": [facts of each attempt, oldest first]}."""
    store = RunStore.existing(home, req.get("name"))
    procs, bid = scan(), boot_id()
    rows, prev = [], None
    for n in store.attempts():
        att = store.attempt(n)
        if not att:
            continue
        row = facts(store, att, _state(store, att, procs, bid), False)
        row["changed"] = changes(prev, att) if prev is not None else None
        rows.append(row)
        prev = att
    return {"name": store.name, "attempts": rows, "time": time.time()}


def _state(store, att, procs, bid):
    """The attempt's state as status says it: an engine's job (no shim, no forked job in the
    record) by its launcher, which asks the engine where the record has no end yet."""
    launcher = launchers.named(att)
    if launcher is None:
        return attempt_state(att, procs, bid)
    try:
        return launcher_ops(launcher).status_of(store, att).get("state") or "lost"
    except AgentFailure as e:  # the engine cannot be asked now: unknown, never a guess
        return "unknown (%s)" % e.message


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
