"""start: a run's life on this target begins.

Start means verified alive (watched through a settle period, an early exit reported at once).
Its end is stop.py's (verified dead, proc/terminate.py); what a run is now (status, logs, spec,
ping) is status.py's."""

import os
import time

from ..supervise import logfiles
from ..core import snapshots
from ..proc import cgroups, faults, gpus
from ..supervise import shim, policy as supervise
from ..core.boot import PROTOCOL
from ..core.runspec import GRACE_S, READY_TIMEOUT_S, SETTLE_S, SPEC_KEYS, STOP_SIGNAL
from ..core.procfs import HOME_MARKER, MARKER, boot_id, live, protected, scan
from ..proc.runs import attempt_state, carried_blind_spot, members
from ..core.secrets import is_shown_form, mask_url_passwords, redact_env
from ..core.store import RunStore, file_hashes, open_log, read_json, remove_file, write_all, write_json
from ..proc.terminate import parse_signal, signal_name
from ..core.wire import AgentFailure, bad_input, event
from .stop import mark_stop_requested, stop_locked

LOG_TAIL_LINES = 20


# --- start

def resolve_command(argv, env, cwd):
    prog = argv[0]
    if "/" in prog:
        path = prog if os.path.isabs(prog) else os.path.join(cwd, prog)
        if not os.path.exists(path):
            raise bad_input("command not found: %s (looked at %s)" % (prog, path),
                            "check the path; relative paths are taken from the run's cwd %s" % cwd)
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise bad_input("command is not executable: %s" % path, "chmod +x it, or run it through an interpreter")
        return path
    for d in (env.get("PATH") or os.defpath).split(os.pathsep):
        cand = os.path.join(d or ".", prog)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise bad_input("command not found: %s (not on PATH of the target)" % prog,
                    "install it on the target, give an absolute path, or set PATH with --env")


def build_env(req_env, inherit=True):
    env = dict(os.environ) if inherit else {}
    for k in ("RUNWARD_HOME",):
        env.pop(k, None)
    if inherit and "HOME" not in env:
        login_env(env)
    for k, v in (req_env or {}).items():
        if not isinstance(k, str) or not k or "=" in k or "\0" in k or "\0" in str(v):
            raise bad_input("invalid environment entry %r" % (k,), "use --env NAME=VALUE")
        env[k] = str(v)
    return env


def login_env(env):
    """HOME, USER, LOGNAME and SHELL from this user's passwd entry, where none was given: a
    container hop (lxc, pct) starts the agent in the container's clean environment, and login
    would set these."""
    try:
        import pwd
        pw = pwd.getpwuid(os.getuid())
    except (ImportError, KeyError):
        return
    for k, v in (("HOME", pw.pw_dir), ("USER", pw.pw_name), ("LOGNAME", pw.pw_name), ("SHELL", pw.pw_shell)):
        if v and k not in env:
            env[k] = v


def shell_argv(sh):
    return ["/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh", "-c", sh]


