"""Supervision on the target: the run's policy (restart with backoff and limits, health
actions, notifications), kept by the shim, so it holds with the CLI dead and the ssh link gone.

The shim runs one attempt after another (Supervisor.loop): after each exit it decides by the policy, waits the
backoff, and forks the next attempt itself, each with its own record and log header. A stop from the CLI always
wins: stop marks stop_requested in the attempt record under the run lock before it signals (ops/stop.py), and
the shim decides to restart only under that same lock, after reading the record again; a stop that comes during
the backoff wakes the shim (SIGUSR1, its identity checked) and ends the supervision. The shim holds the run lock
from that check until the next job's pid is recorded, so a stop that waited for the lock finds the new attempt
and stops it, verified (docs/supervision.md says all of it for users)."""

import os
import time

from ..core import snapshots
from ..proc import cgroups, faults
from ..core.procfs import MARKER, close_all_but, live
from ..core.secrets import holds_masked_password, mask_url_passwords
from ..core.store import file_hashes, open_log, sync_file, write_all, write_json
from ..proc.terminate import signal, signal_name  # _signal's plain ints: signal.py's enums cost every stop ~5 ms
from ..core.wire import bad_input, json_dumps, json_loads

MODES = ("never", "on-failure", "always")
DEFAULTS = {"restart": "never", "max_restarts": 5, "restart_window": 0.0, "backoff": [1.0, 60.0],
            "min_uptime": 10.0, "restart_exit_codes": [], "no_restart_exit_codes": []}
WAKE = signal.SIGUSR1  # stop -> a shim in its backoff: "no next attempt"
LOCK_WAIT_S = 3600.0  # a stop may hold the run lock through a long grace: the shim waits it out
HEALTH_RESTART = "health:restart"  # stop_requested["by"] of a health action's stop that restarts

# --- the policy, checked where the request arrives (start), before anything is written

def check_policy(p):
    """The request's "supervise" table, checked and completed with the defaults; None when
    the run is not supervised (no table): then the shim waits for the job and records its end."""
    if not p:
        return None
    if not isinstance(p, dict):
        raise bad_input("invalid supervise %r" % (p,), "a table of restart, max_restarts, backoff, ...")
    out = dict(DEFAULTS)
    out.update((k, v) for k, v in p.items() if v is not None)
    if out["restart"] not in MODES:
        raise bad_input("invalid restart %r" % (out["restart"],), "restart = \"never\", \"on-failure\" or \"always\"")
    for k in ("max_restarts", "restart_window", "min_uptime") + tuple(
            k for k in ("gpu_release_timeout", "gpu_max_used_mib") if k in out):
        if not isinstance(out[k], (int, float)) or isinstance(out[k], bool) or out[k] < 0:
            raise bad_input("invalid %s %r" % (k, out[k]), "give a number >= 0")
    b = out["backoff"]
    if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(isinstance(x, (int, float)) for x in b)
            and 0 <= b[0] <= b[1]):
        raise bad_input("invalid backoff %r" % (b,), "backoff = \"5s..5m\": first delay, then the cap")
    for k in ("restart_exit_codes", "no_restart_exit_codes"):
        if not isinstance(out[k], list) or not all(isinstance(c, int) and 0 <= c <= 255 for c in out[k]):
            raise bad_input("invalid %s %r" % (k, out[k]), "a list of exit codes 0-255")
    _check_health(out.get("health"))
    if any(out.get(k) is not None for k in ("checkpoint", "checkpoint_marker", "checkpoint_saved",
                                            "max_no_progress", "resume_default")):
        from . import progress
        progress.check(out)
    if not isinstance(out.get("notify") or [], list) or not all(isinstance(t, str) and t.strip()
                                                                for t in out.get("notify") or []):
        raise bad_input("invalid notify %r" % (recorded(out).get("notify"),),
                        "notify = [\"command ARG...\", \"https://hook\"]")
    masked = [t for t in out.get("notify") or [] if holds_masked_password(t)]
    if masked:  # a record's shown form sent back: the real password was never kept here
        raise bad_input("notify %s: its password is *** (as records show it), not the real one" % masked[0],
                        "give the notify URL with its password again (--notify or runward.toml)")
    return out


def recorded(pol):
    """The policy as records keep it: every notify entry with its URLs' passwords masked.
    The shim is handed the real entries on its stdin (notify_secrets), so no file holds a
    password: not the attempt record, not run.json's spec, not the shim's log."""
    if not pol or not pol.get("notify"):
        return pol
    return dict(pol, notify=[mask_url_passwords(t) for t in pol["notify"]])


