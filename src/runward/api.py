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

from .transport import agentcall as transport, nodeagents
from .agent.core.runspec import DEFAULTS
from .errors import BadInput, NotVerified, RunwardError
from .spec.options import OPTS, START_REQUEST, refuse
from .targets import Target

# Split by concern (each module's docstring says its own); every public name is also api's,
# so the verbs, the tests and users call api.X wherever X lives.
from .gpumap import gpus, held_line, name_holders  # noqa: F401  (gpus: api.gpus)
from .spec.inputs import (health_rules, parse_duration, parse_env, parse_limits, parse_size,  # noqa: F401
                     read_env, read_env_file, resolve_env_from)
from .spec.restartspec import (after_stop, changes, check_notify_kept, check_rotation_kept, check_start, code_changes, engine_changes,  # noqa: F401
                               restart_kwargs, start_kwargs)



def start(target: Target, name: str, *, argv: list[str] | None = None, sh: str | None = None,
          env: dict | None = None, gpus: list[int] | None = None, files: list[str] | None = None,
          hash_files: list[str] | None = None, wait_gpus_free: dict | None = None,
          reuse_env: bool = False, env_from: dict | None = None, env_overrides: list[str] | None = None,
          on_event: Callable[[dict], None] | None = None, log_max: int | None = None,
          log_keep: int | None = None, multinode: dict | None = None,
          supervise: dict | None = None, late: Callable[[dict], None] | None = None,
          gate: dict | None = None, stall: dict | None = None, snapshots: dict | None = None,
          reply_hashes: bool = False, **declared) -> dict:
    """Start NAME, verified alive after its settle period. declared: the options of
    options.START_REQUEST by their declared names (cwd, log, the settle, ready, grace and
    stop signal, replace, ...), each sent as given, else as its default (runspec.DEFAULTS; a
    switch: off; any other: None). env_from names the env entries whose
    values must not be stored on the target (taken from the CLI's environment or an env
    file: see read_env); env_overrides names the entries typed as --env K=V (recorded, so
    that `restart --keep-env` knows them from runward.toml's); replace_grace is the grace for
    the attempt --replace stops (default: that attempt's own); log_max (bytes) rotates the log
    by size, keeping log_keep files (default 3; docs/protocol.md, "Log rotation"). on_event
    gets {"started": {"attempt", "pid"}} once the job is launched, before its settle period.
    multinode: this node's part of a multi-node run (multinode/nodes.py), kept in its record.
    late(request): completes the request just before it is sent (transport.call's late).
    gate: restart's GPU gate (spec/restartgate.py): the job waits on the target until they are released.
    snapshots: the bounds of the text kept for compare (snapbounds.parse; default agent/core/snapshots.py's).
    reply_hashes: the reply carries the files' sha256 the attempt started with ("hashes": restart's "code")."""
    unknown = sorted(set(declared) - set(START_REQUEST))
    if unknown:
        raise TypeError(f"start() got an unexpected keyword argument {unknown[0]!r}")
    if not argv and sh is None:
        raise BadInput("no command given", f"runward start {name} -- COMMAND [ARG]..., or --sh 'COMMAND LINE'")
    req = {"op": "start", "name": name, "argv": argv, "sh": sh, "env": dict(env or {}), "gpus": gpus,
           "files": files or [], "hash_files": hash_files or [], "wait_gpus_free": wait_gpus_free,
           "reuse_env": reuse_env, "env_from": dict(env_from or {}), "env_overrides": sorted(env_overrides or [])}
    for key in START_REQUEST:
        opt, value = OPTS[key], declared.get(key)
        if value is not None and opt.kind == "seconds":  # the agent's clock arithmetic takes no other
            refuse(opt, value)
        req[key] = value if value is not None else DEFAULTS.get(key, False if opt.kind == "flag" else None)
    from .spec.inputs import refuse_undecodable
    refuse_undecodable(argv=argv, sh=sh, cwd=req["cwd"], env=env, log=req["log"], ready=req["ready"])
    if log_max is not None:  # absent otherwise: an agent of before rotation reads the same request
        req.update(log_max=log_max, log_keep=log_keep)
    if multinode is not None:
        req["multinode"] = multinode
    if supervise:  # the policy the shim keeps (runward/spec/supervision.py, agent/supervise/policy.py)
        req["supervise"] = supervise
    if gate:
        req["gate"] = gate
    if stall:  # {"after", "ratio"}: stall_after and straggler_ratio (agent/health/stall.py)
        req["stall"] = stall
    if snapshots:
        req["snapshots"] = snapshots
    if reply_hashes:
        req["reply_hashes"] = True
    try:
        return transport.call(target, req, on_event=on_event, late=late)
    except NotVerified as e:
        if not (req["replace"] and nodeagents.unchecked(target, e.result)):
            raise
        replaced = _replaced_on_nodes(target, name, e)
    except RunwardError as e:
        res = e.result or {}
        if e.kind == "GpusBusy" and res.get("gpus") and not res.get("pids_are_local", True):
            if name_holders(target, res["gpus"], res.get("pidns"), res.get("home_id")):
                res["gpus_held"] = [held_line(g, "holds") for g in res["gpus"] if not g.get("free")]
                e.message = f"GPUs not free after {res.get('timeout_s', 0):g}s: " + "; ".join(res["gpus_held"])
        raise
    res = transport.call(target, req, on_event=on_event, late=late)  # the old attempt is dead on every node now
    res["replaced"] = replaced
    return res