def plan_of(req, home, store):
    """Everything a start needs, checked before anything is written: argv, cwd, env, the
    ready regex, the stop signal, the executable and the log path."""
    argv = req.get("argv") or []
    sh = req.get("sh")
    if sh is not None:
        if not isinstance(sh, str) or not sh.strip():
            raise bad_input("empty shell command", "give --sh 'COMMAND LINE'")
        argv = shell_argv(sh)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise bad_input("no command given", "put the command after --, e.g. runward start NAME -- python train.py")
    # absolute: the shim that execs the job runs from /, not from this agent's directory
    cwd = os.path.abspath(os.path.expanduser(req.get("cwd") or os.path.expanduser("~")))
    if not os.path.isdir(cwd):
        raise bad_input("working directory does not exist on the target: %s" % cwd,
                        "create it, or pass an existing --cwd")
    req["env"] = _request_env(req, home)
    req["env_from"] = _env_from(req)
    env = build_env(req["env"])
    if "PWD" not in req["env"]:  # the agent's was its caller's directory (a shell on the way sets it)
        env["PWD"] = cwd
    plan = {"argv": argv, "sh": sh, "cwd": cwd, "env": env, "settle": float(req.get("settle", SETTLE_S)),
            "ready": req.get("ready"), "ready_re": _ready_re(req.get("ready")),
            "stop_sig": parse_signal(req.get("stop_signal", STOP_SIGNAL)), "exe": resolve_command(argv, env, cwd)}
    log = os.path.expanduser(req.get("log") or os.path.join(store.dir, "log"))
    if not os.path.isabs(log):
        log = os.path.join(cwd, log)
    if os.path.isdir(log) or not os.path.isdir(os.path.dirname(log)) and req.get("log"):
        raise bad_input("log path is not usable: %s" % log, "give a file path whose directory exists")
    plan["log"] = log
    plan["log_max"], plan["log_keep"] = logfiles.rotation(req)
    plan["supervise"] = supervise.check_policy(req.get("supervise"))  # kept by the shim (supervise/policy.py)
    if "{last_checkpoint}" in repr((argv, sh, req["env"])) and not (plan["supervise"] or {}).get("checkpoint"):
        # resolved by the shim before each attempt (supervise/progress.py): from which checkpoints?
        raise bad_input("the command or env uses {last_checkpoint} but the run has no checkpoint glob",
                        "add --checkpoint 'ckpt/step_*' --checkpoint-marker COMPLETE (or runward.toml's "
                        "checkpoint = ...), or remove {last_checkpoint}")
    return plan


def _request_env(req, home):
    """The request's env, whole (an entry left out is not set: restart --env K=). With
    reuse_env, a value sent back as it was shown ([secret], a URL's ***) means the one the last
    attempt's record holds: secret values never leave the target."""
    req_env = dict(req.get("env") or {})
    if req.get("reuse_env") and RunStore(home, req.get("name")).exists():
        kept = (RunStore(home, req.get("name")).latest() or {}).get("env") or {}
        req_env = {k: kept[k] if is_shown_form(k, v, kept.get(k)) else v for k, v in req_env.items()
                   if k in kept or not is_shown_form(k, v, None)}
    return req_env


def _env_from(req):
    """The request's env_from ({NAME: "environment" | "file:PATH"}): the entries whose
    values reach the job but no file here (the CLI reads them again for a restart)."""
    env_from = req.get("env_from") or {}
    if not isinstance(env_from, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in env_from.items()):
        raise bad_input("invalid env_from %r" % (env_from,), "a map of NAME to \"environment\" or \"file:PATH\"")
    return {k: v for k, v in env_from.items() if k in (req.get("env") or {})}


def stored_env(req):
    """The env as records keep it: without the env_from entries' values."""
    env_from = req.get("env_from") or {}
    return {k: v for k, v in (req.get("env") or {}).items() if k not in env_from}


def _ready_re(ready):
    if not ready:
        return None
    import re
    try:
        return re.compile(ready)
    except re.error as e:
        raise bad_input("invalid --ready regex %r: %s" % (ready, e), "use a Python regular expression")