def notify_secrets(pol):
    """The real notify entries when records show any of them masked, else None."""
    real = (pol or {}).get("notify") or []
    return list(real) if real != (recorded(pol) or {}).get("notify", []) else None


def _check_health(h):
    if not h:
        return
    acts = h.get("actions") or {}
    from .health_actions import action_ok, check_limits
    bad = {k: v for k, v in acts.items() if not action_ok(v)}
    if bad:
        raise bad_input("invalid health action(s) %r" % (bad,),
                        "each action is notify, stop or restart, maybe after stacks, (stacks,restart)")
    check_limits(h.get("rules") or {}, bad_input)
    iv = h.get("interval", 5.0)
    if not isinstance(iv, (int, float)) or not 0 < iv < float("inf"):
        raise bad_input("invalid health interval %r" % (iv,), "give seconds > 0, e.g. interval = 5")
    idle = h.get("idle")
    if idle is not None and not (isinstance(idle, dict) and isinstance(idle.get("below"), (int, float))
                                 and isinstance(idle.get("for_s"), (int, float)) and idle["for_s"] >= iv):
        raise bad_input("invalid health idle %r" % (idle,),
                        "idle = { gpu_util_below = 5, for = \"10m\" }, the window at least the interval (%gs)" % iv)


def exit_code_of(ex):
    """An exit as one number: the code, or 128 + the signal, as a shell says it."""
    if ex.get("code") is not None:
        return ex["code"]
    return 128 + int(ex.get("signum") or 0)


def decide(pol, ex, stop_req, restarts, now, stuck=False):
    """(restart?, why) for an attempt that ended with EX; STUCK: max_no_progress attempts
    in a row gained nothing (supervise/progress.py)."""
    if stop_req and stop_req.get("by") != HEALTH_RESTART:
        return False, "stopped"
    code = exit_code_of(ex)
    if not stop_req:
        if pol["restart"] == "never":
            return False, "policy"
        if code in pol["no_restart_exit_codes"]:
            return False, "no_restart_exit_code"
        if code == 0 and pol["restart"] == "on-failure":
            return False, "succeeded"
        if code != 0 and pol["restart_exit_codes"] and code not in pol["restart_exit_codes"]:
            return False, "not_a_restart_exit_code"
    if stuck:
        return False, "no_progress"
    window = pol["restart_window"]
    recent = [t for t in restarts if not window or t >= now - window]
    if len(recent) >= pol["max_restarts"]:
        return False, "gave_up"
    return True, "health_action" if stop_req else ("exit code %d" % code)


def backoff_delay(pol, streak):
    """The wait before the next attempt: the first delay after an attempt that stayed up
    min_uptime, doubled for each failed start (one that died sooner) in a row, to the cap."""
    first, cap = pol["backoff"]
    return min(cap, first * (2 ** max(0, streak - 1)))


# --- what stop and status ask of a supervised run

def in_backoff(att):
    """The attempt ended and its shim lives on, waiting to start the next one (its backoff,
    or the GPU gate: blocked)."""
    if not (att and att.get("exit") and att.get("shim")):
        return False
    b = att.get("blocked")
    waits = att.get("next_restart_at") or (b and not b.get("released_at"))
    return bool(waits) and live(att["shim"]) is not None


def end_backoff(store, att, by=None):
    """Called by stop under the run lock: the shim of an ended attempt (deciding, or waiting
    in its backoff) is told to start no next attempt: the record first, then the wake-up, as
    for a running job. True if one was. A health action's stop (BY) that finds the job
    already ended leaves the decision to the policy."""
    if (by and by != "cli") or not (att and att.get("supervise") and att.get("shim") and live(att["shim"]) is not None):
        return False
    marked = []

    def mark(fresh):  # the record as it is now: the job may have ended since ATT was read
        # gave_up: a shim lingering as its strays' parent has no next attempt to cancel
        if not fresh.get("exit") or fresh.get("gave_up") or (fresh.get("stop_requested") or {}).get("by") == "cli":
            return False
        fresh["stop_requested"] = {"at": time.time(), "pid": os.getpid(), "by": "cli"}
        marked.append(True)
    store.update_attempt(att["attempt"], mark)
    if not marked:
        return False
    sp = live(att["shim"])
    if sp is not None:
        try:
            os.kill(sp.pid, WAKE)  # the identity was checked (pid and start time) just above
        except ProcessLookupError:
            pass
    return True


