"""runward's public Python API: what the CLI's verbs, a future MCP server and users call.

Each function sends one request through the target's hop chain and returns the agent's
result, which says what was verified; failures raise a RunwardError subclass (errors.py).
Names and signatures here are a promise: change them as a library's, not as internals.

    from runward import api
    from runward.targets import parse_target
    res = api.start(parse_target("ssh://gpu1/pct:200"), "train", argv=["python3", "train.py"])
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import transport
from .agent.secrets import holds_masked_password, redact_value
from .errors import BadInput, NotVerified, OperationFailed, RunwardError
from .targets import Target

DEFAULT_SETTLE = 3.0
DEFAULT_GRACE = 30.0
FANOUT = 16  # hosts queried at once by --all


def parse_env(items: list[str] | None) -> dict:
    """--env K=V entries; `--env NAME` (no '=') takes NAME's value from this process's own
    environment, so a secret never has to be typed on a command line (where /proc/PID/cmdline
    and the shell's history keep it)."""
    return read_env(items)[0]


def read_env(items: list[str] | None, files: list[str] | None = None) -> tuple[dict, dict]:
    """(values, sources) of --env-file PATH files (read first) and --env entries (over them).
    sources names each entry whose value came from the CLI's environment ("environment") or
    a file ("file:PATH"): the target stores those names and where they came from, never
    their values, and `restart` reads them again from the same place."""
    values: dict = {}
    sources: dict = {}
    for path in files or []:
        for k, v in read_env_file(path).items():
            values[k], sources[k] = v, "file:" + os.path.abspath(path)
    for item in items or []:
        k, sep, v = item.partition("=")
        if not k or "\0" in item:
            # shown by the rule the target's replies follow: a value typed here is no less secret
            raise BadInput(f"invalid --env entry {k + sep + redact_value(k, v)!r}", "write --env NAME=VALUE, or "
                           "--env NAME to pass NAME from this shell's environment")
        if sep:
            values[k] = v
            sources.pop(k, None)
        elif k in os.environ:
            values[k], sources[k] = os.environ[k], "environment"
            transport.HIDDEN_ENV.add(k)
        else:
            raise BadInput(f"--env {k}: {k} is not set in this environment",
                           f"export {k}=... first, or write --env {k}=VALUE")
    return values, sources


def read_env_file(path: str) -> dict:
    """Docker's --env-file format: KEY=VALUE per line, taken verbatim (no quotes removed, no
    variables expanded); blank lines and lines starting with # are skipped; a leading
    `export ` is allowed; a bare KEY takes its value from this environment."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInput(f"--env-file {path}: {e.strerror}", "give a readable file of KEY=VALUE lines")
    except UnicodeDecodeError:
        raise BadInput(f"--env-file {path}: not UTF-8 text", "give a text file of KEY=VALUE lines")
    out = {}
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("export "):
            text = text[len("export "):].lstrip()
        k, sep, v = text.partition("=")
        k = k.strip()
        if not k or any(c.isspace() for c in k) or "\0" in line:
            raise BadInput(f"--env-file {path}, line {n}: not KEY=VALUE", "write one KEY=VALUE per line")
        if sep:
            out[k] = line.split("=", 1)[1]
        elif k in os.environ:
            out[k] = os.environ[k]
        else:
            raise BadInput(f"--env-file {path}, line {n}: {k} has no value and is not set in this environment",
                           f"write {k}=VALUE")
    return out


def resolve_env_from(env_from: dict | None) -> dict:
    """The values of a stored spec's env_from ({NAME: "environment" | "file:PATH"}), read
    again from the same places, for restart."""
    values = {}
    files: dict = {}
    for k, src in (env_from or {}).items():
        if src == "environment":
            if k not in os.environ:
                raise BadInput(f"{k} was taken from the environment at start, and is not set now",
                               f"export {k}=... and restart again, or give --env {k}=VALUE")
            values[k] = os.environ[k]
            transport.HIDDEN_ENV.add(k)
        elif isinstance(src, str) and src.startswith("file:"):
            path = src[len("file:"):]
            if path not in files:
                files[path] = read_env_file(path)
            if k not in files[path]:
                raise BadInput(f"{k} was read from {path} at start, and that file no longer has it",
                               f"add it back to {path}, or give --env {k}=VALUE")
            values[k] = files[path][k]
    return values


def start(target: Target, name: str, *, argv: list[str] | None = None, sh: str | None = None,
          cwd: str | None = None, env: dict | None = None, log: str | None = None,
          settle: float = DEFAULT_SETTLE, ready: str | None = None, ready_timeout: float = 600.0,
          replace: bool = False, gpus: list[int] | None = None, stop_signal: str = "TERM",
          grace: float = DEFAULT_GRACE, files: list[str] | None = None,
          hash_files: list[str] | None = None, wait_gpus_free: dict | None = None,
          reuse_env: bool = False, env_from: dict | None = None, lock_timeout: float | None = None,
          replace_grace: float | None = None, env_overrides: list[str] | None = None,
          on_event: Callable[[dict], None] | None = None, log_max: int | None = None,
          log_keep: int | None = None, multinode: dict | None = None,
          supervise: dict | None = None, late: Callable[[dict], None] | None = None,
          gate: dict | None = None, stall: dict | None = None, snapshots: dict | None = None) -> dict:
    """Start NAME, verified alive after settle seconds. env_from names the env entries whose
    values must not be stored on the target (taken from the CLI's environment or an env
    file: see read_env); env_overrides names the entries typed as --env K=V (recorded, so
    that `restart --keep-env` knows them from runward.toml's); replace_grace is the grace for
    the attempt --replace stops (default: that attempt's own); log_max (bytes) rotates the log
    by size, keeping log_keep files (default 3; docs/protocol.md, "Log rotation"). on_event
    gets {"started": {"attempt", "pid"}} once the job is launched, before its settle period.
    multinode: this node's part of a multi-node run (multinode.py), kept in its record.
    late(request): completes the request just before it is sent (transport.call's late).
    gate: restart's GPU gate (restartgate.py): the job waits on the target until they are released.
    snapshots: the bounds of the text kept for compare (snapbounds.parse; default agent/snapshots.py's)."""
    if not argv and sh is None:
        raise BadInput("no command given", f"runward start {name} -- COMMAND [ARG]..., or --sh 'COMMAND LINE'")
    if settle < 0:
        raise BadInput(f"invalid --settle {settle}", "give a number of seconds >= 0")
    req = {"op": "start", "name": name, "argv": argv, "sh": sh, "cwd": cwd, "env": dict(env or {}),
           "log": log, "settle": settle, "ready": ready, "ready_timeout": ready_timeout, "replace": replace,
           "gpus": gpus, "stop_signal": stop_signal, "grace": grace, "files": files or [],
           "hash_files": hash_files or [], "wait_gpus_free": wait_gpus_free,
           "reuse_env": reuse_env, "env_from": dict(env_from or {}), "lock_timeout": lock_timeout,
           "replace_grace": replace_grace, "env_overrides": sorted(env_overrides or [])}
    if log_max is not None:  # absent otherwise: an agent of before rotation reads the same request
        req.update(log_max=log_max, log_keep=log_keep)
    if multinode is not None:
        req["multinode"] = multinode
    if supervise:  # the policy the shim keeps (runward/supervision.py, agent/supervise.py)
        req["supervise"] = supervise
    if gate:
        req["gate"] = gate
    if stall:  # {"after", "ratio"}: stall_after and straggler_ratio (agent/stall.py)
        req["stall"] = stall
    if snapshots:
        req["snapshots"] = snapshots
    try:
        return transport.call(target, req, on_event=on_event, late=late)
    except RunwardError as e:
        res = e.result or {}
        if e.kind == "GpusBusy" and res.get("gpus") and not res.get("pids_are_local", True):
            if _name_holders(target, res["gpus"], res.get("pidns"), res.get("home_id")):
                res["gpus_held"] = [_held(g, "holds") for g in res["gpus"] if not g.get("free")]
                e.message = f"GPUs not free after {res.get('timeout_s', 0):g}s: " + "; ".join(res["gpus_held"])
        raise


def stop(target: Target, name: str, *, grace: float | None = None, signal: str | None = None,
         gpu_timeout: float | None = None, lock_timeout: float | None = None,
         on_begun: Callable[[], None] | None = None, checkpoint: dict | None = None,
         gpu_gate: bool = False) -> dict:
    """on_begun() is called once the target's agent has begun the stop: from then on it goes
    to its verified end there, whatever happens to this process (Ctrl-C, a dropped link).
    gpu_gate (restart's stop): a blocked attempt cancelled still has its GPUs checked."""
    if grace is not None and grace < 0:
        raise BadInput(f"invalid --grace {grace}", "give a number of seconds >= 0")

    begun: list[bool] = []

    def on_event(ev: dict) -> None:
        if "stop_begun" in ev:
            begun.append(True)
            if on_begun is not None:
                on_begun()
    req = {"op": "stop", "name": name, "grace": grace, "signal": signal,
           "gpu_timeout": gpu_timeout, "lock_timeout": lock_timeout}
    if gpu_gate:
        req["gpu_gate"] = True
    if checkpoint is not None:  # signal, wait for the checkpoint, then stop (agent/ops/stopckpt.py)
        req["checkpoint"] = checkpoint
    try:
        res = transport.call(target, req, on_event=on_event)
    except RunwardError as e:
        if begun and e.exit_code == 3:  # the link, not the stop: the far agent outlives its caller
            e.message += ("; the stop had begun on the target and goes on there to its verified end "
                          "(it ignores a lost caller), which it records")
            e.hint = f"runward status {name} shows its end once the target is reached again"
            e.details["stop_goes_on"] = True
        raise
    if not res.get("verified_dead"):
        raise NotVerified(f"{name}: {len(res.get('survivors', []))} process(es) survived the stop",
                          "see each survivor's state; a D-state process is stuck in the kernel (driver, NFS)",
                          result=res)
    rel = res.get("gpu_release") or {}
    if rel.get("checked") and not rel.get("verified"):
        if rel.get("gpus") and not rel.get("pids_are_local", True) and _name_holders(
                target, rel["gpus"], rel.get("pidns"), rel.get("home_id")):
            res["gpus_held"] = [_held(g) for g in rel["gpus"] if not g.get("released")]
        held = "; ".join(res.get("gpus_held") or [rel.get("message", "GPU release not verified")])
        raise NotVerified(f"{name}: every process is dead, but {held}"
                          + (f" after {rel['timeout_s']:g}s" if rel.get("timeout_s") is not None else ""),
                          "another job or a leaked child holds the GPU (state D: stuck in the driver); "
                          "`runward gpus` names every holder; raise --gpu-release-timeout if the driver frees memory slowly",
                          result=res)
    return res


def spec(target: Target, name: str) -> dict:
    return transport.call(target, {"op": "spec", "name": name})


def restart(target: Target, name: str, *, overrides: dict | None = None, grace: float | None = None,
            signal: str | None = None, deploy: Callable[[], dict] | None = None,
            lock_timeout: float | None = None, definition: dict | None = None,
            keep_env: bool = False, check: Callable[[dict], dict | None] | None = None,
            began: list[str] | None = None, gpu_timeout: float | None = None,
            checkpoint: dict | None = None) -> dict:
    """stop, verify; deploy, verify; start, verify — a failed step ends the chain and says which.
    checkpoint: the stop's checkpoint first (stop --checkpoint), so the new attempt's
    {last_checkpoint} is the one the old attempt just saved.
    Nothing is stopped until every input is checked: the new attempt's arguments as the
    target's start would check them (check_start), then check(last), which gets the spec
    reply (the last attempt's spec and what deploy recorded, "deployed") and raises to
    refuse the restart, or returns fields for the result (verbs/restart.py: local drift).

    definition: the run as runward.toml defines it now (start's keyword arguments), which the
    new attempt takes instead of the last attempt's spec; the last attempt's --env K=V
    overrides are then kept only with keep_env. An overrides["env"] value of None unsets
    that entry. The result's "changed" says what differs from the last attempt (changes).
    began, when given, gets each step's name as it begins ("stop", "stop:begun" once the
    target's agent took the stop, "deploy", "start"): what a Ctrl-C interrupted.
    Every process verified dead but the GPUs still held after gpu_timeout: the new attempt
    waits on the target and starts by itself once they are released (restartgate.py); the
    result then says blocked, raised as NotVerified (exit 5)."""
    steps: list[dict] = []
    began = [] if began is None else began
    try:
        last = spec(target, name)
    except RunwardError as e:
        e.details.setdefault("failed_step", "read_spec")
        raise
    if (last.get("spec") or {}).get("multinode"):  # one node restarted alone cannot rejoin its ranks
        raise BadInput(f"{name} is one node of a multi-node run: a restart of one node would not rejoin the others",
                       f"runward stop {name}, then runward start {name} (every node: docs/multinode.md)")
    # the start's arguments before anything is stopped: an env_from value that cannot be
    # read again is bad input, and must leave the run running
    kw = _restart_kwargs(last.get("spec") or {}, overrides, definition=definition, keep_env=keep_env)
    check_start(name, kw)
    _check_notify_kept(name, kw)
    noted = check(last) if check is not None else None
    changed = changes(last.get("spec") or {}, kw)
    kw["lock_timeout"] = lock_timeout
    gate = None
    try:
        began.append("stop")
        steps.append({"step": "stop", "result": stop(target, name, grace=grace, signal=signal,
                                                     lock_timeout=lock_timeout, gpu_timeout=gpu_timeout, gpu_gate=True,
                                                     checkpoint=checkpoint, on_begun=lambda: began.append("stop:begun"))})
    except NotVerified as e:
        from . import restartgate
        gate = restartgate.from_stop(e)
        if gate is None:
            e.details["failed_step"] = "stop"
            e.message = f"restart stopped at step 'stop': {e.message} (nothing was started)"
            raise
        steps.append({"step": "stop", "result": e.result})
    except RunwardError as e:
        e.details["failed_step"] = "stop"
        e.message = f"restart stopped at step 'stop': {e.message} (nothing was started)"
        raise
    if deploy is not None:
        try:
            began.append("deploy")
            steps.append({"step": "deploy", "result": deploy()})
        except RunwardError as e:
            e.details["failed_step"] = "deploy"
            e.message = f"restart stopped at step 'deploy': {e.message} (the run is stopped)"
            raise _after_stop(e) from None
    began.append("start")
    try:
        res = start(target, name, gate=gate, **_start_kwargs(kw))
    except RunwardError as e:
        e.details["failed_step"] = "start"
        e.message = f"restart failed at step 'start': {e.message} (the old attempt was stopped)"
        raise _after_stop(e) from None
    steps.append({"step": "start", "result": res})
    if res.get("state") == "blocked":
        from . import restartgate
        raise restartgate.blocked(name, {"name": name, "steps": steps, "attempt": res.get("attempt"),
                                         "state": "blocked", "blocked": res.get("blocked"),
                                         "last_attempt": last.get("attempt"), "changed": changed})
    return {"name": name, "steps": steps, "attempt": res.get("attempt"), "pid": res.get("pid"),
            "spec_from": "runward.toml" if definition is not None else "last attempt",
            "last_attempt": last.get("attempt"), "changed": changed, **(noted or {}),
            "verified": ["stopped_dead", *(["deployed"] if deploy else []), "alive_after_settle"]}


def _after_stop(e: RunwardError) -> RunwardError:
    """A restart's exit 2 says bad input found before anything was stopped (README: the old
    attempt untouched); once the stop is done, a bad input met later (a local file that
    turned unreadable after the checks) is a failed step, exit 1, as a full disk is."""
    if not isinstance(e, BadInput):
        return e
    return OperationFailed(e.message, e.hint, hop=e.hop, details=e.details, result=e.result)


def check_start(name: str, kw: dict) -> None:
    """What the target's start refuses of a request's own values (agent/ops/lifecycle.py's
    _plan, logfiles.rotation), checked here: a restart must refuse them before it stops the
    old attempt, not after. What only the target knows (cwd, the command's path) stays its."""
    where = f"(runward.toml's [runs.{name}] or restart's flags)"
    sh = kw.get("sh")
    if (sh is None and not kw.get("argv")) or (sh is not None and not str(sh).strip()):
        raise BadInput(f"{name}: no command for the new attempt {where}",
                       f"give [runs.{name}] command = [...] or sh = \"...\"")
    settle = kw.get("settle")
    if settle is not None and (isinstance(settle, bool) or not isinstance(settle, (int, float)) or settle < 0):
        raise BadInput(f"{name}: invalid settle {settle!r} {where}", "give a number of seconds >= 0")
    if kw.get("ready"):
        import re
        try:
            re.compile(kw["ready"])
        except (re.error, TypeError) as e:
            raise BadInput(f"{name}: invalid ready regex {kw['ready']!r} {where}: {e}",
                           "use a Python regular expression")
    from . import signals
    if kw.get("stop_signal") is not None and not signals.known(kw["stop_signal"]):
        raise BadInput(f"{name}: unknown stop_signal {kw['stop_signal']!r} {where}", signals.HINT)
    for key, ok, want in (("log_max", lambda v: v >= 1024, "a size of at least 1K"),
                          ("log_keep", lambda v: 1 <= v <= 100, "between 1 and 100 rotated files")):
        v = kw.get(key)
        if v is not None and kw.get("log_max") is not None and (
                isinstance(v, bool) or not isinstance(v, int) or not ok(v)):
            raise BadInput(f"{name}: invalid {key} {v!r} {where}", f"give {want}")


def _check_notify_kept(name: str, kw: dict) -> None:
    """A notify URL's password is kept in no record (the spec shows it as ***): a restart
    from the last spec cannot send it, so it refuses before it stops anything."""
    masked = [t for t in (kw.get("supervise") or {}).get("notify") or [] if holds_masked_password(t)]
    if masked:
        raise BadInput(f"restart {name}: the password of notify {masked[0]} is kept in no record, "
                       "so the last attempt's spec cannot send it (nothing was stopped)",
                       f"put the run and its notify in runward.toml (restart takes them from there), "
                       f"or `runward stop {name}` and start it again with --notify")


def _restart_kwargs(last_spec: dict, overrides: dict | None, *, definition: dict | None = None,
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
    return out


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


def _start_kwargs(kw: dict) -> dict:
    allowed = {"argv", "sh", "cwd", "env", "log", "settle", "ready", "ready_timeout", "gpus",
               "stop_signal", "grace", "files", "hash_files", "wait_gpus_free", "reuse_env", "env_from",
               "env_overrides", "lock_timeout", "log_max", "log_keep", "supervise", "snapshots"}
    return {k: v for k, v in kw.items() if k in allowed}


def parse_size(text: str | int, what: str = "log_max") -> int:
    """Bytes of a size written as 2G, 512M, 64k, 64KiB or 1048576 (powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        n = text
    else:
        import re
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
        if not m:
            raise BadInput(f"invalid {what} {text!r}", "write a size such as 64k, 512M or 2G")
        n = int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))
    if n < 1024:
        raise BadInput(f"invalid {what} {text!r}: below 1K", "write a size such as 64k, 512M or 2G")
    return n


def status(target: Target, names: list[str] | None = None, since_s: float | None = None,
           timeout: float | None = None) -> dict:
    req = {"op": "status", "names": names or None}
    if since_s is not None:
        req["since_s"] = since_s  # only the health facts of the last since_s seconds
    return transport.call(target, req, timeout=timeout)


def fan_out(targets: list[Target], fn: Callable[[Target], dict], limit: int = FANOUT) -> list[dict]:
    """Run fn on every target in parallel (bounded); one failing host never hides the others."""
    def one(t: Target) -> dict:
        try:
            return {"target": t.display(), "ok": True, "result": fn(t)}
        except RunwardError as e:
            return {"target": t.display(), "ok": False, "error": e.to_dict()}
    return parallel(one, targets, limit)


def fan_out_runs(runs: list[tuple[str, Target]], fn: Callable[[str, Target], dict],
                 limit: int = FANOUT) -> list[dict]:
    """fn(name, target) for every (run name, its target) in parallel (bounded), in the
    order given: {"name", "target", "ok", "result"} or {..., "ok": False, "error"} (with the
    error's "result" when it carries one); one failing run never hides the others."""
    def one(item: tuple[str, Target]) -> dict:
        name, t = item
        try:
            return {"name": name, "target": t.display(), "ok": True, "result": fn(name, t)}
        except RunwardError as e:
            return {"name": name, "target": t.display(), "ok": False, "error": e.to_dict(),
                    **({"result": e.result} if e.result is not None else {})}
    return parallel(one, runs, limit)


def parallel(fn: Callable, items: list, limit: int = FANOUT) -> list:
    """[fn(item) for item in items], at most LIMIT at once, in threads. Every item runs to
    its end, through a Ctrl-C too (raised here once all have ended: a start under way is
    seen to its end and can be rolled back); fn's own exception, if any, is raised then.
    Plain threads: concurrent.futures costs every multi-host call some 30 ms of imports."""
    import threading
    out: list = [None] * len(items)
    failed: list[BaseException] = []
    todo = iter(range(len(items)))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                out[i] = fn(items[i])
            except BaseException as e:  # raised again in the caller's thread
                failed.append(e)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, min(limit, len(items))))]
    for t in threads:
        t.start()
    if join(threads):
        raise KeyboardInterrupt
    if failed:
        raise failed[0]
    return out


def join(threads: list) -> bool:
    """Wait for every thread to end, through Ctrl-C; whether one came."""
    interrupted = False
    for t in threads:
        while t.is_alive():
            try:
                t.join()
            except KeyboardInterrupt:
                interrupted = True
    return interrupted


def logs(target: Target, name: str, *, lines: int | None = 20, follow: bool = False,
         on_line: Callable[[dict], None] | None = None, for_s: float | None = None,
         attempt: int | None = None, since_s: float | None = None, grep: str | None = None,
         offset: int | None = None) -> dict:
    """The run's log: the last `lines` lines (None: 20, or with attempt, since_s or grep every
    selected line); attempt: that attempt's section only; since_s: lines written in the last
    since_s seconds (by their timestamps, else their attempt's start); grep: a Python regex
    matched on the target, so only matching lines travel (with follow too); offset: the
    lines after that byte offset (the `offset` a previous call returned), at most `lines`
    (None: 200) complete ones, and the offset to read on from."""
    if lines is not None and lines < 0:
        raise BadInput(f"invalid -n {lines}", "give a number of lines >= 0")
    if grep:
        import re
        try:
            re.compile(grep)
        except re.error as e:
            raise BadInput(f"invalid --grep regex {grep!r}: {e}", "use a Python regular expression")
    req = {"op": "logs", "name": name, "lines": lines, "follow": follow, "for_s": for_s}
    if offset is not None and offset < 0:
        raise BadInput(f"invalid --offset {offset}", "give the offset a previous `logs` call returned (>= 0)")
    req.update({k: v for k, v in (("attempt", attempt), ("since_s", since_s), ("grep", grep), ("offset", offset))
                if v is not None})
    return transport.call(target, req, on_event=on_line)


def ping(target: Target) -> dict:
    return transport.call(target, {"op": "ping"})


def exec_(target: Target, *, argv: list[str] | None = None, sh: str | None = None, cwd: str | None = None,
          env: dict | None = None, timeout: float | None = None) -> dict:
    return transport.call(target, {"op": "exec", "argv": argv, "sh": sh, "cwd": cwd, "env": env or {},
                                   "timeout": timeout})


def doctor(target: Target) -> dict:
    """Each hop in turn: reached or not (with the diagnosis), and what works there."""
    import time
    from .targets import Target as T
    hops = []
    ok = True
    prefixes = [T(target.hops[:i], home=target.home, python=target.python) for i in range(0 if not target.hops else 1, len(target.hops) + 1)]
    for t in prefixes:
        t0 = time.time()
        try:
            res = transport.call(t, {"op": "doctor"})
            t1 = time.time()
            res["clock_skew_s"] = round(res["time"] - (t0 + t1) / 2, 3)
            res["clock_skew_uncertainty_s"] = round((t1 - t0) / 2, 3)  # the far side read its clock somewhere in the round trip
            res["round_trip_s"] = round(t1 - t0, 3)
            route = transport.resident_route(t) if t == target else None
            if route is not None and isinstance(res.get("resident"), dict):
                res["resident"]["route"] = route
            else:
                res.pop("resident", None)  # only an ssh host's read-only calls have one
            hops.append({"hop": str(t.hops[-1]) if t.hops else "local", "target": str(t), "reached": True, "checks": res})
        except RunwardError as e:
            ok = False
            hops.append({"hop": str(t.hops[-1]) if t.hops else "local", "target": str(t), "reached": False,
                         "error": e.to_dict()})
            break
    return {"target": str(target), "ok": ok, "hops": hops}


def _caller() -> dict:
    """This CLI and its ancestors as (pid, start time), with the boot id: when the target is
    this same machine, the agent excludes them (their argv carries the pattern)."""
    out = {"boot_id": None, "procs": []}
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            out["boot_id"] = f.read().strip()
        pid = os.getpid()
        while pid > 1 and len(out["procs"]) < 64:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            out["procs"].append({"pid": pid, "start": int(rest[19])})
            pid = int(rest[1])
    except OSError:
        pass  # not Linux: nothing of ours can be on the target's machine under the same boot id
    return out


def ps(target: Target, pattern: str) -> dict:
    return transport.call(target, {"op": "ps", "pattern": pattern, "caller": _caller()})


def kill(target: Target, pattern: str, *, signal: str = "TERM", grace: float = 10.0, tree: bool = False,
         yes: bool = False, max_matches: int = 32) -> dict:
    if max_matches < 1:
        raise BadInput(f"invalid --max-procs {max_matches}", "give a positive number")
    res = transport.call(target, {"op": "kill", "pattern": pattern, "signal": signal, "grace": grace, "tree": tree,
                                  "yes": yes, "max": max_matches, "caller": _caller()})
    if yes and not res.get("verified_dead"):
        raise NotVerified(f"{len(res.get('survivors', []))} matching process(es) survived", 
                          "see each survivor's state; a D-state process is stuck in the kernel", result=res)
    return res


# --- GPUs -------------------------------------------------------------------------------

def _held(g: dict, verb: str = "still holds") -> str:
    from .agent import boot  # the message the agent prints too, shared on purpose
    return boot.held_message(g, verb)


def gpus(target: Target, *, mapping: str = "auto") -> dict:
    """Every GPU on the target with the processes on it, each mapped to its run. Inside a
    container nvidia-smi's pids are the host's: with a host hop before the container (ssh,
    or this machine for a container hop alone) they are matched through the host's
    /proc/PID/status NSpid line (mapping "nspid"); otherwise, or with mapping="memory",
    the agent's attribution by memory stands (mapping "memory"). Where the pids are the
    target's own the agent reads the run marker directly (mapping "direct")."""
    if mapping not in ("auto", "memory"):
        raise BadInput(f"invalid --map {mapping!r}", "use auto or memory")
    res = transport.call(target, {"op": "gpus"})
    if res.get("pids_are_local") or mapping == "memory":
        return res
    procs = [p for g in res.get("gpus") or () for p in g.get("processes") or ()]
    procs += res.get("unattributed_processes") or []
    if not target.hops or target.host_prefix().hops == target.hops:
        res["mapping_note"] = ("nvidia-smi's pids here are the host's and this target has no host hop to read "
                               "them on: processes are attributed by memory")
        return res
    if procs:
        try:
            _map_host_pids(target, procs, res.get("pidns"), res.get("home_id"))
        except RunwardError as e:
            res["mapping_note"] = (f"could not read the host's /proc through {target.host_prefix()}: "
                                   f"{e.message}; processes are attributed by memory")
            return res
    res["mapping"] = "nspid"
    res["mapping_host"] = str(target.host_prefix())
    return res


def _map_host_pids(target: Target, procs: list[dict], pidns: str | None, home_id: str | None = None) -> None:
    """One call to the container's host: the NSpid line, pid namespace and run marker of each
    host pid; a process is the target's when its pid namespace is the target's."""
    pids = sorted({p["pid"] for p in procs if isinstance(p.get("pid"), int)})
    if not pids:
        return
    info = transport.call(target.host_prefix(), {"op": "nspid", "pids": pids}).get("pids") or {}
    for p in procs:
        if not isinstance(p.get("pid"), int):
            continue
        i = info.get(str(p["pid"]))
        p["host_pid"] = p["pid"]
        p.pop("pid_is_host_pid", None)
        p.pop("candidates", None)
        p.update(run=None, attempt=None, mapped_by="nspid")
        if i is None:
            p.update(pid=None, note="no such pid on the host (it exited since nvidia-smi listed it)")
            continue
        p["state"], p["cmd"] = i.get("state"), i.get("cmd")
        if pidns is None or i.get("pidns") == pidns:
            p["pid"] = (i.get("nspid") or [None])[-1]
            if i.get("run") and home_id and i.get("home_id") and i["home_id"] != home_id:
                p.update(other_home_run=f"{i['run']}.{i['attempt']}",
                         note=f"a run of another runward home in this container (RUNWARD_HOME_ID {i['home_id']})")
            else:
                p["run"], p["attempt"] = i.get("run"), i.get("attempt")
            if pidns is None:
                p["note"] = "the target's pid namespace could not be read: assumed to be the innermost"
        else:
            p.update(pid=None, outside_target=True,
                     note="not in this container: a process of the host or of another container"
                     + (f" (its run marker: {i['run']}.{i['attempt']})" if i.get("run") else ""))


def _name_holders(target: Target, states: list[dict], pidns: str | None, home_id: str | None) -> bool:
    """Best effort: name the holders of a GPU through the host (stop/start answers inside a
    container). False when there is no host hop or it could not be read."""
    if not target.hops or target.host_prefix().hops == target.hops:
        return False
    holders = [h for s in states for h in s.get("holders") or ()]
    try:
        _map_host_pids(target, holders, pidns, home_id)
    except RunwardError:
        return False
    return True


def health_rules(run_cfg: dict | None, *, mins: dict | None = None, maxs: dict | None = None,
                 stall: float | None = None, drop: float | None = None, ratio: float | None = None) -> dict:
    """Rules for the agent's log scan: runward.toml's [runs.NAME.health], then flags. STALL is
    stall_after in seconds (agent/stall.py: the step, or the log's silence where it has none)."""
    h = dict((run_cfg or {}).get("health") or {})
    after = h.get("stall_after", h.get("stall"))  # stall: its old name (stallopts.py checks both)
    if after is not None and not isinstance(after, (int, float)):
        after = parse_duration(str(after), "[health] stall_after")
    rules = {"min": dict(h.get("min") or {}), "max": dict(h.get("max") or {}),
             "stall_after": after, "straggler_ratio": h.get("straggler_ratio"),
             "drop_fraction": h.get("drop_fraction"), "metrics": h.get("metrics")}
    from .baselines import rules as baseline_rules
    rules["baseline"] = baseline_rules(h)  # tok_s = { min_ratio = 0.95, baseline = "best" }
    rules["min"].update(mins or {})
    rules["max"].update(maxs or {})
    if stall is not None:
        rules["stall_after"] = stall
    if ratio is not None:
        rules["straggler_ratio"] = ratio
    if drop is not None:
        rules["drop_fraction"] = drop
    return {k: v for k, v in rules.items() if v not in (None, {}, [])}


def parse_limits(items: list[str] | None, flag: str) -> dict:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        try:
            if not sep or not k:
                raise ValueError
            out[k.strip()] = float(v.replace(",", "").replace("_", ""))
        except ValueError:
            raise BadInput(f"invalid {flag} {item!r}", f"write {flag} METRIC=NUMBER, e.g. {flag} tok_s=14500")
    return out


def health(target: Target, name: str, rules: dict | None = None, points: bool = False) -> dict:
    return transport.call(target, {"op": "health", "name": name, "rules": rules or {}, "points": points})


def history(target: Target, name: str) -> dict:
    """Every attempt's facts and what each changed (docs/history.md), one round trip."""
    return transport.call(target, {"op": "history", "name": name})


def compare(target: Target, name: str, a: int | None = None, b: int | None = None) -> dict:
    """Attempts A and B (default: the last two) side by side (docs/history.md), one round trip."""
    return transport.call(target, {"op": "compare", "name": name, "a": a, "b": b})


def overlay(target: Target, name: str, attempts: list[int]) -> dict:
    """The metric points ([step, throughput, loss]) of each of ATTEMPTS (plot --attempts),
    one round trip; an attempt that does not exist is RunNotFound, one with no metrics BadInput."""
    return transport.call(target, {"op": "overlay", "name": name, "attempts": list(attempts)})


def watch(target: Target, name: str, *, for_s: float, rules: dict | None = None,
          on_points: Callable[[dict], None] | None = None, since_s: float | None = None) -> dict:
    """Judge the window of for_s seconds from now (and, for the rules, since_s seconds
    before it): the rules apply to this call only and are never stored."""
    if for_s <= 0:
        raise BadInput(f"invalid --for {for_s}", "give a number of seconds > 0")
    if since_s is not None and since_s < 0:
        raise BadInput(f"invalid --since {since_s}", "give a duration >= 0, e.g. --since 60s")
    req = {"op": "watch", "name": name, "for_s": for_s, "rules": rules or {}}
    if since_s:
        req["since_s"] = since_s
    return transport.call(target, req, on_event=on_points)


# --- records: rm, prune -------------------------------------------------------------------

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str | None, flag: str) -> float | None:
    """`7d`, `10m`, `1h30m`, `90s`, `2w`, or plain seconds, as seconds (None stays None); else
    BadInput (exit 2)."""
    if text is None:
        return None
    s = str(text).strip().lower()
    try:
        v = float(s) if s and s[-1].isdigit() else _units(s)
    except ValueError:
        v = -1.0
    if not v >= 0:  # negative, or NaN
        raise BadInput(f"invalid {flag} {text!r}", f"write a duration like {flag} 7d, 12h, 10m, 90s or 1h30m")
    return v


def _units(s: str) -> float:
    total, num, seen = 0.0, "", False
    for c in s:
        if c.isdigit() or c == ".":
            num += c
        elif c in _UNITS and num:
            total += float(num) * _UNITS[c]
            num, seen = "", True
        else:
            raise ValueError(s)
    if num or not seen:
        raise ValueError(s)
    return total


def rm(target: Target, name: str, *, logs: bool = False, lock_timeout: float | None = None) -> dict:
    """Remove a stopped run's records (RunAlive, exit 1, while anything of it lives); its logs
    kept (moved out of the run's directory to <home>/removed/) unless logs=True."""
    return transport.call(target, {"op": "rm", "name": name, "logs": logs, "lock_timeout": lock_timeout})


def prune(target: Target, older_than: float, *, dry_run: bool = False, logs: bool = False) -> dict:
    """Remove every stopped run whose last attempt ended more than older_than seconds ago."""
    if older_than < 0:
        raise BadInput(f"invalid --older-than {older_than}", "give a duration >= 0, e.g. 7d")
    return transport.call(target, {"op": "prune", "older_than": older_than, "dry_run": dry_run, "logs": logs})


def stacks(targets: Target | list[Target], name: str, *, native: bool = False, timeout: float = 10.0,
           bring: bool = False) -> dict:
    """The Python stacks of every process of the run on every node (py-spy), grouped by frame
    and named by rank, kept with the attempt on each node (docs/diagnosis.md). `ok` False with
    `error`/`hint` when none could be read (py-spy missing, ptrace denied). bring: a target
    without py-spy gets this machine's (same architecture), pushed and hash-checked."""
    from . import stacksview
    if timeout <= 0:
        raise BadInput(f"invalid --timeout {timeout}", "give seconds > 0")
    return stacksview.capture(targets if isinstance(targets, list) else [targets], name,
                              native=native, timeout=timeout, allow_bring=bring)