def _replace_old(store, req, procs):
    """Refuse when the run is alive, unless replacing: then stop it (or what its exited job
    left alive), verified (and its GPUs released when it recorded some). Returns the stop's
    result, or None."""
    prev = store.latest()
    if prev is None:
        return None  # the first attempt: nothing of this run's can be alive
    state = attempt_state(prev, procs, boot_id())
    if state not in ("running", "orphaned", "starting"):
        # a shim waiting to restart the last attempt: this start supersedes it
        supervise.end_backoff(store, prev)
        # processes an exited job left ("stray") block a start as a live job does: a new
        # attempt's member search would not see an old attempt's cgroup or adopted orphans,
        # so stop and rm would call the run stopped while they live; --replace ends them
        left = members(store.name, prev, procs, protected(procs))
        if not left:
            return None
        if not req.get("replace"):
            raise AgentFailure("RunAlive", "run %s: attempt %s's job exited, but %d of its processes are still "
                               "alive (pid %s)" % (store.name, prev.get("attempt"), len(left),
                                                    ", ".join(str(p) for p in sorted(left)[:8])),
                               "`runward stop %s` ends them (verified), or start with --replace" % store.name,
                               attempt=prev.get("attempt"), pids=sorted(left))
    from ..supervise import gatewait
    if not req.get("replace") and gatewait.pending(prev):  # a restart's attempt waiting for the GPUs
        raise AgentFailure("AlreadyRunning", "run %s is blocked: attempt %s waits for the GPUs and starts by "
                           "itself once they are released" % (store.name, prev.get("attempt")),
                           "`runward stop %s` cancels it, or start with --replace" % store.name,
                           attempt=prev.get("attempt"), pid=None)
    if not req.get("replace"):
        raise AgentFailure("AlreadyRunning", "run %s is already running (attempt %s, pid %s)" % (
            store.name, prev.get("attempt"), (prev.get("job") or {}).get("pid")),
            "use `runward restart %s`, or start with --replace" % store.name,
            attempt=prev.get("attempt"), pid=(prev.get("job") or {}).get("pid"))
    # the old attempt's shim must not restart it: the replacement wins, as a stop does
    mark_stop_requested(store, prev, procs)
    supervise.end_backoff(store, prev)
    replaced = stop_locked(store, prev, procs, protected(procs),
                           req.get("replace_signal") or prev.get("stop_signal", STOP_SIGNAL),
                           _replace_grace(req, prev), req.get("gpu_timeout"))
    if not replaced["verified_dead"]:
        raise AgentFailure("NotVerified", "could not verify the old attempt dead; not starting",
                           "see the survivors below", stop=replaced)
    if (replaced.get("gpu_release") or {}).get("checked") and not replaced["gpu_release"]["verified"]:
        raise AgentFailure("NotVerified", "the old attempt's GPUs are not released; not starting: %s"
                           % replaced["gpu_release"].get("message"), "see `runward gpus`", result=replaced)
    return replaced


def _replace_grace(req, prev):
    """The old attempt needs its own grace to checkpoint: the new request's --grace is the
    new attempt's, and cuts the old one short only when given as replace_grace."""
    if req.get("replace_grace") is not None:
        return float(req["replace_grace"])
    return float(prev.get("grace", GRACE_S))


def _job_env(plan, req, home, marker):
    env = plan["env"]
    env[MARKER] = marker
    env[HOME_MARKER] = home.id
    if req.get("gpus") is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in req["gpus"])
        # CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi (and so the
        # wait and release checks) by PCI bus id: make --gpus mean the same GPUs to both
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def _hashed_files(req, argv, cwd):
    """The files whose sha256 the attempt records: --hash-files, and the script argv runs."""
    hashed = [p if os.path.isabs(p) else os.path.join(cwd, p) for p in req.get("hash_files") or []]
    script = next((a for a in argv[1:] if not a.startswith("-") and os.path.isfile(os.path.join(cwd, a))), None)
    if script:
        hashed.append(os.path.join(cwd, script))
    return hashed


def _attempt_hashes(store, home, paths):
    """file_hashes of PATHS; a directory among them (a pushed directory: its own hash is None)
    is hashed file by file as its deploy recorded them (deployed.json), through the hash cache
    that push filled, so that `drift` sees a file in it edited or removed on the target while
    the job runs; files the job writes there (checkpoints) are not read."""
    out = file_hashes(paths)
    dirs = [p.rstrip("/") + "/" for p in paths if out.get(p) is None and os.path.isdir(p)]
    if dirs:
        from ..core.hashcache import HashCache
        cache = HashCache(home)
        for k in sorted(read_json(os.path.join(store.dir, "deployed.json")) or {}):
            if any(k.startswith(d) for d in dirs):
                out[k] = cache.sha256_path(k)
        cache.save()
    return out


def _new_attempt(store, req, home, plan):
    """Write the attempt record, the attempt's header in the log, and the run record, last:
    a failure on the way (a full disk, a refused log) leaves run.json as it was, and what
    was made here is removed. Returns (attempt number, offset in the log where its output
    begins)."""
    fresh = not os.path.isdir(store.dir)
    made = {}
    try:
        return _write_attempt(store, req, home, plan, made)
    except BaseException:
        _undo_attempt(store, made, fresh)
        raise


def _undo_attempt(store, made, fresh):
    """Remove what a failed _write_attempt made: its cgroups, its record, a run directory it
    created (nothing else was in it)."""
    cgroups.remove(made.get("cgroups"))
    if fresh:
        from ..core.minimal import rmtree
        rmtree(store.dir)
    elif made.get("n") is not None:
        remove_file(store.attempt_path(made["n"]))


