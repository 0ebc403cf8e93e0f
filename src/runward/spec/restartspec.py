"""restart's spec (api.py's split, by concern): the last attempt's spec merged with the
overrides and runward.toml's definition, what changed (shown without secrets), and the checks
of the merged start made before anything is stopped (docs/runs.md: restart never stops a run
it cannot restart)."""

from __future__ import annotations

from ..agent.core.runspec import DEFAULTS, SPEC_KEYS
from ..agent.core.secrets import holds_masked_password, mask_url_passwords, redact_value
from ..errors import BadInput, OperationFailed, RunwardError
from .inputs import resolve_env_from
from .options import OPTS, refuse

# the spec's keys compared as values by changes(): every one a restart takes from runward.toml
# ([runs.NAME] settle, grace, ready, gpus, log...; its [health] as supervise and stall), less those
# said in a form of their own (command, cwd, files, env) and what follows from another (hash_files)
OPTION_KEYS = tuple(k for k in SPEC_KEYS if k not in (
    "argv", "sh", "cwd", "env", "env_from", "env_overrides", "files", "hash_files", "multinode"))


def after_stop(e: RunwardError) -> RunwardError:
    """A restart's exit 2 says bad input found before anything was stopped (docs/runs.md: the old
    attempt untouched); once the stop is done, a bad input met later (a local file that
    turned unreadable after the checks) is a failed step, exit 1, as a full disk is."""
    if not isinstance(e, BadInput):
        return e
    return OperationFailed(e.message, e.hint, hop=e.hop, details=e.details, result=e.result)


def check_start(name: str, kw: dict) -> None:
    """What the target's start refuses of a request's own values (agent/ops/start.py's
    plan_of, logfiles.rotation), checked here: a restart must refuse them before it stops the
    old attempt, not after. What only the target knows (cwd, the command's path) stays its."""
    where = f"(runward.toml's [runs.{name}] or restart's flags)"
    from .inputs import refuse_undecodable  # before the old attempt is stopped, not after
    refuse_undecodable(argv=kw.get("argv"), sh=kw.get("sh"), cwd=kw.get("cwd"), env=kw.get("env"),
                       log=kw.get("log"), ready=kw.get("ready"))
    sh = kw.get("sh")
    if (sh is None and not kw.get("argv")) or (sh is not None and not str(sh).strip()):
        raise BadInput(f"{name}: no command for the new attempt {where}",
                       f"give [runs.{name}] command = [...] or sh = \"...\"")
    for key, opt in OPTS.items():  # the declared check of each value the request carries as it is
        if opt.toml is True and kw.get(key) is not None:
            refuse(opt, kw[key], f"{name} {where}: ", toml=True)
    from .inputs import refuse_idle_without_gpus
    refuse_idle_without_gpus(name, kw)
    for key, ok, want in (("log_max", lambda v: v >= 1024, "a size of at least 1K"),
                          ("log_keep", lambda v: 1 <= v <= 100, "between 1 and 100 rotated files")):
        v = kw.get(key)
        if v is not None and kw.get("log_max") is not None and (
                isinstance(v, bool) or not isinstance(v, int) or not ok(v)):
            raise BadInput(f"{name}: invalid {key} {v!r} {where}", f"give {want}")


def check_rotation_kept(name: str, kw: dict, target) -> None:
    """An engine's job has no runward shim, so nothing would rotate its log: the target's
    start refuses log_max (agent/core/launchers.refuse_rotation); a restart refuses it here,
    before it stops anything."""
    engine = getattr(target.engine, "NAME", None)
    if engine and kw.get("log_max") is not None:
        raise BadInput(f"restart {name}: --log-max (runward.toml's log_max, log_keep) on a {engine.capitalize()} run: "
                       f"nothing would rotate its log (the log's rotation is the runward shim's, and a {engine} job "
                       "has none; nothing was stopped)",
                       f"remove log_max and log_keep from [runs.{name}], or restart without --log-max")


