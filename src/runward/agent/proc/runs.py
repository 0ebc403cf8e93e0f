"""What is true of a run now, from its records and /proc: its live processes, the state of
an attempt, its tree's size, and the files that changed since it started."""

import os

from . import cgroups
from ..core.procfs import CLK_TCK, ProcTable, age, alive_in, boot_id, boot_time, descendants, pss, read_proc
from ..core.store import tail_lines


def members(name, att, procs, prot):
    """Every live process of a run: the job, its session and group, descendants, every
    process carrying the marker (any attempt of this run), members of its cgroups, and
    what its shim adopted (adopted)."""
    if not isinstance(procs, ProcTable):
        procs = ProcTable(procs)
    found = {}
    for pid in adopted(att, procs):
        if pid not in prot:  # the logger, the zygote: the shim's, not the job's
            found[pid] = procs[pid]
    hid = att.get("home_id") if att else None
    for pid, phid in procs.markers().get(name, ()):
        # a record or a process without a home id (an older runward's) matches on the name alone
        if pid not in prot and (hid is None or phid is None or phid == hid):
            found[pid] = procs[pid]
    for pid in cgroups.pids(cgroups.run_paths(att.get("cgroups")) if att else ()):
        p = procs.get(pid)
        if p is not None:
            found[pid] = p
    sess = job_session(att, procs)
    if sess and not _ended_when_known(att, procs) and not any(pid in found for pid in sess):
        # a lost job (dead, no recorded end): its session number may be another program's
        # by now (a session leader that got pid X again); claimed only with one of ours in it
        sess = []
    for pid in sess:
        found[pid] = procs[pid]
    for pid in descendants(list(found), procs):
        found[pid] = procs[pid]
    return {pid: p for pid, p in found.items() if pid not in prot and not p.dead}


def _ended_when_known(att, procs):
    """Whether the job's session number is still provably its own: the job is there (pid and
    start time; a zombie too holds its pid), or its end was recorded (job_session bounds
    members by it)."""
    job = att.get("job") or {}
    jp = procs.get(job.get("pid"))
    return bool((att.get("exit") or {}).get("at")) or (jp is not None and jp.start == job.get("start"))


def adopted(att, procs):
    """The live shim's children other than its own helpers. The shim is a child subreaper:
    an orphan of the job's tree (a double fork's grandchild, the child of a killed shell) is
    reparented to it, even one that cleared its environment and left the job's session, and
    where there is no cgroup (a container, an ordinary user) nothing else finds that one.
    The shim's helpers stay in the shim's own session (a health action's stop, a notify
    command), which nothing of the job's can join: setsid only makes new sessions; the
    logger and the next attempt's zygote are protected as the shim is (procfs.is_shim)."""
    shim = (att or {}).get("shim")
    if not shim or (att.get("boot_id") and att["boot_id"] != this_boot()):
        return []  # a pid and start time of another boot name nothing of ours
    sp = procs.get(shim.get("pid"))
    if sp is None or sp.start != shim.get("start") or sp.dead:
        return []  # no shim (its orphans went to pid 1), or pid X is another process now
    # a child already dead (a zombie the shim has not reaped yet: the attempt that just ended)
    # is nothing left to stop; counting it made a stop in the backoff say "1 process dead"
    return [pid for pid in procs.children().get(sp.pid, ()) if procs[pid].sid != sp.pid and not procs[pid].dead]


BLIND_SPOT = ("this run has no cgroup here and its shim was killed: a process of it that cleared its "
              "environment, left its session and was adopted by the shim went to pid 1 with nothing to "
              "tie it to the run, and cannot be found (runward doctor: cgroups)")


def blind_spot(att, procs):
    """What this attempt's member search cannot see, said rather than hidden (design rule 11):
    with no cgroup, the shim's adoption is all that finds an escapee that cleared its
    environment and left the job's session; a shim killed from outside takes that with it.
    An earlier attempt's, which no later search sees either, too (blind_spot_before)."""
    return _own_blind_spot(att, procs) or blind_spot_before(att)


