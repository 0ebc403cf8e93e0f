"""The supervision policy of a start (docs/supervision.md): runward.toml's [runs.NAME] keys and
[runs.NAME.health] actions, the start flags over them, as the table the agent's start stores
in the run's spec and the shim keeps (agent/supervise/policy.py checks it again there)."""

from __future__ import annotations

from ..errors import BadInput
from .options import OPTS

KEYS = ("restart", "max_restarts", "restart_window", "backoff", "backoff_max", "min_uptime",
        "restart_exit_codes", "no_restart_exit_codes", "notify",
        "checkpoint", "checkpoint_marker", "checkpoint_saved", "max_no_progress", "resume_default",
        "gpu_release_timeout")
MODES = OPTS["restart"].choices  # never, on-failure, always


def policy(run_cfg: dict | None, args=None) -> dict | None:
    """The "supervise" table of a start: runward.toml's, then the flags; None when neither
    asks for supervision (the shim then waits for the job and records its end, nothing more)."""
    cfg = dict(run_cfg or {})
    raw = {k: cfg[k] for k in KEYS if k in cfg}
    if args is not None:
        for k in KEYS:
            v = getattr(args, k, None)
            if v is not None:
                raw[k] = v
    health = health_policy(cfg.get("health") or {})
    if not raw and not health:
        return None
    return _parsed(raw, health)


def _parsed(raw: dict, health: dict | None) -> dict:
    from .inputs import parse_duration
    out: dict = {}
    if "restart" in raw:
        if raw["restart"] not in MODES:
            raise BadInput(f"invalid restart {raw['restart']!r}", "restart = \"never\", \"on-failure\" or \"always\"")
        out["restart"] = raw["restart"]
    if "max_restarts" in raw:
        out["max_restarts"] = _count(raw["max_restarts"], "max_restarts")
    for k in ("restart_window", "min_uptime", "gpu_release_timeout"):
        if k in raw:
            out[k] = parse_duration(str(raw[k]), k)
    if "backoff" in raw or "backoff_max" in raw:
        out["backoff"] = _backoff(raw.get("backoff"), raw.get("backoff_max"))
    for k in ("restart_exit_codes", "no_restart_exit_codes"):
        if k in raw:
            out[k] = _codes(raw[k], k)
    if "notify" in raw:
        n = raw["notify"]
        out["notify"] = [n] if isinstance(n, str) else list(n)
        if not all(isinstance(t, str) and t.strip() for t in out["notify"]):
            from ..agent.core.secrets import mask_url_passwords
            raise BadInput(mask_url_passwords(f"invalid notify {n!r}"), 'notify = ["command ARG...", "https://hook"]')
    _progress(raw, out)
    if health:
        out["health"] = health
    return out


def _progress(raw: dict, out: dict) -> None:
    """checkpoint, its completeness test and max_no_progress (agent/supervise/progress.py checks them
    again on the target)."""
    for k in ("checkpoint", "checkpoint_marker", "checkpoint_saved", "resume_default"):
        if k in raw:
            if not isinstance(raw[k], str) or not raw[k].strip():
                raise BadInput(f"invalid {k} {raw[k]!r}", f"give a non-empty string, e.g. {_EXAMPLE[k]}")
            out[k] = raw[k]
    if "checkpoint_saved" in out:
        import re
        try:
            re.compile(out["checkpoint_saved"])
        except re.error as e:
            raise BadInput(f"invalid checkpoint_saved regex {out['checkpoint_saved']!r}: {e}",
                           f"a Python regex, e.g. {_EXAMPLE['checkpoint_saved']}")
    if "checkpoint" in out and not ({"checkpoint_marker", "checkpoint_saved"} & set(out)):
        raise BadInput(f"checkpoint {out['checkpoint']!r}: nothing tells a complete checkpoint from one being written",
                       f"add {_EXAMPLE['checkpoint_marker']} (a file the job writes last) or {_EXAMPLE['checkpoint_saved']}")
    if "max_no_progress" in raw:
        out["max_no_progress"] = _count(raw["max_no_progress"], "max_no_progress")
        if out["max_no_progress"] < 1:
            raise BadInput("invalid max_no_progress 0", "give a whole number >= 1 (attempts in a row without progress)")


_EXAMPLE = {"checkpoint": "checkpoint = \"ckpt/step_*\"", "checkpoint_marker": "checkpoint_marker = \"COMPLETE\"",
            "checkpoint_saved": "checkpoint_saved = \"saved checkpoint (?P<path>\\S+)\"",
            "resume_default": "resume_default = \"init/base\""}


def _count(v, k: str) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        n = -1
    if n < 0 or isinstance(v, bool):
        raise BadInput(f"invalid {k} {v!r}", "give a whole number >= 0")
    return n