def _write_attempt(store, req, home, plan, made):
    """_new_attempt's writes; made notes the attempt number and cgroups for _undo_attempt."""
    if not os.path.isdir(os.path.dirname(plan["log"])):
        os.makedirs(os.path.dirname(plan["log"]), 0o700)
    for d in (store.dir, os.path.join(store.dir, "attempts")):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
    run = store.run() or {"name": store.name, "attempt": 0, "created": time.time()}
    n = made["n"] = store.next_attempt()
    marker = "%s.%d" % (store.name, n)
    _job_env(plan, req, home, marker)
    att = {
        "v": PROTOCOL, "run": store.name, "attempt": n, "argv": plan["argv"], "exe": plan["exe"], "sh": plan["sh"],
        "cwd": plan["cwd"], "env": stored_env(req), "env_from": req["env_from"], "log": plan["log"], "marker": marker,
        "boot_id": boot_id(), "created_at": time.time(), "started_at": None,
        "stop_signal": signal_name(plan["stop_sig"]), "grace": float(req.get("grace", GRACE_S)),
        "gpus": req.get("gpus"), "hashes": _attempt_hashes(store, home, _hashed_files(req, plan["argv"], plan["cwd"])),
        "files": req.get("files") or [],
        "cgroups": cgroups.create(store.name, n, home.id) if req.get("cgroup", True) else [],
        "home_id": home.id, "settle": plan["settle"], "ready": plan["ready"],
        "log_max": plan["log_max"], "log_keep": plan["log_keep"],
        "multinode": req.get("multinode"),  # this node's rank and its peers (supervise/peers.py)
        "stall": req.get("stall"),  # stall_after, straggler_ratio (health/stall.py)
    }
    if plan.get("blind_spot_before"):  # an escapee of an earlier attempt no search finds (proc/runs.py)
        att["blind_spot_before"] = plan["blind_spot_before"]
    if req.get("gate"):  # restart's GPU gate (supervise/gatewait.py): the shim starts the job once they are released
        from ..supervise import gatewait
        att["gate"] = {k: req["gate"].get(k) for k in ("gpus", "max_used_mib")}
        att["blocked"] = gatewait.blocked_record(req["gate"])
    if plan["supervise"]:
        att["supervise"] = supervise.recorded(plan["supervise"])  # no notify password in a file
    # compare's diffs (docs/history.md); the request's env, not the record's: an env_from
    # secret (--env NAME) is stored nowhere, and must be searched for all the same
    att["snapshots"] = snapshots.keep(store, att["hashes"], req.get("env"), req.get("snapshots"),
                                      (plan["supervise"] or {}).get("notify"))
    made["cgroups"] = att["cgroups"]
    # the command as history shows it: a URL's password in it as *** (the log is read by logs, status)
    header = ("=== runward: %s attempt %d started %s: %s ===\n" % (
        store.name, n, time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        mask_url_passwords(plan["sh"] if plan["sh"] is not None else " ".join(plan["argv"])))).encode()
    lfd = open_log(plan["log"])  # before any record is written: a refused log leaves nothing
    try:
        st = os.fstat(lfd)
        att["log_offset"] = st.st_size + len(header)  # where this attempt's output begins
        att["log_file"] = [st.st_ino, st.st_dev]  # and in which file, should it be rotated
        write_json(store.attempt_path(n), att)
        write_all(lfd, header, plan["log"])
    finally:
        os.close(lfd)
    run.update({"attempt": n, "spec": dict({k: req.get(k) for k in SPEC_KEYS}, env=stored_env(req),
                                           supervise=supervise.recorded(req.get("supervise")))})
    write_json(os.path.join(store.dir, "run.json"), run)
    return n, logfiles.end_of(plan["log"])  # where its output begins, as logfiles.read_on follows it


def start(req, home):
    store = RunStore(home, req.get("name"))
    try:
        return _start(req, home, store)
    except AgentFailure as e:
        if e.type in ("BadInput", "ExitedEarly"):  # a missing cwd, script or module: the files?
            _point_to_deploy(e, req, store)
        raise