def early_exit_note(att):
    """Start's word on an early exit of a run whose shim may start it again."""
    pol = att.get("supervise") or {}
    if pol.get("restart", "never") == "never":
        return ""
    return "; its restart policy (%s) decides the next attempt: see `runward status %s`" % (
        pol["restart"], att.get("run"))


def status_fields(out, att):
    """Supervision's part of a run's status: its policy, restarts, next restart, gave_up."""
    pol = att.get("supervise")
    if not pol:
        return
    out["policy"] = {k: pol.get(k) for k in DEFAULTS}
    for k in ("checkpoint", "max_no_progress"):
        if pol.get(k) is not None:
            out["policy"][k] = pol[k]
    if att.get("progress"):  # the attempts before this one, and this one once it ended
        out["progress"] = att["progress"]
    if att.get("resume_from"):
        out["resume_from"] = att["resume_from"]
    out["restarts"] = (att.get("restart") or {}).get("number", 0)
    if att.get("actions"):
        out["actions"] = att["actions"]
    sr = att.get("stop_requested")
    ended = out["state"] in ("exited", "stray")  # stray: the attempt left processes (listed) in the wait
    if ended and _blocked(att):
        out["state"] = "blocked"
        out["blocked"] = att["blocked"]
    elif ended and in_backoff(att) and (not sr or sr.get("by") == HEALTH_RESTART):
        out["state"] = "restarting"
        out["next_restart_at"] = att["next_restart_at"]
    elif att.get("gave_up"):
        out["state"] = "gave_up"
        out["gave_up"] = att["gave_up"]


def _blocked(att):
    """The next attempt waits for the GPUs (supervise/gpugate.py), and its shim lives on to start it."""
    b, sr = att.get("blocked"), att.get("stop_requested")
    return bool(b and not b.get("released_at") and att.get("shim") and live(att["shim"]) is not None
                and (not sr or sr.get("by") == HEALTH_RESTART))


# --- the shim's side: one attempt after another