def _backoff(text, cap) -> list[float]:
    """"5s..5m" (first delay..cap), or "5s" with backoff_max = "5m"; "0" for none."""
    from .inputs import parse_duration
    s = "1s" if text is None else str(text)
    first, sep, last = s.partition("..")
    lo = parse_duration(first, "backoff")
    hi = parse_duration(last, "backoff") if sep else (parse_duration(str(cap), "backoff_max") if cap is not None
                                                      else max(lo, 60.0))
    if hi < lo:
        raise BadInput(f"invalid backoff {s!r}: the cap is below the first delay", 'write backoff = "5s..5m"')
    return [lo, hi]


def _codes(v, k: str) -> list[int]:
    items = v.split(",") if isinstance(v, str) else v
    try:
        codes = [int(str(c).strip()) for c in items if str(c).strip()]
    except (TypeError, ValueError):
        codes = [-1]
    if not all(0 <= c <= 255 for c in codes):
        raise BadInput(f"invalid {k} {v!r}", f"a list of exit codes 0-255, e.g. {k} = [1, 137]")
    return codes


ACTIONS = ("notify", "stop", "restart")  # one of them, maybe after "stacks," (take the stacks first)


def health_policy(h: dict) -> dict | None:
    """[runs.NAME.health] with actions = {KIND = "stop" | "restart" | "notify"}: the rules
    (as `watch` reads them) and the actions, judged by the shim every `interval` seconds."""
    acts = h.get("actions")
    interval = _interval(h.get("interval", 5))
    if not acts and not h.get("idle"):
        return None
    acts = acts or {}
    if not isinstance(acts, dict):
        raise BadInput(f"invalid [health] actions {acts!r}: not a table", 'actions = { nan = "stop" }')
    # the kinds are the log parser's table, and its package compiles its patterns: only a policy pays
    from ..agent.logmetrics.kinds import ACTION_ALIASES, ACTION_KINDS
    from .inputs import health_rules
    actions = {ACTION_ALIASES.get(k, k): v for k, v in dict(acts).items()}
    bad = [k for k in actions if k not in ACTION_KINDS] + [f"{k}={v}" for k, v in actions.items()
                                                           if not _action_ok(v)]
    if bad:
        raise BadInput(f"invalid [health] actions {', '.join(map(str, bad))}",
                       f"actions = {{ nan = \"stop\", stall = \"stacks,restart\" }}; kinds: {', '.join(ACTION_KINDS)}; "
                       f"actions: {', '.join(ACTIONS)}, each maybe after \"stacks,\"")
    out = {"rules": health_rules({"health": h}), "actions": actions, "interval": interval}
    if h.get("idle"):
        out["idle"] = _idle(h["idle"], out["interval"])
    return out


def check_health_table(h, where: str, name: str = "NAME") -> tuple[str, str] | None:
    """(message, hint) of the first value in a [runs.NAME.health] table that the start or
    watch would refuse, each by the check its flag has, or None. WHERE ("FILE: [runs.NAME]")
    names the file: runward.toml's check when it is read (spec/config.py), so a bad rule is
    refused before anything starts, never met by the shim's first health check."""
    from .inputs import health_rules
    from .stallopts import from_config
    table = f"{where[:-1]}.health]" if where.endswith("]") else where
    if not isinstance(h, dict):
        return f"{table} must be a table", "[runs.NAME.health]\nmin = { tok_s = 14500 }"
    why = _unknown_health_keys(h, table)
    if why:
        return why
    try:
        health_rules({"health": h})
        from_config(h, name)
        health_policy(h)
    except BadInput as e:
        msg = e.message.replace(f"[runs.{name}.health] ", "").replace("[health] ", "")
        return f"{table} {msg}", e.hint or ""
    return None


HEALTH_KEYS = ("min", "max", "stall_after", "stall", "straggler_ratio", "drop_fraction", "interval", "actions",
               "idle", "metrics")


def _unknown_health_keys(h: dict, table: str) -> tuple[str, str] | None:
    """A key the health table does not know: a value that is not a table (`stall_afer = 300`
    would be ignored, and stall_after derived as if unset), or a table named like a known key
    and no baseline rule (`actons = { nan = "stop" }` would read as a baseline rule of a metric
    "actons"). Another table is a baseline rule, tok_s = { min_ratio = 0.95 } (spec/baselines.py
    checks it)."""
    import difflib
    bad = [k for k, v in h.items() if k not in HEALTH_KEYS and (not isinstance(v, dict) or (
        "min_ratio" not in v and difflib.get_close_matches(k, HEALTH_KEYS, 1, 0.8)))]
    if not bad:
        return None
    near = {k: difflib.get_close_matches(k, HEALTH_KEYS, 1, 0.6) for k in bad}
    said = ", ".join(f"{k} (did you mean {near[k][0]}?)" if near[k] else k for k in bad)
    return (f"{table} unknown key(s) {said}",
            f"keys: {', '.join(HEALTH_KEYS)}; a table under a metric's name is a baseline rule, "
            "tok_s = { min_ratio = 0.95 }")