def check_notify_kept(name: str, kw: dict) -> None:
    """A notify URL's password is kept in no record (the spec shows it as ***): a restart
    from the last spec cannot send it, so it refuses before it stops anything."""
    masked = [t for t in (kw.get("supervise") or {}).get("notify") or [] if holds_masked_password(t)]
    if masked:
        raise BadInput(f"restart {name}: the password of notify {masked[0]} is kept in no record, "
                       "so the last attempt's spec cannot send it (nothing was stopped)",
                       f"put the run and its notify in runward.toml (restart takes them from there), "
                       f"or `runward stop {name}` and start it again with --notify")


def restart_kwargs(last_spec: dict, overrides: dict | None, *, definition: dict | None = None,
                    keep_env: bool = False) -> dict:
    """The start's keyword arguments for a restart: runward.toml's definition when given, else
    the last spec; the overrides over it. Values the target never stored (env_from: --env
    NAME, --env-file) are read again where the start took them from, for a run of
    runward.toml too (they are where its secrets come from); an entry given now wins, one
    typed as NAME=VALUE is no longer read from elsewhere, and one given as None is unset.
    The spec shows secret values as [secret] (a URL's password as ***): reuse_env makes the
    target use the values it kept instead of those characters."""
    over = dict(overrides or {})
    over_env = over.pop("env", None) or {}
    over_from = over.pop("env_from", None) or {}
    unset = {k for k, v in over_env.items() if v is None}
    over_env = {k: v for k, v in over_env.items() if v is not None}
    last_env = dict(last_spec.get("env") or {})
    typed = set(last_spec.get("env_overrides") or ())
    if definition is None:
        kw = {k: v for k, v in last_spec.items() if v is not None}
        base_env = last_env
    else:
        kw = {k: v for k, v in definition.items() if v is not None}
        if kw.get("cwd") is None and last_spec.get("cwd"):  # runward.toml says none: the last attempt's
            kw["cwd"] = last_spec["cwd"]
        base_env = dict(definition.get("env") or {})
        if not keep_env:
            typed = set()
        elif "env_overrides" not in last_spec:  # an older record: what runward.toml does not say
            typed = {k for k, v in last_env.items() if base_env.get(k) != v}
        base_env.update({k: last_env[k] for k in typed if k in last_env})
    env_from = {k: src for k, src in {**(last_spec.get("env_from") or {}), **over_from}.items()
                if (k in over_from or k not in over_env) and k not in unset}
    again = resolve_env_from({k: src for k, src in env_from.items() if k not in over_env})
    kw["env"] = {k: v for k, v in {**base_env, **again, **over_env}.items() if k not in unset}
    kw["env_from"] = env_from
    kw["env_overrides"] = sorted((typed | {k for k in over_env if k not in over_from}) & set(kw["env"]))
    kw["reuse_env"] = True
    kw.update({k: v for k, v in over.items() if v is not None})
    kw.pop("name", None)
    return kw


def changes(last_spec: dict, kw: dict) -> dict:
    """What a restart changes against the last attempt's spec: env (added, removed, changed;
    values as they may be shown, so a secret's change is not seen), command, cwd, files."""
    out: dict = {}
    old_cmd, new_cmd = _command_text(last_spec), _command_text(kw)
    if old_cmd != new_cmd:
        out["command"] = {"from": old_cmd, "to": new_cmd}
    if (last_spec.get("cwd") or None) != (kw.get("cwd") or None):
        out["cwd"] = {"from": last_spec.get("cwd"), "to": kw.get("cwd")}
    old_files, new_files = list(last_spec.get("files") or []), list(kw.get("files") or [])
    if old_files != new_files:
        out["files"] = {"added": [f for f in new_files if f not in old_files],
                        "removed": [f for f in old_files if f not in new_files]}
    old_env, new_env = _shown_env(last_spec), _shown_env(kw)
    env = {"added": {k: v for k, v in new_env.items() if k not in old_env},
           "removed": sorted(k for k in old_env if k not in new_env),
           "changed": {k: {"from": old_env[k], "to": v} for k, v in new_env.items()
                       if k in old_env and old_env[k] != v}}
    env = {k: v for k, v in env.items() if v}
    if env:
        out["env"] = env
    old_opts, new_opts = _options(last_spec), _options(kw)
    options = {k: {"from": old_opts.get(k), "to": new_opts.get(k)} for k in sorted(set(old_opts) | set(new_opts))
               if _compared(k, old_opts.get(k)) != _compared(k, new_opts.get(k))}
    if options:
        out["options"] = options
    return out