def _point_to_deploy(e, req, store):
    """A start that failed while the run's files (runward.toml's `files`) are not on this
    target says so, and names `runward deploy`: the cwd, the script the job opens, may be
    missing only because nothing was ever sent here."""
    dep = read_json(os.path.join(store.dir, "deployed.json")) or {}
    missing = []
    for spec in req.get("files") or []:
        remote = os.path.expanduser(spec.split(":", 1)[1]) if ":" in spec else None
        if remote and not os.path.isabs(remote):
            remote = os.path.join(os.path.expanduser("~"), remote)  # where push puts it (ops/sync.py)
        if remote and not os.path.exists(remote):
            missing.append(remote)
    if not missing:
        return
    never = not any(k == m or k.startswith(m.rstrip("/") + "/") for k in dep for m in missing)
    e.message += "; %s not on this target (%s)" % (
        ", ".join(missing), "runward never deployed them here" if never else "deleted since the last deploy")
    e.hint = "runward deploy %s sends the run's files (runward.toml's files = [...]), then start it again" % (
        store.name)


def _start(req, home, store):
    plan = plan_of(req, home, store)
    fd = store.lock("start", req.get("lock_timeout"))
    try:
        procs = scan()
        # read before the stop below, which ends what the old attempt's search can see
        plan["blind_spot_before"] = carried_blind_spot(store.latest(), procs)
        replaced = _replace_old(store, req, procs)
        gpu_wait = None
        if req.get("wait_gpus_free") and req.get("gpus") and not req.get("gate"):  # gated: the shim waits
            store.note_gpu_wait(fd, req["gpus"], gpus.wait_timeout(req["wait_gpus_free"]))
            # a stop that comes while we wait for GPUs leaves a cancel request: checked each poll
            gpu_wait = gpus.wait_free(req["gpus"], req["wait_gpus_free"], home, store.check_cancel)
        n, log_from = _new_attempt(store, req, home, plan)
        faults.point("start:recorded")
        _, pipe = shim.spawn(home, store.name, n, plan["env"], supervise.notify_secrets(plan["supervise"]))
        msg = shim.read_msg(pipe, 30.0) or _job_on_record(store, n)
        if msg is None or "error" in msg:
            err = (msg or {}).get("error") or "the shim did not report the job started"
            raise AgentFailure("StartFailed", "could not start %s: %s" % (store.name, err),
                               "check the command and its cwd on the target", attempt=n)
        if "blocked" in msg:  # restart's GPU gate: the shim waits for them, and starts the job by itself
            res = _blocked_reply(store, n, msg["blocked"], replaced)
            if req.get("reply_hashes"):
                res["hashes"] = (store.attempt(n) or {}).get("hashes") or {}
            return res
        job = msg["job"]
        event({"started": {"attempt": n, "pid": job["pid"]}})  # an interrupted CLI can say what runs
        faults.point("start:spawned")
    finally:
        store.unlock(fd)
    res = watch_settle(store, n, job, pipe, plan["log"], log_from, plan["settle"], plan["ready_re"],
                       float(req.get("ready_timeout", READY_TIMEOUT_S)), replaced)
    if gpu_wait is not None:
        res["gpu_wait"] = gpu_wait
    if req.get("reply_hashes"):  # restart: the files' hashes this attempt started with ("code")
        res["hashes"] = (store.attempt(n) or {}).get("hashes") or {}
    faults.point("start:settled")
    return res


def _blocked_reply(store, n, blocked, replaced):
    """The start's answer when its shim waits for the GPUs: what is verified is the waiter."""
    att = store.attempt(n) or {}
    return {"name": store.name, "attempt": n, "state": "blocked", "blocked": blocked, "replaced": replaced,
            "alive_after_settle": False, "log": att.get("log"), "gpus": att.get("gpus"),
            "shim": att.get("shim"), "verified": ["waiter_alive"]}


def _job_on_record(store, n):
    """No word from the shim (its pipe closed, or 30 s of silence): a job it recorded before
    it went is still a job, {"job": ...}, and the settle watch says what became of it (an
    orphan, or both gone), never "did not start". None when no job was recorded."""
    job = (store.attempt(n) or {}).get("job")
    return {"job": job} if job else None


