"""rm and prune: a stopped run's records removed from this target.

Only a stopped run goes: one whose last attempt is not running, starting or orphaned and of
which no process lives (a stray child carrying the run's marker keeps the records, since
without them `runward stop` could no longer find it). The log is kept unless asked: a log in
the run's own directory is moved out to <home>/removed/, a log elsewhere (--log PATH) stays
where it is; either way the reply says where it is. A rotated log's files (LOG.1 ... LOG.N)
hold its older lines and go wherever the log goes; a log another run writes to is kept."""

import os
import time

from ..proc import cgroups
from ..core import launchers
from ..core.procfs import boot_id, protected, scan
from ..proc.runs import attempt_state, blind_spot, members
from ..supervise.policy import in_backoff
from ..core.store import RunStore, fsync_dir, remove_file
from ..core.wire import AgentFailure, bad_input

LIVE_STATES = ("running", "starting", "orphaned")


def rm(req, home):
    store = RunStore.existing(home, req.get("name"))
    fd = store.lock("rm", req.get("lock_timeout"))
    try:
        procs = scan()
        att = store.latest()
        live = _live(store, att, procs)
        if live is not None:
            raise AgentFailure("RunAlive", "run %s is %s (attempt %s%s): not removed" % (
                store.name, live["state"], live["attempt"], _pid(live)),
                "stop it first: `runward stop %s`" % store.name, **live)
        res = _remove(store, bool(req.get("logs")), _shared(_log_owners(home), store.name))
        return _unseen(res, att, procs)
    finally:
        store.unlock(fd)


def prune(req, home):
    """Every stopped run whose last attempt ended more than older_than seconds ago; a live
    run, or one whose lock another verb holds, is never touched (and listed as kept)."""
    try:
        older = float(req.get("older_than"))
    except (TypeError, ValueError):
        raise bad_input("invalid older_than %r" % (req.get("older_than"),), "give seconds >= 0")
    if older < 0:
        raise bad_input("invalid older_than %r" % (older,), "give seconds >= 0")
    now, procs, owners = time.time(), scan(), None
    removed, kept = [], []
    for name in home.run_names():
        store = RunStore(home, name)
        if not store.exists():
            continue
        fd = store.try_lock("prune")
        if fd is None:
            kept.append({"name": name, "why": "busy: another runward verb holds it"})
            continue
        try:
            att = store.latest()
            try:
                live = _live(store, att, procs)
            except AgentFailure as e:  # its engine could not be asked: unknown is not stopped (rule 11)
                kept.append({"name": name, "why": e.message})
                continue
            ended = ended_at(att, store)
            if live is not None:
                kept.append({"name": name, "why": "live (%s%s)" % (live["state"], _pid(live))})
            elif ended is not None and now - ended <= older:
                kept.append({"name": name, "why": "ended %ds ago" % (now - ended), "ended_at": ended})
            elif req.get("dry_run"):
                removed.append(_unseen({"name": name, "ended_at": ended, "attempts": len(store.attempts()),
                                        "dry_run": True}, att, procs))
            else:
                owners = _log_owners(home) if owners is None else owners
                got = _remove(store, bool(req.get("logs")), _shared(owners, name))
                for names in owners.values():
                    names.discard(name)  # its records are gone: a log it shared is another's alone
                got["ended_at"] = ended
                removed.append(_unseen(got, att, procs))
        finally:
            store.unlock(fd)
    return {"older_than_s": older, "dry_run": bool(req.get("dry_run")), "removed": removed, "kept": kept}


def _unseen(res, att, procs):
    """A run removed while its status names a blind spot (no cgroup, its shim killed: an
    escapee may live where no search finds it) says so, as its stop does (design rule 11)."""
    unseen = blind_spot(att, procs)
    if unseen:
        res["blind_spot"] = unseen
    return res


def ended_at(att, store):
    """When the run's last attempt ended: its recorded exit, else (a lost attempt: the
    machine rebooted, or its shim died unseen) its log's last write, else its start; None
    when the run has no attempt at all."""
    if not att:
        return None
    ex = att.get("exit") or {}
    if ex.get("at"):
        return float(ex["at"])
    try:
        return os.stat(att.get("log") or "").st_mtime
    except OSError:
        return att.get("started_at") or att.get("created_at")


def _pid(live):
    """", pid P" of what lives; nothing where no process of it is known (an engine's job not
    placed yet: its state names the job)."""
    return ", pid %s" % live["pid"] if live.get("pid") is not None else ""