class Supervisor(object):
    """Kept by the shim for the run's life. A run without a policy gets one attempt and a
    plain wait."""

    def __init__(self, store, att, env, exec_job=None, devnull=None, notify=None):
        self.store = store
        self.env = env
        self.exec_job, self.devnull = exec_job, devnull
        self.zygote = None
        self.unsynced = []
        self.pol = att.get("supervise")
        if self.pol and notify:  # the real entries, handed on stdin: the record's are masked
            self.pol = dict(self.pol, notify=notify)
        self.lock_fd = None
        self.restarts = []  # when each restart of this shim happened (restart_window counts them)
        self.streak = 0  # failed starts in a row
        self.exits = []  # every attempt's end, kept for gave_up
        self.health = None
        self.progress = None
        self.gate = None  # the GPU gate's facts of the restart under way (supervise/gpugate.py)
        if self.pol and (self.pol.get("checkpoint") or self.pol.get("max_no_progress")):
            from .progress import Tracker
            self.progress = Tracker(store, self.pol, att, env)
        # SIGCHLD (a health tick waits for it with a timeout) and WAKE (stop during the
        # backoff) are taken by sigtimedwait, never by a handler; the job gets them unblocked
        signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGCHLD, WAKE))

    def loop(self, n, att, run_one, status_fd):
        """run_one(n, att, status_fd): the shim's fork, wait and exit record of one attempt."""
        while True:
            if self.pol and (self.pol.get("health") or {}).get("actions") is not None:
                from .health_actions import HealthKeeper
                self.health = HealthKeeper(self.store, n, self.pol["health"], self.notify)
            if self.progress is not None:  # {last_checkpoint} of this attempt
                self.progress.resolve(att, self.env)
            run_one(n, att, status_fd)
            self.spawned()  # an exec that failed leaves the lock held: give it back
            status_fd = None
            nxt = self.after_exit(n) if self.pol else None
            if nxt is None:
                self._drop_zygote()
                return
            n, att = nxt

    def spawned(self, att=None):
        """The new attempt's job is recorded: a stop waiting for the lock may come now; and
        the next attempt's process is forked in advance, while this one runs."""
        for p in self.unsynced:
            sync_file(p)
        self.unsynced = []
        if self.lock_fd is not None:
            self.store.unlock(self.lock_fd)
            self.lock_fd = None
        if att is not None and att.get("job") and self._may_restart() and not att.get("log_max") \
                and self.exec_job is not None:
            self._drop_zygote()
            m = max([att["attempt"]] + self.store.attempts()) + 1
            cgs = cgroups.create(self.store.name, m, att.get("home_id") or "") if att.get("cgroups") else []
            self.zygote = Zygote(m, cgs, att, self.env, self.exec_job, self.devnull)

    def _may_restart(self):
        return bool(self.pol) and (self.pol["restart"] != "never" or bool((self.pol.get("health") or {})
                                                                           .get("actions")))

    def from_zygote(self, att):
        """(pid, exec error) of the job started from the zygote forked for this attempt, or
        None (none was, or it was forked for another attempt number)."""
        z, self.zygote = self.zygote, None
        if z is None:
            return None
        if z.m != att["attempt"] or z.cgroups != att.get("cgroups") or not z.waiting():
            z.drop()
            return None
        return z.go(att["marker"], self.progress.changed(att, self.env) if self.progress else None)

    def _drop_zygote(self):
        if self.zygote is not None:
            self.zygote.drop()
            self.zygote = None

    def wait_exit(self, pid, n):
        """Wait for the job; a run with health actions is judged every interval meanwhile."""
        tick = self.health.interval if self.health else None
        next_tick = time.monotonic() + (tick or 0)
        while True:
            while True:
                try:
                    got, status = os.waitpid(-1, os.WNOHANG if tick else 0)
                except ChildProcessError:  # no child at all: the job was reaped elsewhere
                    if not tick:
                        return {"at": time.time(), "code": None, "signal": None,
                                "note": "the job was reaped elsewhere: its exit status is unknown"}
                    got, status = 0, 0
                except InterruptedError:
                    continue
                if got == pid:
                    return exit_of(status)
                if got == 0:
                    break
            left = min(next_tick - time.monotonic(), 86400.0)  # 1e300 overflowed sigtimedwait: a day at most
            if left > 0 and signal.sigtimedwait([signal.SIGCHLD], left) is not None:
                continue
            next_tick = time.monotonic() + tick
            self.health.tick(n)

    def notify(self, event, n, **details):
        targets = (self.pol or {}).get("notify")
        if targets:
            from . import notify
            notify.send(targets, dict(details, event=event, run=self.store.name, attempt=n,
                                      host=os.uname().nodename, time=time.time()))

    def after_exit(self, n):
        """The next attempt (n, record), or None: the policy says no, a stop came, or
        someone else started a newer attempt. Decided and begun under the run lock."""
        att = self.store.attempt(n) or {}
        ex = att.get("exit")
        if not ex:  # exec failed: the command cannot start; restarting it would change nothing
            self.notify("exited", n, error=att.get("error"))
            return None
        up = ex["at"] - (att.get("started_at") or ex["at"])
        self.streak = 0 if up >= self.pol["min_uptime"] else self.streak + 1
        self.exits.append({"attempt": n, "code": ex.get("code"), "signal": ex.get("signal"),
                           "uptime_s": round(up, 3)})
        if self.progress is not None:
            prog = self.progress.ended(att)
            att = self.store.update_attempt(n, lambda a: a.__setitem__("progress", prog))
        self.notify("exited", n, exit=ex, uptime_s=round(up, 3))
        sr = att.get("stop_requested")
        if sr and sr.get("by") != HEALTH_RESTART:
            # a stop's end is final (no later write removes the mark), so no lock is needed to
            # decide it; and that stop may hold the run lock while it waits for us to end
            return None
        delay = backoff_delay(self.pol, self.streak)
        from .gpugate import left_alive  # the gate: what it left ended (a health stop has), GPUs released
        gated = bool(att.get("gpus")) or (not sr and left_alive(self.store, att))
        self.gate = None
        fd = self.store.lock("supervise", LOCK_WAIT_S)
        try:
            att = self._decide(n, delay)
            if att is not None and not att.get("gave_up") and (delay > 0 or gated):
                # the backoff and the gate are waited without the lock: a stop meanwhile marks
                # and wakes us
                self.store.unlock(fd)
                fd = None
                if delay > 0 and not self._backoff(delay):
                    return None
                if gated:
                    from .gpugate import Gate
                    self.gate = Gate(self.store, self.pol, n, WAKE, self.notify).wait()
                    if self.gate is None:
                        return None
                fd = self.store.lock("supervise", LOCK_WAIT_S)
                att = self._still_ours(n)
            if att is None or att.get("gave_up"):
                return None
            faults.point("supervise:decided")
            new = self._record(att, delay)
            self.lock_fd, fd = fd, None  # held until the job is recorded (spawned)
        finally:
            if fd is not None:
                self.store.unlock(fd)
        self.restarts.append(time.time())
        self.notify("restarted", new["attempt"], previous=n, delay_s=delay, exit=att.get("exit"))
        return new["attempt"], new

    def _still_ours(self, n):
        """The record, read again under the lock: None if a stop marked it (one that is not
        a health action's restart) or someone started a newer attempt meanwhile."""
        att = self.store.attempt(n) or {}
        if (self.store.run() or {}).get("attempt") != n:
            return None
        sr = att.get("stop_requested")
        if sr and sr.get("by") != HEALTH_RESTART:
            return None
        return att

    def _decide(self, n, delay):
        """Under the run lock: the decision, and what status shows of it (next_restart_at
        or gave_up). None when a stop or a newer attempt ends the supervision."""
        if (self.store.run() or {}).get("attempt") != n:
            return None
        att = self.store.attempt(n) or {}
        now = time.time()
        stuck = self.progress is not None and self.progress.stuck()
        ok, why = decide(self.pol, att["exit"], att.get("stop_requested"), self.restarts, now, stuck)
        if not ok:
            if why in ("gave_up", "no_progress"):
                att["gave_up"] = {"at": now, "restarts": len(self.restarts), "exits": self.exits,
                                  "max_restarts": self.pol["max_restarts"], "reason": why}
                if why == "no_progress":  # the numbers: how many attempts, the bar they missed
                    p = self.progress.summary()
                    att["gave_up"]["no_progress"] = {k: p[k] for k in ("no_progress", "max_no_progress",
                                                                       "best_step", "last_checkpoint")}
                write_json(self.store.attempt_path(n), att)
                self.notify("gave_up", n, exits=self.exits, restarts=len(self.restarts),
                            reason=why, no_progress=att["gave_up"].get("no_progress"),
                            attribution=_attribution(self.store, att))
                return att
            return None
        att["restart_reason"] = why
        if delay > 0:  # a restart at once is not worth a write: the next record says it all
            att["next_restart_at"] = now + delay
            write_json(self.store.attempt_path(n), att)
        return att

    def _backoff(self, delay):
        """Wait the delay; False when a stop woke us (it marked the record first)."""
        faults.point("supervise:backoff")
        deadline = time.monotonic() + delay
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if signal.sigtimedwait([WAKE], left) is not None:
                return False

    def _cgroups(self, prev, m):
        """The zygote's, made for attempt m in advance; else made now."""
        if self.zygote is not None and self.zygote.m == m:
            return self.zygote.cgroups
        self._drop_zygote()
        return cgroups.create(self.store.name, m, prev.get("home_id") or "") if prev.get("cgroups") else []

    def _record(self, prev, delay):
        """The next attempt's record and log header, written as start writes them; the
        job's env gets the new attempt's marker."""
        store = self.store
        run = store.run() or {}
        m = max([run.get("attempt", 0)] + store.attempts()) + 1
        att = {k: v for k, v in prev.items() if k not in _PER_ATTEMPT}
        att.update({"attempt": m, "marker": "%s.%d" % (store.name, m), "created_at": time.time(),
                    "started_at": None, "hashes": file_hashes(list(prev.get("hashes") or ())),
                    "cgroups": self._cgroups(prev, m),
                    "restart": {"of": prev["attempt"], "number": len(self.restarts) + 1, "delay_s": delay,
                                "reason": prev.get("restart_reason"), "after_exit": prev.get("exit")}})
        if self.gate is not None:
            att["gpu_gate"] = self.gate
        # the files' text as it is now (a deploy since may have changed it), not prev's; the job's env has every secret
        att["snapshots"] = snapshots.keep(store, att["hashes"], self.env, prev.get("snapshots", {}).get("bounds"), (self.pol or {}).get("notify"))
        self.env[MARKER] = att["marker"]
        header = ("=== runward: %s attempt %d started %s (restart %d of attempt %d, %s): %s ===\n" % (
            store.name, m, time.strftime("%Y-%m-%dT%H:%M:%S%z"), att["restart"]["number"], prev["attempt"],
            prev.get("restart_reason"), mask_url_passwords(att["sh"] if att.get("sh") is not None else " ".join(att["argv"])))).encode()
        lfd = open_log(att["log"])
        try:
            st = os.fstat(lfd)
            att["log_offset"] = st.st_size + len(header)
            att["log_file"] = [st.st_ino, st.st_dev]
            # renamed into place now, made durable once the job runs (spawned): a crash of the
            # machine in between ends the job too, and the boot id says so
            write_json(store.attempt_path(m), att, sync=False)
            write_all(lfd, header, att["log"])
        finally:
            os.close(lfd)
        run["attempt"] = m
        write_json(os.path.join(store.dir, "run.json"), run, sync=False)
        self.unsynced = [os.path.join(store.dir, "run.json")]  # the attempt's: rewritten with its job
        return att