def _compared(key: str, v):
    """A value as changes() compares it: a stop signal by its number, as the target takes it."""
    if key == "stop_signal" and v is not None:
        from .signals import normalized
        return normalized(v)
    return v


def engine_changes(last: dict | None, target) -> dict:
    """The target's engine options (what its scheme read: the target's own words and
    runward.toml's [targets.X] keys) against those the last attempt was submitted with (the
    spec reply's "engine"), each as "NAME.key" {"from", "to"}; none for an older record or
    another launcher (the target's start refuses that)."""
    engine = getattr(target.engine, "NAME", None)
    old = (last or {}).get(engine) if engine else None
    if old is None:
        return {}
    new = target.engine_spec or {}
    return {f"{engine}.{k}": {"from": old.get(k), "to": new.get(k)} for k in sorted(old)
            if k in new and (old.get(k) or None) != (new.get(k) or None)}


def _options(kw: dict) -> dict:
    """The spec's other options as flat dotted keys (`settle`, `stall.after`,
    `supervise.health.rules.stall_after`): an option left out is its default, an empty value
    none, and a notify URL's password masked, as records keep it (so it neither shows nor
    reads as a change)."""
    out: dict = {}

    def put(key, v):
        if isinstance(v, dict):
            for k, sub in v.items():
                put(f"{key}.{k}", sub)
        elif v is not None and v != [] and v != "":
            out[key] = v

    for key in OPTION_KEYS:
        v = kw.get(key)
        v = DEFAULTS.get(key) if v is None else v
        if key == "supervise" and v and v.get("notify"):
            v = dict(v, notify=[mask_url_passwords(t) for t in v["notify"]])
        put(key, v)
    return out


def code_changes(old: dict | None, new: dict | None) -> dict:
    """The files hashed by the last attempt and the new one (the script it runs, the run's
    files) compared by sha256: "changed" {path: {"from", "to"}} (None: no file there, or not
    hashed by that attempt), "unchanged" [path], and "unknown" [path]: a file without a sha256
    at either attempt (missing or unreadable there: a directory, no permission), which no hash
    says is the same; all empty when neither attempt hashed one."""
    old, new = old or {}, new or {}
    paths = sorted(set(old) | set(new))
    return {"changed": {p: {"from": old.get(p), "to": new.get(p)} for p in paths if old.get(p) != new.get(p)},
            "unchanged": [p for p in paths if old.get(p) == new.get(p) and old.get(p)],
            "unknown": [p for p in paths if not old.get(p) and not new.get(p)]}


def _command_text(kw: dict) -> str | None:
    if kw.get("sh") is not None:
        return kw["sh"]
    import shlex
    return shlex.join(kw["argv"]) if kw.get("argv") else None


def _shown_env(kw: dict) -> dict:
    """An env as it may be shown: a secret's value redacted; an env_from entry by its source
    (its value is read again at each start, and never seen here to compare)."""
    env_from = kw.get("env_from") or {}
    shown = {k: redact_value(k, str(v)) for k, v in (kw.get("env") or {}).items() if k not in env_from}
    shown.update({k: f"(from {src})" for k, src in env_from.items()})
    return shown


def start_kwargs(kw: dict) -> dict:
    # what the last attempt kept, less its node's part (a node restarted alone is refused), and
    # what a restart's start says of its own; its stall options are the last attempt's, or
    # runward.toml's [runs.NAME.health] where the definition replaces the spec
    allowed = {*SPEC_KEYS, "reuse_env", "lock_timeout", "snapshots"} - {"multinode"}
    return {k: v for k, v in kw.items() if k in allowed}