def _replaced_on_nodes(target: Target, name: str, e: NotVerified) -> dict:
    """start --replace of an engine's job with processes on other nodes: the target's agent
    stopped the old attempt where it sees, named the rest unchecked and submitted nothing; the
    agents on those nodes finish that stop (nodeagents.stop), and only a stop verified there
    lets the start be asked again. Not verified: the start is refused, naming what is left."""
    try:
        return nodeagents.stop(target, name, e)
    except RunwardError as err:
        err.message = f"start --replace stopped at the old attempt's stop: {err.message} (nothing was started)"
        err.details["failed_step"] = "stop"
        raise


def _agent_itself_killed(target: Target, e: RunwardError) -> bool:
    """The call failed because its agent was killed (not its link or client): a local agent
    ended by a signal, or the far wrapper's 'the agent was killed by signal N'."""
    import re
    from .transport.diagnosis import KILLED_PAT
    rc = e.details.get("exit_status")
    return bool(re.search(KILLED_PAT, str(e.details.get("stderr_tail") or ""))
                or (target.is_local and isinstance(rc, int) and rc < 0))


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
    except NotVerified as e:
        if not nodeagents.unchecked(target, e.result):
            raise
        res = nodeagents.stop(target, name, e)  # an engine job's processes on other nodes: their agents
    except RunwardError as e:
        if begun and e.exit_code == 3 and _agent_itself_killed(target, e):
            # the agent was the stop: it is gone, with its KILL after the grace and its record
            e.message += ("; it was the stop itself that was killed, after it had begun: it did not reach "
                          "its end and records none (a process that outlived its signal lives on)")
            e.hint = f"`runward status {name}` shows what is alive; `runward stop {name}` again ends it"
            e.details["stop_goes_on"] = False
        elif begun and e.exit_code == 3:  # the link, not the stop: the far agent outlives its caller
            e.message += ("; the stop had begun on the target and goes on there to its verified end "
                          "(it ignores a lost caller), which it records")
            e.hint = f"runward status {name} shows its end once the target is reached again"
            e.details["stop_goes_on"] = True
        raise
    if not res.get("verified_dead"):
        raise NotVerified(f"{name}: {len(res.get('survivors', []))} process(es) survived the stop",
                          "see each survivor's state; a D-state process is stuck in the kernel (driver, NFS)",
                          result=res)
    if res.get("state") == "blocked" and not res.get("restart_cancelled"):
        # a blocked attempt's waiting shim did not end within the agent's bound: it may start yet
        raise NotVerified(f"{name}: {res.get('message') or 'the blocked attempt was not seen to end'}",
                          f"its stop mark stays: it ends at its next poll; `runward status {name}` shows it",
                          result=res)
    rel = res.get("gpu_release") or {}
    if rel.get("checked") and not rel.get("verified"):
        if rel.get("gpus") and not rel.get("pids_are_local", True) and name_holders(
                target, rel["gpus"], rel.get("pidns"), rel.get("home_id")):
            res["gpus_held"] = [held_line(g) for g in rel["gpus"] if not g.get("released")]
        held = "; ".join(res.get("gpus_held") or [rel.get("message", "GPU release not verified")])
        raise NotVerified(f"{name}: every process is dead, but {held}"
                          + (f" after {rel['timeout_s']:g}s" if rel.get("timeout_s") is not None else ""),
                          "another job or a leaked child holds the GPU (state D: stuck in the driver); "
                          "`runward gpus` names every holder; raise --gpu-release-timeout if the driver frees memory slowly",
                          result=res)
    return res