def _own_blind_spot(att, procs):
    shim = (att or {}).get("shim")
    if not shim or (att or {}).get("cgroups") or not (att or {}).get("job"):
        return None
    if att.get("boot_id") and att["boot_id"] != this_boot():
        return None  # the reboot ended what the shim held: nothing of that boot lives unseen
    sp = procs.get(shim.get("pid"))
    if sp is not None and sp.start == shim.get("start") and not sp.dead:
        return None
    ex = att.get("exit") or {}
    held = att.get("lingering") or {}
    if ex and ex.get("by") is None and not (held and not held.get("ended")):
        # the shim recorded the job's end itself, then left: nothing was dropped; unless it
        # was killed while it held adopted orphans (shim._wait_adopted): they went to pid 1
        return None
    return BLIND_SPOT.replace("was killed", "failed") if att.get("shim_failed") else BLIND_SPOT


def carried_blind_spot(prev, procs):
    """What a new attempt records of the attempt before it (PREV, with PROCS read before its
    stop): its own blind spot, else the one it carried. An escapee that went to pid 1 is
    tied to no attempt, so the member search of every later one misses it as well; it may
    live as long as the machine's boot does. None when nothing is carried."""
    if not prev or (prev.get("boot_id") and prev["boot_id"] != this_boot()):
        return None  # a process of another boot is gone
    own = _own_blind_spot(prev, procs)
    if own:
        return {"attempt": prev.get("attempt"), "note": own}
    return prev.get("blind_spot_before")


def blind_spot_before(att):
    """The blind spot of an earlier attempt of this run (carried_blind_spot, recorded at
    the start of this one and copied to a supervised restart's), on this boot; else None."""
    was = (att or {}).get("blind_spot_before")
    if not was or (att.get("boot_id") and att["boot_id"] != this_boot()):
        return None
    return "attempt %s of this run: %s" % (was.get("attempt"), was.get("note"))


def job_session(att, procs):
    """The job and the members of its session and its process group (both numbered by its
    pid), alive or dead. They stay the run's after the job exits: a child that cleared its
    environment and left no cgroup is found only so. While any of them lives the kernel
    keeps that number from being reused, so on this boot a process in session or group X
    that started no earlier than the job (a child may start in the job's own clock tick) is
    the job's, unless pid X is another process now."""
    job = (att or {}).get("job")
    if not job or not job.get("pid") or job.get("start") is None:
        return []
    jp = procs.get(job["pid"])
    if jp is not None and jp.start != job["start"]:
        return []  # pid X is reused: the session X, if any, is the new process's
    boot = att.get("boot_id")
    if boot and boot != this_boot():
        return []  # start times count from another boot
    if jp is not None and not jp.dead:
        return [jp.pid] + list(procs.groups().get(jp.pid, ()))
    if not boot:
        return []  # a record without its boot: its start time proves nothing
    # Once the last of them is gone the number is free again, and a new session X is
    # another program's: its members all started after our job's recorded end, ours (their
    # own children are found as descendants) before it.
    last = _ticks_at(((att.get("exit") or {}).get("at")))
    return [pid for pid in procs.groups().get(job["pid"], ())
            if procs[pid].start >= job["start"] and (last is None or procs[pid].start <= last)]


def _ticks_at(epoch):
    """An epoch time in start-time clock ticks (since boot), a second late to be safe of
    the clocks' rounding; None when unknown."""
    if not epoch:
        return None
    bt = boot_time()
    return int((float(epoch) - bt + 1.0) * CLK_TCK) if bt else None


_BOOT = []


def this_boot():
    """This machine's boot id, read once: a process does not outlive a reboot."""
    if not _BOOT:
        _BOOT.append(boot_id())
    return _BOOT[0]