def _watch(pipe, log, log_from, settle, ready_re, ready_timeout):
    """Until the settle period is over (and the ready line seen, when asked), or the shim
    says the job ended, or its pipe closes without a word (the shim died: {"eof": True}).
    Returns (that message or None, the ready line or None)."""
    import select
    t0 = time.monotonic()
    ready_line = None
    ready_deadline = t0 + ready_timeout if ready_re else None
    read_pos, pending = log_from, b""
    while True:
        now = time.monotonic()
        settle_left = settle - (now - t0)
        if settle_left <= 0 and (ready_re is None or ready_line is not None):
            return None, ready_line
        if ready_re is not None and ready_line is None and now >= ready_deadline:
            return None, ready_line
        wait = settle_left if ready_re is None else min(0.05, max(settle_left, 0.05))
        r, _, _ = select.select([pipe], [], [], max(0.0, wait))
        if r:
            return shim.read_msg(pipe, 5.0) or {"eof": True}, ready_line
        if ready_re is not None and ready_line is None:
            # no inotify in the stdlib: read what the log gained every 50 ms
            chunk, read_pos = logfiles.read_on(log, read_pos)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            ready_line = next((s for s in (ln.decode("utf-8", "replace") for ln in lines) if ready_re.search(s)),
                              None)


def watch_settle(store, n, job, pipe, log, log_from, settle, ready_re, ready_timeout, replaced):
    """Start means verified alive: watch the job for the settle period. An early exit is
    reported the moment it happens (the shim writes it to our pipe), not after the settle."""
    t0 = time.monotonic()
    exit_msg, ready_line = _watch(pipe, log, log_from, settle, ready_re, ready_timeout)
    os.close(pipe)
    att = store.attempt(n)
    res = {"name": store.name, "attempt": n, "pid": job["pid"], "start_time": job["start"],
           "log": log, "first_lines": logfiles.first_lines(log, log_from, 10), "settle_s": settle, "replaced": replaced,
           "waited_s": round(time.monotonic() - t0, 3), "gpus": att.get("gpus"),
           "env": redact_env(att.get("env")), "env_from": att.get("env_from") or {}, "cgroups": att.get("cgroups")}
    if exit_msg is not None:
        ex = (store.attempt(n) or {}).get("exit") or exit_msg.get("exit") or {}
        if not ex and exit_msg.get("eof"):
            _shim_died(store, n, job, res)  # raises: an orphan, or both gone; never an early exit
        res.update({"alive_after_settle": False, "exit": ex, "last_lines": logfiles.tail(log, LOG_TAIL_LINES)})
        if att.get("stop_requested"):  # not an early exit: `runward stop` ended it (stop marks first)
            raise AgentFailure("Cancelled", "start of %s cancelled: stopped by `runward stop` during the settle "
                               "period (%s)" % (store.name, describe_exit(ex)), result=res)
        _children_run_on(store, n, job, ex, res, t0 + settle)  # raises when the launcher left its job running
        raise AgentFailure("ExitedEarly", "%s exited during the settle period (%s)%s" % (
            store.name, describe_exit(ex), supervise.early_exit_note(att)),
            "see the last log lines; `runward logs %s`" % store.name, result=res)
    if live(job) is None:
        res.update({"alive_after_settle": False, "last_lines": logfiles.tail(log, LOG_TAIL_LINES)})
        raise AgentFailure("ExitedEarly", "%s is gone after the settle period%s" % (
            store.name, supervise.early_exit_note(att)), result=res)
    shim_ident = att.get("shim")
    if shim_ident and live(shim_ident) is None and not (store.attempt(n) or {}).get("exit"):
        _shim_died(store, n, job, res)  # it died as the settle ended: still an orphan, said so
    res["alive_after_settle"] = True
    res["verified"] = ["alive_after_settle"]
    if ready_re is not None:
        if ready_line is None:
            res["ready"] = False
            raise AgentFailure("NotVerified", "%s is alive but printed no line matching --ready within %ss" % (
                store.name, ready_timeout), "raise --ready-timeout or check the regex", result=res)
        res["ready"] = True
        res["ready_line"] = ready_line
        res["verified"].append("ready_line")
    return res


def _left_behind(store, n, job):
    """The run's live processes other than the job itself: what a job that ended left."""
    procs = scan()
    found = members(store.name, store.attempt(n) or {}, procs, protected(procs))
    return [p for pid, p in sorted(found.items()) if pid != job["pid"]]