def _interval(v) -> float:
    """[health] interval: the shim judges the rules this often; 0 would make its wait block on
    the job alone, and no rule would ever be judged."""
    from .inputs import parse_duration
    s = parse_duration(str(v), "[health] interval")
    if isinstance(v, bool) or not s > 0:
        raise BadInput(f"invalid [health] interval {v!r}", "give a duration over 0, e.g. interval = 5 or \"5s\"")
    return s


def _action_ok(v) -> bool:
    """"stop", "stacks", "stacks,restart": the stacks (once) and at most one other action."""
    if not isinstance(v, str):
        return False
    parts = [x.strip() for x in v.split(",")]
    rest = [x for x in parts if x != "stacks"]
    return len(parts) - len(rest) <= 1 and len(rest) <= 1 and all(x in ACTIONS for x in rest) and bool(parts)


def _idle(idle, interval: float) -> dict:
    """idle = { gpu_util_below = 5, for = "10m" }: judged by the shim once an interval, so a
    window shorter than the interval could never be seen whole: refused, not ignored."""
    from .inputs import parse_duration
    hint = 'idle = { gpu_util_below = 5, for = "10m" }'
    if not isinstance(idle, dict) or set(idle) - {"gpu_util_below", "for"} or "for" not in idle:
        raise BadInput(f"invalid [health] idle {idle!r}", hint)
    below = idle.get("gpu_util_below", 5)
    if isinstance(below, bool) or not isinstance(below, (int, float)) or not 0 < below <= 100:
        raise BadInput(f"invalid [health] idle gpu_util_below {below!r}", "a percentage over 0, up to 100; " + hint)
    window = parse_duration(str(idle["for"]), "[health] idle for")
    if window < interval:
        raise BadInput(f"[health] idle for = {idle['for']!r} ({window:g}s) is shorter than the sampling interval "
                       f"({interval:g}s): it could never be judged",
                       f"make `for` at least {interval:g}s, or lower [health] interval")
    return {"below": float(below), "for_s": window}


def status_lines(r: dict, now: float) -> list[str]:
    """What status says of a supervised run: its policy, restarts, the next restart, why it
    gave up, and the health actions taken (with their evidence)."""
    pol = r.get("policy")
    if not pol:
        return []
    b = pol.get("backoff") or [0, 0]
    out = [f"  policy: restart {pol.get('restart')}, max {pol.get('max_restarts')}"
           + (f" in {pol['restart_window']:g}s" if pol.get("restart_window") else "")
           + f", backoff {b[0]:g}s..{b[1]:g}s, min uptime {pol.get('min_uptime'):g}s;"
           f" restarts so far: {r.get('restarts', 0)}"]
    if r.get("next_restart_at"):
        out.append(f"  next restart in {max(0.0, r['next_restart_at'] - now):.1f}s (stop cancels it)")
    g = r.get("gave_up")
    if g:
        codes = ", ".join(str(e.get("code") if e.get("code") is not None else e.get("signal"))
                          for e in g.get("exits") or [])
        np = g.get("no_progress")
        if np:
            out.append(f"  gave up: {np.get('no_progress')} attempts in a row without progress (max_no_progress "
                       f"{np.get('max_no_progress')}; best step {np.get('best_step')}, last checkpoint "
                       f"{np.get('last_checkpoint') or 'none'}); exits: {codes}")
        else:
            out.append(f"  gave up after {g.get('restarts')} restarts (max {g.get('max_restarts')}); exits: {codes}")
    out += _progress_lines(r)
    b = r.get("blocked")
    if b and r.get("state") == "blocked" and b.get("by") != "restart":  # restart's own: views/render.py
        out.append(f"  blocked: the next attempt starts once the GPUs are released: {b.get('why')}")
    u = r.get("idle_unjudged")
    if u:
        out.append(f"  idle: not judged: {u.get('why')}; the idle rule cannot fire while its GPUs' "
                   "utilization is unread")
    for a in r.get("actions") or []:
        out.append(f"  health action: {a.get('action')} on {a.get('kind')}"
                   + (f" (line {a['line_no']}: {a.get('line')})" if a.get("line_no") else f" ({a.get('detail')})"))
    return out


def _progress_lines(r: dict) -> list[str]:
    p = r.get("progress")
    if not p:
        return [f"  resumed from {r['resume_from']}"] if r.get("resume_from") else []
    out = [f"  progress: best step {p.get('best_step')}, last checkpoint {p.get('last_checkpoint') or 'none'}"
           + (f", {p.get('no_progress')} of {p['max_no_progress']} attempts in a row without progress"
              if p.get("max_no_progress") else "")]
    if r.get("resume_from"):
        out.append(f"  resumed from {r['resume_from']}")
    for a in (p.get("attempts") or [])[-5:]:
        out.append(f"    attempt {a.get('attempt')}: step {a.get('step')}, checkpoint {a.get('checkpoint') or 'none'}"
                   + ("" if a.get("progressed") else " (no progress)"))
    return out
