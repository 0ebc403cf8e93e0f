"""The verbs. Each sends one request through the target's hop chain and returns the agent's
result, which says what was verified; failures raise a RunwardError subclass."""

from __future__ import annotations

import os
from typing import Callable

from . import transport
from .errors import BadInput, NotVerified, RunwardError
from .targets import Target

DEFAULT_SETTLE = 3.0
DEFAULT_GRACE = 30.0
FANOUT = 16  # hosts queried at once by --all


def _check_env(env: dict | None) -> dict:
    return dict(env or {})


def parse_env(items: list[str] | None) -> dict:
    env = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise BadInput(f"invalid --env entry {item!r}: no '='", "write --env NAME=VALUE")
        env[k] = v
    return env


def start(target: Target, name: str, *, argv: list[str] | None = None, sh: str | None = None,
          cwd: str | None = None, env: dict | None = None, log: str | None = None,
          settle: float = DEFAULT_SETTLE, ready: str | None = None, ready_timeout: float = 600.0,
          replace: bool = False, gpus: list[int] | None = None, stop_signal: str = "TERM",
          grace: float = DEFAULT_GRACE, files: list[str] | None = None,
          hash_files: list[str] | None = None, wait_gpus_free: dict | None = None,
          reuse_env: bool = False) -> dict:
    if not argv and sh is None:
        raise BadInput("no command given", f"runward start {name} -- COMMAND [ARG]..., or --sh 'COMMAND LINE'")
    if settle < 0:
        raise BadInput(f"invalid --settle {settle}", "give a number of seconds >= 0")
    req = {"op": "start", "name": name, "argv": argv, "sh": sh, "cwd": cwd, "env": _check_env(env),
           "log": log, "settle": settle, "ready": ready, "ready_timeout": ready_timeout, "replace": replace,
           "gpus": gpus, "stop_signal": stop_signal, "grace": grace, "files": files or [],
           "hash_files": hash_files or [], "wait_gpus_free": wait_gpus_free,
           "reuse_env": reuse_env}
    return transport.call(target, req)


def stop(target: Target, name: str, *, grace: float | None = None, signal: str | None = None,
         gpu_timeout: float | None = None) -> dict:
    if grace is not None and grace < 0:
        raise BadInput(f"invalid --grace {grace}", "give a number of seconds >= 0")
    res = transport.call(target, {"op": "stop", "name": name, "grace": grace, "signal": signal,
                                  "gpu_timeout": gpu_timeout})
    if not res.get("verified_dead"):
        raise NotVerified(f"{name}: {len(res.get('survivors', []))} process(es) survived the stop",
                          "see each survivor's state; a D-state process is stuck in the kernel (driver, NFS)",
                          result=res)
    return res


def spec(target: Target, name: str) -> dict:
    return transport.call(target, {"op": "spec", "name": name})


def restart(target: Target, name: str, *, overrides: dict | None = None, grace: float | None = None,
            signal: str | None = None, deploy: Callable[[], dict] | None = None) -> dict:
    """stop, verify; deploy, verify; start, verify — a failed step ends the chain and says which."""
    steps: list[dict] = []
    try:
        last = spec(target, name)
    except RunwardError as e:
        e.details.setdefault("failed_step", "read_spec")
        raise
    try:
        steps.append({"step": "stop", "result": stop(target, name, grace=grace, signal=signal)})
    except RunwardError as e:
        e.details["failed_step"] = "stop"
        e.message = f"restart stopped at step 'stop': {e.message} (nothing was started)"
        raise
    if deploy is not None:
        try:
            steps.append({"step": "deploy", "result": deploy()})
        except RunwardError as e:
            e.details["failed_step"] = "deploy"
            e.message = f"restart stopped at step 'deploy': {e.message} (the run is stopped)"
            raise
    kw = {k: v for k, v in (last.get("spec") or {}).items() if v is not None}
    over = dict(overrides or {})
    if over.get("env"):
        kw["env"] = {**kw.get("env", {}), **over.pop("env")}
    kw.update({k: v for k, v in over.items() if v is not None})
    kw.pop("name", None)
    try:
        res = start(target, name, **_start_kwargs(kw))
    except RunwardError as e:
        e.details["failed_step"] = "start"
        e.message = f"restart failed at step 'start': {e.message} (the old attempt was stopped)"
        raise
    steps.append({"step": "start", "result": res})
    return {"name": name, "steps": steps, "attempt": res.get("attempt"), "pid": res.get("pid"),
            "verified": ["stopped_dead", *(["deployed"] if deploy else []), "alive_after_settle"]}


def _start_kwargs(kw: dict) -> dict:
    allowed = {"argv", "sh", "cwd", "env", "log", "settle", "ready", "ready_timeout", "gpus",
               "stop_signal", "grace", "files", "hash_files", "wait_gpus_free", "reuse_env"}
    return {k: v for k, v in kw.items() if k in allowed}


def status(target: Target, names: list[str] | None = None) -> dict:
    return transport.call(target, {"op": "status", "names": names or None})


def fan_out(targets: list[Target], fn: Callable[[Target], dict], limit: int = FANOUT) -> list[dict]:
    """Run fn on every target in parallel (bounded); one failing host never hides the others."""
    def one(t: Target) -> dict:
        try:
            return {"target": t.display(), "ok": True, "result": fn(t)}
        except RunwardError as e:
            return {"target": t.display(), "ok": False, "error": e.to_dict()}
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(limit, len(targets)))) as pool:
        return list(pool.map(one, targets))


def logs(target: Target, name: str, *, lines: int = 20, follow: bool = False,
         on_line: Callable[[dict], None] | None = None, for_s: float | None = None) -> dict:
    if lines < 0:
        raise BadInput(f"invalid -n {lines}", "give a number of lines >= 0")
    return transport.call(target, {"op": "logs", "name": name, "lines": lines, "follow": follow, "for_s": for_s},
                          on_event=on_line)


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
            res["round_trip_s"] = round(t1 - t0, 3)
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
        raise BadInput(f"invalid --max {max_matches}", "give a positive number")
    res = transport.call(target, {"op": "kill", "pattern": pattern, "signal": signal, "grace": grace, "tree": tree,
                                  "yes": yes, "max": max_matches, "caller": _caller()})
    if yes and not res.get("verified_dead"):
        raise NotVerified(f"{len(res.get('survivors', []))} matching process(es) survived", 
                          "see each survivor's state; a D-state process is stuck in the kernel", result=res)
    return res