class Zygote(object):
    """The next attempt's process, forked by the shim while the current attempt runs: it
    takes its own session and joins the next attempt's cgroups at once (joining a cgroup
    costs ~10 ms: the kernel's cgroup_threadgroup_rwsem, taken for writing), then waits on a
    pipe. A restart writes the new marker into the pipe and the zygote execs the job; no
    restart (or the shim gone: EOF) and it exits. A fork of the shim, it is protected as
    the shim is (procfs.is_shim) and carries no marker until it execs."""

    def __init__(self, m, cgs, att, env, exec_job, devnull):
        import fcntl
        self.m, self.cgroups = m, cgs
        go_r, self.go_w = os.pipe()
        self.err_r, err_w = os.pipe()
        fcntl.fcntl(err_w, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        self.pid = os.fork()
        if self.pid == 0:
            self._child(go_r, err_w, att, env, exec_job, devnull)
        os.close(go_r)
        os.close(err_w)

    def _child(self, go_r, err_w, att, env, exec_job, devnull):
        try:
            os.close(self.go_w)
            close_all_but((0, 1, 2, go_r, err_w, self.err_r, devnull))
            os.setsid()
            for cg in self.cgroups:
                try:
                    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
                        f.write(str(os.getpid()))
                except OSError:
                    pass
            data = b""
            while not data.endswith(b"\n"):
                chunk = os.read(go_r, 4096)
                if not chunk:
                    os._exit(0)  # no restart, or the shim is gone
                data += chunk
            os.close(go_r)
            marker, _, extra = data.decode().strip().partition("\t")
            env[MARKER] = marker
            att = dict(att, cgroups=self.cgroups, entered=True)
            if extra:
                changed = json_loads(extra)
                env.update(changed["env"])
                att["argv"] = changed["argv"]
        except BaseException:
            os._exit(127)
        exec_job(att, env, devnull, self.err_r, err_w)

    def waiting(self):
        """Still there (not ended, not reaped by the shim's wait loop)."""
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False

    def go(self, marker, changed=None):
        """Exec the job; (pid, b"") once it runs, (pid, why) if exec failed (reaped then).
        CHANGED: this attempt's argv and env entries ({last_checkpoint}), after the marker."""
        extra = b"" if not changed else b"\t" + json_dumps(changed).encode()
        os.write(self.go_w, marker.encode() + extra + b"\n")
        os.close(self.go_w)
        err = b""
        while True:
            chunk = os.read(self.err_r, 4096)
            if not chunk:
                break
            err += chunk
        os.close(self.err_r)
        if err:
            os.waitpid(self.pid, 0)
        return self.pid, err

    def drop(self):
        """No restart: the zygote reads EOF and exits; its cgroups go."""
        os.close(self.go_w)
        os.close(self.err_r)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass  # reaped by the shim's wait loop already
        cgroups.remove(self.cgroups)


# what a next attempt's record does not inherit from the one before
def _attribution(store, att):
    """The last attempt's root cause and cascade for the gave_up notification, or None: a
    log that cannot be read does not hold the notification back."""
    from ..health import attribution
    try:
        return attribution.for_attempt(store, att) if attribution.failed(att) else None
    except (OSError, ValueError):
        return None


_PER_ATTEMPT = ("job", "exit", "error", "stop_requested", "next_restart_at", "restart_reason", "gave_up",
                "actions", "logger", "log_offset", "log_file", "restart", "resume_from", "blocked", "gpu_gate", "gate")


def exit_of(status):
    ex = {"at": time.time()}
    if os.WIFSIGNALED(status):
        ex.update({"code": None, "signal": signal_name(os.WTERMSIG(status)), "signum": os.WTERMSIG(status)})
    else:
        ex.update({"code": os.WEXITSTATUS(status), "signal": None})
    return ex


def unblock_in_child():
    """In the forked job, before exec: the signal mask survives exec (signal(7))."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGCHLD, WAKE))