def _live(store, att, procs):
    """None when nothing of the run lives; else what lives (for the refusal)."""
    launcher = launchers.named(att)
    if launcher is not None:  # an engine's job lives while its engine says so
        found = launchers.queries(launcher).live(store, att)
        if found is not None:
            return found
    state = attempt_state(att, procs, boot_id())
    if in_backoff(att):
        state = "restarting"  # its shim starts the next attempt soon: `stop` it first
    if state == "starting" and att.get("gate"):  # restart's waiter on the GPUs: status says blocked
        from ..supervise import gatewait
        state = gatewait.status({}, att, state)
    found = members(store.name, att, procs, protected(procs))  # whatever the state: lost too
    if state not in LIVE_STATES + ("restarting", "blocked") and not found:
        return None
    pid = (att.get("job") or {}).get("pid") if state in LIVE_STATES else None
    return {"state": state if state in LIVE_STATES + ("restarting", "blocked") else "%s, with live processes %s" % (
                "lost" if state == "lost" else "stopped", ", ".join(map(str, sorted(found)))),
            "attempt": att.get("attempt") if att else None, "pid": pid or min(found, default=None),
            "pids": sorted(found)}




def _logs_of(store):
    """{log path: whether an attempt rotated it (log_max)} over the run's attempts, in
    attempt order: only a rotated log's LOG.N files are runward's to move or remove."""
    out = {}
    for n in store.attempts():
        att = store.attempt(n) or {}
        if att.get("log"):
            out[att["log"]] = out.get(att["log"], False) or bool(att.get("log_max"))
    return out


def _log_owners(home):
    """{log path: names of the runs whose attempts wrote to it}."""
    owners = {}
    for name in home.run_names():
        try:
            logs = _logs_of(RunStore(home, name))
        except AgentFailure:
            continue  # a hand-edited record elsewhere must not stop this removal
        for log in logs:
            owners.setdefault(log, set()).add(name)
    return owners


def _shared(owners, name):
    """The logs another run (not NAME) writes to too: never removed with NAME's records."""
    return {log for log, names in owners.items() if names - {name}}


def _remove(store, with_logs, shared):
    """Remove the run's directory; its logs moved out, kept in place or removed (with_logs)."""
    import shutil
    logs = [_dispose(store, log, rotated, with_logs, shared) for log, rotated in _logs_of(store).items()]
    ns = store.attempts()
    attempts = len(ns)
    # the run's empty cgroups (a shim killed before its job ended could not remove them);
    # nothing of the run is alive (checked under the lock), and rmdir leaves a non-empty one
    cgroups.remove(cgroups.run_paths([p for n in ns[-1:] for p in (store.attempt(n) or {}).get("cgroups") or ()]))
    # renamed first, in one step, to a name no run can have: a reader sees the run whole or
    # not at all, and a crash mid-way leaves no half run behind
    gone = os.path.join(os.path.dirname(store.dir), ".%s.removing.%d" % (store.name, os.getpid()))
    os.rename(store.dir, gone)
    shutil.rmtree(gone, ignore_errors=True)
    # the lock file stays: a start waiting on it holds its inode, and a new file under the
    # same name would let a second start in beside it
    remove_file(store.cancel_path())
    fsync_dir(os.path.dirname(store.dir))
    return {"name": store.name, "removed": store.dir, "attempts": attempts, "logs": logs}


def _dispose(store, log, rotated, with_logs, shared):
    """One log and, where an attempt rotated it, its rotated files (LOG.1 ... LOG.N: the lines
    before the last rotation): moved out of the run's directory together, kept in place
    together, or removed together (with_logs); the reply's entry for it."""
    from ..supervise.logfiles import rotations
    older = rotations(log) if rotated else []
    ent = {"path": log, "exists": os.path.isfile(log) or bool(older)}
    if older:
        ent["rotated"] = older
    inside = log.startswith(store.dir + os.sep)
    if not ent["exists"]:
        ent["kept"] = False
    elif with_logs and log not in shared:
        if not inside:  # inside: they go with the directory
            for path in [log] + older:
                remove_file(path)
        ent["kept"] = False
    elif inside:
        moved = _move_out(store, log, older)
        ent.update(kept=True, moved_to=moved[0], rotated_moved_to=moved[1:])
    else:
        ent.update(kept=True, why="another run writes to it too" if log in shared else "not runward's file")
    return ent


def _move_out(store, log, older):
    """The log moved to <home>/removed/NAME-<time>[.log name] (0700 directory), each rotated
    file LOG.N beside it as that name + .N; the new paths, the log's first."""
    d = os.path.join(store.home.path, "removed")
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    base = "%s-%s" % (store.name, time.strftime("%Y%m%d-%H%M%S"))
    rel = os.path.relpath(log, store.dir).replace(os.sep, "_")
    dest, n = os.path.join(d, "%s.%s" % (base, rel)), 1
    while any(os.path.lexists(dest + p[len(log):]) for p in [log] + older):
        n += 1
        dest = os.path.join(d, "%s-%d.%s" % (base, n, rel))
    moved = []
    for path in [log] + older:
        if os.path.lexists(path):
            os.rename(path, dest + path[len(log):])
        moved.append(dest + path[len(log):])
    fsync_dir(d)
    return moved

