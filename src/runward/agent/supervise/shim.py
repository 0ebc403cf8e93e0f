"""The shim: the agent, started detached (new session) as the parent of the job. It forks
the job into a session of its own, joins it to the run's cgroups, waits for it, and writes
its exit code or signal into the attempt record. It is never in the job's output path: the
job writes straight to its log file, or, for a run rotated by size (log_max), to the pipe of
a logger process of its own (logfiles.py)."""

import os
import sys
import time

from ..core import boot
from . import logfiles
from ..proc import cgroups, faults
from . import peers, policy as supervise
from ..core.procfs import read_proc
from ..core.store import Home, RunStore, open_log, write_all, write_json
from ..proc.terminate import reap_ended, signal
from ..core.wire import AgentFailure, json_dumps, json_loads

_QUIET = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)


def spawn(home, name, attempt, env, notify=None):
    """Start the shim detached (new session): the job's parent, never in its output path.
    notify: the policy's real notify entries where records hold them masked (a URL's
    password), handed on stdin like the env. Returns (its pid, read end of its status pipe)."""
    r, w = os.pipe()
    errlog = os.open(os.path.join(home.run_dir(name), "attempts", "%d.shim.log" % attempt),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    # the run's name and the job's environment go on stdin like every request: a `pkill -f
    # NAME` must not find the shim, one variable holding the whole env would exceed the
    # kernel's 128 KiB per-string limit (execve: E2BIG), and secrets must not sit in the
    # shim's /proc/PID/environ for the job's life
    stdin_r, stdin_w = os.pipe()
    pid = _fork_exec([sys.executable, "-S", "-c", boot.BOOTSTRAP, boot.SHIM_ARG], _shim_env(), (stdin_r, w, errlog))
    for fd in (stdin_r, w, errlog):
        os.close(fd)
    params = json_dumps({"home": home.path, "name": name, "attempt": attempt, "env": env, "notify": notify}).encode()
    try:
        write_all(stdin_w, boot.handoff() + params + b"\n", "the shim's stdin")
    except OSError as e:  # the shim died before it read its parameters: nothing was started
        os.close(r)
        _, status = os.waitpid(pid, 0)
        raise AgentFailure("StartFailed", "the shim exited (%s) before it read its parameters: %s" % (
            _status_text(status), e), "see %s" % os.path.join(home.run_dir(name), "attempts", "%d.shim.log" % attempt))
    finally:
        os.close(stdin_w)
    return pid, r  # never waited for: it outlives us


def _fork_exec(argv, env, fds):
    """Run argv in a new session with fds as its stdin, stdout and stderr and no other
    descriptor; returns its pid. subprocess would do it, but importing it (with locale, re,
    enum, selectors) cost every start ~16 ms of CPU, once per node of a multi-node run. The
    agent has no other thread, so the forked child may run Python until its exec."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        os.chdir("/")  # it lives as long as the job: never the caller's directory (a mount kept busy)
        for i, fd in enumerate(fds):
            # the copy at 0, 1, 2 is inheritable, the original is not; none of fds is below 3
            # (they were opened while the agent's own stdin, stdout and stderr were open)
            os.dup2(fd, i)
        for name in os.listdir("/proc/self/fd"):
            if int(name) > 2:
                try:
                    os.close(int(name))
                except OSError:
                    pass  # the directory's own descriptor, closed by now
        os.execve(argv[0], argv, env)
    finally:
        os._exit(127)


def _status_text(status):
    if os.WIFSIGNALED(status):
        return "signal %d" % os.WTERMSIG(status)
    return "exit %d" % os.WEXITSTATUS(status)


# What the shim's own interpreter and the bootstrap need (RUNWARD_HOME: where the code
# cache is; LD_LIBRARY_PATH: a Python built with a shared libpython outside the default
# paths does not start without it). Never the job's env, never the marker: the shim must
# never be found as a member of the run.
# RUNWARD_FAKE_SMI_STATE: the tests' nvidia-smi stand-in (tests/bin) reads its fake driver
# there; the shim's GPU gate (supervise/gpugate.py) asks nvidia-smi, and a real one ignores it.
# RUNWARD_PEERS_*: the partition tests' shorter windows for the shim's link (supervise/peers.py).
_SHIM_ENV_KEYS = ("PATH", "HOME", "LANG", "RUNWARD_HOME", "LD_LIBRARY_PATH", "RUNWARD_FAULT", "RUNWARD_FAKE_SMI_STATE",
                  "RUNWARD_PEERS_KEEPALIVE", "RUNWARD_PEERS_REJOIN_S")


def _shim_env():
    env = {k: os.environ[k] for k in _SHIM_ENV_KEYS if k in os.environ}
    if "RUNWARD_HOME" in env:  # the shim runs from /: a relative home would be another
        env["RUNWARD_HOME"] = os.path.abspath(env["RUNWARD_HOME"])
    return env


def read_msg(fd, timeout):
    """One JSON line from the shim's status pipe, or None on EOF/timeout."""
    import select
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    return json_loads(data.split(b"\n", 1)[0].decode())


def say(fd, obj):
    if fd is None:
        return  # a restarted attempt: its start was the shim's own, nobody waits on the pipe
    try:
        os.write(fd, (json_dumps(obj) + "\n").encode())
    except OSError:
        pass  # nobody is listening any more: the record is the truth


def main(home_path, name, attempt, env, notify=None):
    """Parent of the job. Detached in its own session by spawn. Forks the job into a new
    session of its own (so stop can signal its process group), joins it to the run's
    cgroups, waits for it, records exit code or signal atomically. env is the job's
    environment, as spawn sent it on stdin (and notify, the policy's real notify entries)."""
    for s in _QUIET:
        signal.signal(s, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    store = RunStore(Home(home_path), name)
    n = int(attempt)
    att = store.attempt(n)
    status_fd = 1
    me = read_proc(os.getpid())
    att["shim"] = {"pid": me.pid, "start": me.start}
    _become_subreaper()
    sup = supervise.Supervisor(store, att, env, _exec_job, devnull, notify)
    if att.get("gate"):  # restart's GPU gate: the job waits until the old attempt's GPUs are released
        from . import gatewait
        if not gatewait.wait(store, n, att, lambda m: say(status_fd, m), sup.notify,
                             lambda fd: setattr(sup, "lock_fd", fd)):
            return  # a stop cancelled it: nothing was started

    def one(n, att, status_fd):
        logger, out_fd = _logger(att)
        if status_fd is not None or logger is not None:
            # the first attempt: the shim's identity before the job; a restart's record has it
            write_json(store.attempt_path(n), att)
        try:
            _supervise(store, n, att, env, devnull, out_fd, status_fd, sup)
        finally:
            if logger is not None:
                logfiles.reap(logger)  # its last lines are in the log before the shim is gone
    # a run with a restart policy: one attempt after another (supervise/policy.py), else just one
    sup.loop(n, att, one, status_fd)
    _wait_adopted(store)


def _wait_adopted(store):
    """The job is over and recorded; orphans of its tree that the shim adopted and that
    still live are the run's (runs.adopted): the shim stays their parent until each has
    ended, so `status` says `stray` and `stop` ends them. Gone to pid 1 with the shim, one
    that cleared its environment and left the session would be found by nothing where there
    is no cgroup (a container, an ordinary user), and `stop` would call the run stopped.
    Each is waited for by its pid (no polling); one adopted meanwhile is seen by the scan
    after. The shim's own helpers stay in its session and are not waited for here.
    While it holds any, its last attempt's record says so (`lingering`): a shim SIGKILLed
    then drops them to pid 1, and runs.blind_spot must say that it cannot see them."""
    from ..core.procfs import scan
    me, sid = os.getpid(), os.getsid(0)
    opened = False
    while True:
        procs = scan()
        kids = [pid for pid in procs.children().get(me, ()) if procs[pid].sid != sid]
        if not kids:
            _mark_lingering(store, procs[me].start, close=True)
            return
        if not opened:  # once: the record may say so already (opened at the job's exit)
            _mark_lingering(store, procs[me].start, close=False)
            opened = True
        for pid in kids:
            while True:
                try:
                    os.waitpid(pid, 0)
                except InterruptedError:
                    continue
                except ChildProcessError:
                    pass
                break


def _adopted_now():
    """Whether the shim is the parent of an orphan of the job's tree now (runs.adopted's
    rule, seen from the shim: a live child out of its session, not a shim's own helper)."""
    from ..core.procfs import protected, scan
    procs = scan()
    prot = protected(procs)
    me, sid = os.getpid(), os.getsid(0)
    return any(procs[pid].sid != sid and not procs[pid].dead and pid not in prot
               for pid in procs.children().get(me, ()))


def _mark_lingering(store, my_start, close):
    """Open (close False) or close the `lingering` mark in the shim's own last attempt's
    record; a newer attempt's record (another shim's) is left alone, and nothing is written
    when there is nothing to change."""
    n, me, now = (store.run() or {}).get("attempt"), os.getpid(), time.time()
    if not n:
        return False

    def mark(att):
        shim, held = att.get("shim") or {}, att.get("lingering")
        if shim.get("pid") != me or shim.get("start") != my_start:
            return False
        if close:
            if not held or held.get("ended"):
                return False
            held["ended"] = now
        elif held and not held.get("ended"):
            return False
        else:
            att["lingering"] = {"since": now}
    try:
        store.update_attempt(n, mark)
    except OSError:
        return False  # a record that cannot be written: status says what it can
    return True


def failed(home_path, name, exc):
    """The shim's own failure (an exception out of main: a health check's, a record it could
    not write), kept in its last attempt's record as `shim_failed` before the traceback goes
    to its log: status and start then say that the shim failed and why, where a shim gone
    without a word is all they could say (as of one killed from outside). A newer attempt's
    record (another shim's) is left alone; a record that cannot be written leaves the log."""
    try:
        store = RunStore(Home(home_path), name)
        n, me = (store.run() or {}).get("attempt"), os.getpid()
        if not n:
            return
        why = {"at": time.time(), "error": ("%s: %s" % (type(exc).__name__, exc))[:500],
               "log": os.path.join(store.dir, "attempts", "%d.shim.log" % n)}

        def mark(att):
            if (att.get("shim") or {}).get("pid") != me:
                return False
            att["shim_failed"] = why
        store.update_attempt(n, mark)
    except Exception:
        pass  # the traceback in the shim's log still says it


def end():
    """After main: the exit is recorded, the logger reaped, the cgroup removed; a `stop`
    waits for this process to end before it answers. With no hook still being sent (a
    notify thread), the interpreter's teardown has nothing left to do but cost that stop
    time: ~10 ms a node on shared cores (bench/multinode.py), so it is skipped. A send
    still under way keeps the ordinary exit, which waits for it (supervise/notify.py)."""
    th = sys.modules.get("threading")
    if th is not None and any(t.is_alive() and not t.daemon for t in th.enumerate() if t is not th.main_thread()):
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(0)


def _logger(att):
    """(the logger's pid, the job's output fd) for a run rotated by size, else (None, None)
    and the job opens its log itself; the logger's identity goes into ATT."""
    if not att.get("log_max"):
        return None, None
    pid, out_fd = logfiles.spawn_logger(att)
    lp = read_proc(pid)
    att["logger"] = {"pid": pid, "start": lp.start if lp else None}
    return pid, out_fd


def _supervise(store, n, att, env, devnull, out_fd, status_fd, sup):
    """Fork the job, record it, wait for it, record its exit."""
    # a restart's job comes from the process forked for it in advance (supervise.Zygote)
    pid, err = sup.from_zygote(att) or _fork_job(att, env, devnull, out_fd)
    if out_fd is not None:
        os.close(out_fd)  # the job holds the pipe now: the logger sees EOF when it is gone
    if err:
        att["error"] = err.decode("utf-8", "replace")
        att["exit"] = None
        write_json(store.attempt_path(n), att)
        sup.spawned()
        say(status_fd, {"error": att["error"]})
        return
    jp = read_proc(pid)
    att["job"] = {"pid": pid, "start": jp.start if jp else None}
    att["started_at"] = time.time()
    write_json(store.attempt_path(n), att)
    faults.point("shim:job-recorded")
    sup.spawned(att)  # a restart held the run lock until now: a stop finds this job
    say(status_fd, {"job": att["job"]})
    link = peers.attach(store, n, att)  # a multi-node run's node: its peers watched (supervise/peers.py)
    ex = sup.wait_exit(pid, n)
    faults.point("shim:exited")
    # without a cgroup, orphans the shim holds past the job's end (a backoff, the last
    # linger) are findable only while it lives: the record says so (runs.blind_spot)
    held = not att.get("cgroups") and _adopted_now()

    def record_exit(a):
        faults.point("shim:recording-exit")  # the record lock held: a racing stop waits here
        a["exit"] = ex
        if held:
            a["lingering"] = {"since": time.time()}
    att = store.update_attempt(n, record_exit)
    say(status_fd, {"exit": ex})
    peers.ended(link, ex, att)
    reap_ended()
    # an empty cgroup is removed now (rmdir fails while an escaped process is still in it,
    # and then `stop` still finds that process there)
    cgroups.remove(att.get("cgroups"))


def _fork_job(att, env, devnull, out_fd=None):
    """Fork and exec the job; (pid, b"") once it runs, (pid, why) if exec failed (the
    child is reaped then). The reason comes through a CLOEXEC pipe: EOF means exec worked.
    out_fd: the job's stdout and stderr (the logger's pipe), else its log."""
    import fcntl
    err_r, err_w = os.pipe()
    fcntl.fcntl(err_w, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        _exec_job(att, env, devnull, err_r, err_w, out_fd)
    os.close(err_w)
    err = b""
    while True:
        chunk = os.read(err_r, 4096)
        if not chunk:
            break
        err += chunk
    os.close(err_r)
    if err:
        os.waitpid(pid, 0)
    return pid, err


def _exec_job(att, env, devnull, err_r, err_w, out_fd=None):
    """In the forked child: its own session, the run's cgroups, cwd, the log as stdout and
    stderr, default signals, then exec. Never returns."""
    try:
        os.close(err_r)
        if not att.get("entered"):  # a zygote did both before it waited (supervise.Zygote)
            os.setsid()
        for cg in () if att.get("entered") else att.get("cgroups") or ():
            try:
                with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            except OSError:
                pass
        os.chdir(att["cwd"])
        # never through a link planted in a directory of others
        lfd = out_fd if out_fd is not None else open_log(att["log"])
        os.dup2(lfd, 1)
        os.dup2(lfd, 2)
        os.dup2(devnull, 0)
        os.closerange(3, err_w)
        os.closerange(err_w + 1, 65536)
        for s in _QUIET:
            signal.signal(s, signal.SIG_DFL)
        supervise.unblock_in_child()
        os.execve(att["exe"], att["argv"], env)
    except BaseException as e:  # exec failed: tell the shim through the CLOEXEC pipe
        try:
            os.write(err_w, ("%s: %s" % (type(e).__name__, e)).encode())
        finally:
            os._exit(127)


def _become_subreaper():
    """Orphans of the job (a double fork's middle, the children of a killed shell) come to
    the shim instead of pid 1, and its wait (supervise.wait_exit) reaps them: in a container run without --init,
    pid 1 (`sleep infinity`) never does, and each would stay a zombie for the container's
    life. prctl needs ctypes, which python3-minimal lacks: there they go to pid 1."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (prctl(2))
    except Exception:
        pass