def _children_run_on(store, n, job, ex, res, until):
    """The command exited but the processes it started run on (`nohup python3 train.py &`, a
    run.sh that backgrounds the job): a launcher, not an early exit of the job. What it left is
    watched to the end of the settle period; all gone by then, it is an early exit as any
    (returns); alive, the start says so and names them (NotVerified, exit 5: they run, and are
    the run's, but no job of theirs is watched: its exit would never be recorded)."""
    left = _left_behind(store, n, job)
    # under a restart policy the shim ends what an attempt left before it makes the next, whose
    # launcher backgrounds again: a moment with none alive (the shim may have ended this
    # attempt's before this first look) is not the end, the settle's end is
    pol = (store.attempt(n) or {}).get("supervise")
    policy = bool(pol) and supervise.decide(pol, ex or {}, None, [], time.time())[0]
    while (left or policy) and time.monotonic() < until:
        time.sleep(min(0.1, max(0.0, until - time.monotonic())))
        left = _left_behind(store, n, job)
    if not left:
        return
    later = (store.run() or {}).get("attempt", n)
    res.pop("exit", None)  # the launcher's, not the job's: the job is what runs on
    res.update({"state": "stray", "launcher_exit": ex, "children": [p.describe() for p in left]})
    raise AgentFailure("NotVerified", "%s: the launcher (pid %d) exited during the settle period (%s), and %d "
                       "process(es) %s run on: %s; they are the run's (status: stray), but no job of "
                       "theirs is watched, nor its exit recorded" % (
                           store.name, job["pid"], describe_exit(ex), len(left), "it started" if later == n else
                           "that it and the attempts its restart policy made since (to %d) started" % later,
                           ", ".join("pid %d %s" % (d["pid"], d["cmd"]) for d in res["children"])),
                       "exec the job instead of backgrounding it (--sh 'exec python3 train.py', no & or nohup; in "
                       "run.sh: exec python3 train.py), then `runward start %s --replace`; or keep them as they "
                       "are: `runward status %s` lists them, `runward stop %s` ends them" % (
                           (store.name,) * 3), result=res)


def _shim_died(store, n, job, res):
    """The shim's pipe closed with no exit message and no exit in the record: the shim died.
    A job still alive is an orphan (done, not verified: nobody will record its exit); a job
    gone too ended we cannot tell how."""
    res["last_lines"] = logfiles.tail(res["log"], LOG_TAIL_LINES)
    shim_log = os.path.join(store.dir, "attempts", "%d.shim.log" % n)
    failed = (store.attempt(n) or {}).get("shim_failed")
    if failed:
        _shim_failed(store, job, res, failed)
    if live(job) is not None:
        res["state"] = "orphaned"
        raise AgentFailure("Orphaned", "%s: the shim died during the settle period; the job lives unsupervised "
                           "(orphaned): its exit will not be recorded; `runward stop %s` still stops it"
                           % (store.name, store.name), "the shim's own log: %s" % shim_log, result=res)
    res.update({"state": "lost", "alive_after_settle": False})
    raise AgentFailure("ExitedEarly", "%s: the shim and the job are gone; exit status unknown" % store.name,
                       "the shim's own log: %s" % shim_log, result=res)


def _shim_failed(store, job, res, failed):
    """The shim recorded its own failure during the settle period: the start failed (the
    job was to be supervised, and nothing supervises it), said with the shim's error. A job
    still alive is stopped by `runward stop`, as the hint says."""
    alive = live(job) is not None
    res.update({"state": "orphaned" if alive else "lost", "alive_after_settle": False, "shim_failed": failed})
    raise AgentFailure("ShimFailed", "%s: the shim failed during the settle period (%s); %s" % (
        store.name, failed.get("error"), "the job lives unsupervised: `runward stop %s` stops it" % store.name
        if alive else "the job is gone without an exit record"),
        "the shim's traceback: %s" % failed.get("log"), result=res)


def describe_exit(ex):
    if not ex:
        return "exit status unknown"
    if ex.get("signal"):
        return "killed by %s" % ex["signal"]
    return "exit code %s" % ex.get("code")