def attempt_state(att, procs, bid):
    """running | exited | failed | lost | orphaned | starting (status calls an exited
    attempt whose processes still live "stray")"""
    if att is None:
        return "none"
    if att.get("boot_id") and att["boot_id"] != bid:
        return "lost"
    job = att.get("job")
    shim = att.get("shim")
    job_alive = bool(job) and alive_in(procs, job)
    shim_alive = bool(shim) and alive_in(procs, shim)
    if att.get("exit"):
        return "exited" if job else "failed"
    if job_alive:
        return "running" if shim_alive else "orphaned"
    if shim_alive:
        return "starting"
    if att.get("error"):
        return "failed"
    return "lost"


def paused(found, job_pid=None):
    """The live run's members paused by a signal (SIGSTOP, Ctrl-Z: state T) or held by a
    debugger (t): alive but making no progress, and deaf to a stop's TERM until resumed.
    None when none is."""
    held = sorted(pid for pid, p in found.items() if p.state in ("T", "t"))
    if not held:
        return None
    traced = [pid for pid in held if found[pid].state == "t"]
    out = {"pids": held, "job": job_pid in held, "of": len(found),
           "note": "stopped by a signal (SIGSTOP, Ctrl-Z): it makes no progress until SIGCONT; "
                   "`runward stop` resumes it after its signal, so its handler runs"}
    if traced:
        out["traced"] = traced
        out["note"] += "; held by a debugger (ptrace): %s, which SIGCONT does not resume" % (
            ", ".join(str(pid) for pid in traced))
    return out


def own_procs(att):
    """The attempt's job and shim as a procs table: all attempt_state needs, without a scan
    of the whole of /proc."""
    out = {}
    for ident in ((att or {}).get("job"), (att or {}).get("shim")):
        if ident and ident.get("pid"):
            p = read_proc(int(ident["pid"]))
            if p is not None:
                out[p.pid] = p
    return out


def summarize_tree(procs, up, job_pid=None):
    cpu = sum(p.utime + p.stime for p in procs.values()) / float(CLK_TCK)
    rss = sum(p.rss for p in procs.values())
    jp = procs.get(job_pid)
    out = {"processes": len(procs), "cpu_seconds": round(cpu, 2), "rss_bytes": rss,
           "uptime_s": round(age(jp, up), 1) if jp else None}
    out.update(tree_pss(procs))
    return out


def tree_pss(procs):
    """The tree's PSS: forked workers share their parent's pages, so the RSS sum counts them
    once per process. Null, with the reason, when any member's PSS cannot be read: never a
    partial sum passed off as the whole."""
    total, unread = 0, []
    for p in procs.values():
        if p.dead:
            continue  # a zombie holds no memory
        v = pss(p.pid)
        if v is None:
            unread.append(p.pid)
        else:
            total += v
    if not unread:
        return {"pss_bytes": total}
    why = ("no /proc/PID/smaps_rollup on this kernel (Linux >= 4.14 has it)"
           if not os.path.exists("/proc/self/smaps_rollup") else
           "smaps_rollup unreadable for %d of %d processes (another user's, or gone)"
           % (len(unread), len(procs)))
    return {"pss_bytes": None, "pss_note": why}


def log_info(path):
    try:
        st = os.stat(path)
    except OSError:
        return {"path": path, "exists": False}
    last = tail_lines(path, 1)
    return {"path": path, "exists": True, "size": st.st_size, "mtime": st.st_mtime,
            "last_line": last[-1] if last else ""}


def drift(att, home=None):
    """Files whose bytes on disk differ from those the attempt started with: hashed through
    the home's hash cache (the one push and its manifest use), so that the status of an
    unchanged tree reads no file, only their inodes."""
    hashes = (att or {}).get("hashes")
    if not hashes:  # nothing to compare: neither the cache nor hashlib (OpenSSL, ~7 ms) is loaded
        return []
    from ..core.hashcache import HashCache
    cache = HashCache(home)
    changed = []
    for path, h in sorted(hashes.items()):
        now = cache.sha256_path(path)
        if now != h:
            changed.append({"path": path, "started_with": h, "on_disk": now})
    cache.save()
    return changed