def spec(target: Target, name: str, cwds: list[str] | None = None) -> dict:
    """The last attempt's spec; cwds: working directories the target says are missing there
    ("cwd_missing", with the last spec's own), so a restart refuses one before its stop."""
    return transport.call(target, {"op": "spec", "name": name, "cwds": [c for c in cwds or () if c]})


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
    refuse the restart, or returns fields for the result (operations/restart.py: local drift).

    definition: the run as runward.toml defines it now (start's keyword arguments), which the
    new attempt takes instead of the last attempt's spec; the last attempt's --env K=V
    overrides are then kept only with keep_env. An overrides["env"] value of None unsets
    that entry. The result's "changed" says what differs from the last attempt (changes).
    began, when given, gets each step's name as it begins ("stop", "stop:begun" once the
    target's agent took the stop, "deploy", "start"): what a Ctrl-C interrupted.
    Every process verified dead but the GPUs still held after gpu_timeout: the new attempt
    waits on the target and starts by itself once they are released (spec/restartgate.py); the
    result then says blocked, raised as NotVerified (exit 5)."""
    steps: list[dict] = []
    began = [] if began is None else began
    from .spec.inputs import refuse_undecodable
    refuse_undecodable(cwd=(overrides or {}).get("cwd"))  # named as its flag, before the spec request carries it
    try:
        last = spec(target, name, [(overrides or {}).get("cwd"), (definition or {}).get("cwd")])
    except RunwardError as e:
        e.details.setdefault("failed_step", "read_spec")
        raise
    if (last.get("spec") or {}).get("multinode"):  # one node restarted alone cannot rejoin its ranks
        raise BadInput(f"{name} is one node of a multi-node run: a restart of one node would not rejoin the others",
                       f"runward stop {name}, then runward start {name} (every node: docs/multinode.md)")
    # the start's arguments before anything is stopped: an env_from value that cannot be
    # read again is bad input, and must leave the run running
    kw = restart_kwargs(last.get("spec") or {}, overrides, definition=definition, keep_env=keep_env)
    check_start(name, kw)
    if kw.get("cwd") and kw["cwd"] in (last.get("cwd_missing") or ()):  # the start would refuse it, after the stop
        raise BadInput(f"{name}: working directory does not exist on the target: {kw['cwd']} (nothing was stopped)",
                       "create it, or pass an existing --cwd")
    check_notify_kept(name, kw)
    check_rotation_kept(name, kw, target)
    noted = check(last) if check is not None else None
    changed = changes(last.get("spec") or {}, kw)
    engine = engine_changes(last.get("engine"), target)
    if engine:
        changed["engine"] = engine
    kw["lock_timeout"] = lock_timeout
    gate = None
    try:
        began.append("stop")
        steps.append({"step": "stop", "result": stop(target, name, grace=grace, signal=signal,
                                                     lock_timeout=lock_timeout, gpu_timeout=gpu_timeout, gpu_gate=True,
                                                     checkpoint=checkpoint, on_begun=lambda: began.append("stop:begun"))})
    except NotVerified as e:
        from .spec import restartgate  # here: status, which imports api, never needs it
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
            raise after_stop(e) from None
    began.append("start")
    try:
        res = start(target, name, gate=gate, reply_hashes=True, **start_kwargs(kw))
    except RunwardError as e:
        e.details["failed_step"] = "start"
        e.message = f"restart failed at step 'start': {e.message} (the old attempt was stopped)"
        raise after_stop(e) from None
    code = code_changes(last.get("hashes"), res.pop("hashes", None))
    if code["changed"]:
        changed["code"] = code["changed"]
    steps.append({"step": "start", "result": res})
    if res.get("state") == "blocked":
        from .spec import restartgate
        raise restartgate.blocked(name, {"name": name, "steps": steps, "attempt": res.get("attempt"),
                                         "state": "blocked", "blocked": res.get("blocked"),
                                         "last_attempt": last.get("attempt"), "changed": changed, "code": code})
    return {"name": name, "steps": steps, "attempt": res.get("attempt"), "pid": res.get("pid"),
            "spec_from": "runward.toml" if definition is not None else "last attempt",
            "last_attempt": last.get("attempt"), "changed": changed, "code": code, **(noted or {}),
            "verified": ["stopped_dead", *(["deployed"] if deploy else []), "alive_after_settle"]}


def status(target: Target, names: list[str] | None = None, since_s: float | None = None,
           timeout: float | None = None) -> dict:
    req = {"op": "status", "names": names or None}
    if since_s is not None:
        req["since_s"] = since_s  # only the health facts of the last since_s seconds
    return transport.call(target, req, timeout=timeout)


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
    from .spec.inputs import refuse_undecodable
    refuse_undecodable(argv=argv, sh=sh, cwd=cwd, env=env)
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
    if timeout <= 0:
        raise BadInput(f"invalid --timeout {timeout}", "give seconds > 0")
    return _capture_stacks(targets if isinstance(targets, list) else [targets], name,
                          native=native, timeout=timeout, allow_bring=bring)


def local_py_spy() -> str | None:
    """The py-spy binary the `stacks` extra's wheel installed here (beside this python), or on PATH."""
    import shutil
    import sys
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return here if os.path.isfile(here) else shutil.which("py-spy")


def _bring_py_spy(target, doc: dict, req: dict) -> dict:
    """A target without py-spy: push this machine's (same architecture only), into runward's
    home there (tools/py-spy), sha256-checked by the push and again by the agent before it
    runs it; then capture again. Anything that stops it is said in the answer, not raised."""
    import platform
    from . import files  # a bring's alone: status --json's import budget
    import hashlib
    spy = local_py_spy()
    if spy is None:
        return dict(doc, bring="no py-spy here to bring: pip install 'runward[stacks]' where runward runs")
    if doc.get("machine") != platform.machine():
        return dict(doc, bring=f"not brought: the target is {doc.get('machine')}, this machine's py-spy is "
                               f"{platform.machine()}; install py-spy there")
    dest = doc["home"].rstrip("/") + "/tools/py-spy"
    try:
        files.push(target, [f"{spy}:{dest}"])
    except RunwardError as e:
        return dict(doc, bring=f"push of py-spy to {dest} failed: {e.message}")
    again = transport.call(target, dict(req, py_spy_sha256=hashlib.sha256(open(spy, "rb").read()).hexdigest()))
    again["brought"] = dest
    return again


def _capture_stacks(targets: list, name: str, *, native: bool = False, timeout: float = 10.0,
            allow_bring: bool = False) -> dict:
    """Every node's capture (in parallel), merged: `nodes` (each target's own document, or
    its error), and `groups` / `summary` over every process read, each tagged with its node.
    allow_bring: a node without py-spy gets this machine's (_bring_py_spy)."""
    from concurrent.futures import ThreadPoolExecutor
    from .agent.health.stackgroup import group, summary  # a stacks call's alone: status --json's import budget
    req = {"op": "stacks", "name": name, "native": native, "timeout": timeout}

    def one(t):
        try:
            d = transport.call(t, dict(req))
            if allow_bring and d.get("error") == "py-spy missing":
                d = _bring_py_spy(t, d, req)
            return d
        except RunwardError as e:
            if len(targets) == 1:
                raise
            return {"ok": False, "error": e.to_dict().get("type"), "hint": e.message, "procs": []}

    with ThreadPoolExecutor(max_workers=min(8, len(targets))) as ex:
        docs = list(ex.map(one, targets))
    if len(docs) == 1:
        docs[0]["target"] = str(targets[0])
        return docs[0]
    procs = []
    for i, (t, d) in enumerate(zip(targets, docs)):
        d["target"] = str(t)
        for p in d.get("procs") or ():
            procs.append(dict(p, node=d.get("node", i)))
    out = {"run": name, "nodes": docs, "procs": procs, "ok": any(d.get("ok") for d in docs),
           "took_s": max((d.get("took_s") or 0) for d in docs)}
    bad = [d for d in docs if not d.get("ok")]
    if not out["ok"] and bad:
        out.update(error=bad[0].get("error"), hint=bad[0].get("hint"))
    out["groups"] = group(procs)
    out["summary"] = summary(out) + "".join(
        "; node %s (%s): %s" % (d.get("node", i), d["target"], d.get("error"))
        for i, d in enumerate(docs) if not d.get("ok") and out["ok"])
    return out
