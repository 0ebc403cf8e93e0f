"""The invariants (issue 26, 1-7), each comparing what runward says (its --json) with ground
truth read here (truth.py) and with the model. A check returns a list of violations (strings
naming the invariant); `settle` polls until none is left or a deadline passes, since the
world moves on its own (a shim records an exit, a supervised run restarts after its backoff)."""

from __future__ import annotations

import os
import time

from . import ray, seams, truth
from .model import ENDED
from .world import NODES

DEADLINE_S = 20.0


def exit_fact(run_doc: dict) -> tuple:
    ex = run_doc.get("exit")
    if not ex or (ex.get("code") is None and ex.get("signal") is None):
        return ("unknown",)
    if ex.get("signal"):
        return ("signal", ex["signal"])
    return ("code", ex["code"])


def members(run_doc: dict) -> set:
    """The processes status names as the run's: its tree and strays; a Ray run's node_pids
    and the survivors of its driver."""
    return (set((run_doc.get("tree") or {}).get("pids") or ()) | set(run_doc.get("stray_processes") or ())
            | set(run_doc.get("node_pids") or ()) | set(run_doc.get("survivors") or ()))


def check_state(m, doc: dict | None) -> list[str]:
    """Invariants 3 and 4: the state is the model's; an exit reported is the job's real one."""
    name = m.name
    if m.state == "removed":
        return [] if doc is None else ["inv3 %s: removed, but status lists it (%s)" % (name, doc.get("state"))]
    if doc is None:
        return ["inv6 %s: status does not list the run (model: %s)" % (name, m.state)]
    out = []
    if doc.get("state") != m.state:
        out.append("inv3 %s: status says %s, the model %s" % (name, doc.get("state"), m.state))
    if doc.get("attempt") != m.attempt:
        out.append("inv3 %s: status says attempt %s, the model %s" % (name, doc.get("attempt"), m.attempt))
    if m.state in ENDED + ("stray",) and m.exits and exit_fact(doc) not in m.exits:
        out.append("inv4 %s: exit reported %s, the job's real one is %s" % (name, exit_fact(doc), sorted(m.exits)))
    return out + check_paused(m, doc) + (ray.check(m, doc) if m.kind == "ray" else [])


def check_paused(m, doc: dict) -> list[str]:
    """Invariant 3, paused: a live job stopped by SIGSTOP reads paused (its python among the
    paused: a --sh run's reported pid is its shell's), and one running reads not paused."""
    if m.state not in ("running", "orphaned"):
        return []
    said = doc.get("paused") or {}
    if m.paused and m.paused not in (said.get("pids") or ()):
        return ["inv3 %s: the job is stopped (SIGSTOP), status says %s" % (m.name, said or "not paused")]
    if not m.paused and said:
        return ["inv3 %s: nothing is paused, status says paused: %s" % (m.name, said)]
    return []


def unseeable(p, doc: dict | None, procs: dict) -> bool:
    """A process runward says it cannot see: an env -i escapee (its token's kind), or its
    child, of a run whose status names that blind spot (no cgroup, the shim killed: README,
    doctor), or whose rm or prune named it (`said`). Said is not hidden; the escapee outside
    that case still counts."""
    if not (doc and doc.get("blind_spot")):
        return False
    while p is not None:
        if "-envi" in p.cmdline:
            return True
        p = procs.get(p.ppid)
    return False


def said(m, doc: dict | None) -> dict | None:
    """What names the run's blind spot: its status; once rm or prune removed it, what that
    verb said (the model keeps it), since no status lists the run then."""
    return {"blind_spot": m.unseen} if m.state == "removed" else doc


def check_members(m, target, doc: dict | None, before: dict, after: dict) -> list[str]:
    """Invariant 1: each process of the run alive before and after the status read (same pid
    and start time) is a member status knows; none alive that status calls ended."""
    both = [p for pid, p in after.items() if pid in before and before[pid].start == p.start
            and not unseeable(p, said(m, doc), after)]
    if not both:
        return []
    if doc is None or m.state == "removed":
        return ["inv1 %s: %d processes alive (%s) but the run is removed" % (
            m.name, len(both), [p.cmdline[:60] for p in both])]
    known = members(doc)
    missing = [p for p in both if p.nspid not in known]
    if not missing:
        return []
    return ["inv1 %s: status (%s) does not know live %s" % (
        m.name, doc.get("state"), ["%d %s" % (p.nspid, p.cmdline[:60]) for p in missing])]


def views(m) -> list[tuple[str, str]]:
    """(target name, token) of each node of the run: one for a run on one target; a
    multi-node run's rank N carries TOKEN-rN (its argv's `{node_rank}`), so the ranks' trees
    are told apart even where the nodes share one pid namespace (the testbed's ssh hosts)."""
    if m.kind not in NODES:
        return [(m.kind, m.token)]
    return [(n[0], "%s-r%d" % (m.token, i)) for i, n in enumerate(NODES[m.kind])]


def check_version(m, target, tok: str) -> list[str]:
    """Invariant 5: a running job runs the code deployed when it started (its own word)."""
    if m.state != "running":
        return []
    ran = truth.read_text(target.root, "%s/%s/ran-%s" % (target.app, m.name, tok)) or ""
    lines = ran.split("\n")[:-1]
    if len(lines) < m.attempt:
        return ["inv5 %s: the job has not said what it runs (%d of %d attempts)" % (m.name, len(lines), m.attempt)]
    said = lines[-1].split()[0]
    if said != "v%d" % m.running_version:
        return ["inv5 %s: the job runs %s, the deployed code is v%d" % (m.name, said, m.running_version)]
    return []


def check_log(m, target, home_removed: list[str], tok: str) -> list[str]:
    """Invariant 6: every line the job said it printed (one per start, named in ran-TOKEN) is
    still in its log, or in the log rm kept under removed/; the attempt records are there."""
    if m.log_removed:
        return []
    ran = truth.read_text(target.root, "%s/%s/ran-%s" % (target.app, m.name, tok)) or ""
    nonces = [ln.split()[1] for ln in ran.split("\n") if ln.strip()]
    if m.state == "removed":
        text = "".join(truth.read_text(target.root, p) or "" for p in home_removed)
        where = "the kept logs %s" % home_removed
    else:
        text = truth.read_text(target.root, "%s/runs/%s/log" % (target.home, m.name)) or ""
        where = "its log"
        for n in range(1, m.attempt + 1):
            if truth.read_text(target.root, "%s/runs/%s/attempts/%d.json" % (target.home, m.name, n)) is None:
                return ["inv6 %s: attempt %d's record is gone" % (m.name, n)]
    lost = [n for n in nonces if "nonce %s" % n not in text]
    return ["inv6 %s: job lines %s are not in %s" % (m.name, lost, where)] if lost else []


def runward_leftovers(session, models: dict) -> list[str]:
    """Invariant 7: once a verb has ended, nothing of runward's runs but what the docs name:
    residents, ssh control masters, and one shim per run the model calls live. A shim is known
    by its stderr (the attempt's shim log under a home of this session); a local agent by its
    RUNWARD_HOME."""
    out = []
    homes = {t.home: t for t in session.targets.values()}
    local_homes = [str(session.home)] + [t.home for t in session.targets.values() if t.kind == "user"]
    shims: dict = {}
    for p in truth.scan(("AGENT_SHA",), ("AGENT_SHA",)):
        if "runward-resident" in p.cmdline:
            continue
        if "runward-shim" in p.cmdline:
            for fd in p.fds:
                for home in homes:
                    if fd.startswith(home + "/runs/") and fd.endswith(".shim.log"):
                        shims.setdefault((home, fd.split("/")[-3]), []).append(p)
            continue
        env = truth._read("/proc/%d/environ" % p.pid) or b""
        if any(("RUNWARD_HOME=%s\0" % h).encode() in env for h in local_homes):
            out.append("inv7: a local agent still runs after the verb ended: %d %s" % (p.pid, p.cmdline[-60:]))
    for (home, name), ps in shims.items():
        m = models.get(name)
        if m is None:
            continue
        # a supervised shim forks a helper of its own (same stderr): count the shims proper
        ps = [p for p in ps if p.ppid not in {q.pid for q in ps}]
        # a supervised run that gave up while escapees live: its shim stays their parent (README's
        # gave_up row: gave_up wins, the strays are named), as a stray run's does
        lingers = m.state == "gave_up" and m.escapees
        if (m.state not in ("running", "stray") and not lingers) or len(ps) > 1:
            out.append("inv7 %s: %d shim(s) alive while the model says %s" % (name, len(ps), m.state))
    return out


# a health reader's state (read offsets, facts so far, the stall watch, the attribution kept),
# not a record: the shim's health watcher and every status rewrite them while a run lives,
# whatever verb is refused meanwhile
READER_STATE = frozenset(("health.json", "stall.json", "attribution.json"))


def _reader_state_mid_write(rel: str) -> bool:
    """A reader state's atomic rewrite in flight (`.stall.json.tmp.PID`, renamed over it a
    moment later): the live shim's, as the state itself is."""
    head, sep, pid = rel.rpartition(".tmp.")
    return bool(sep) and pid.isdigit() and head.startswith(".") and head[1:] in READER_STATE


def records(target, name: str) -> dict:
    """The run's records on a target, as a refused or failed verb must leave them (issue 39,
    "Bad input": no file written, no record touched): {path under runs/NAME: sha256}; its
    logs, which the job and its shim write on, by their presence alone."""
    base = target.host_path("%s/runs/%s" % (target.home, name))
    out = {}
    for d, _, files in os.walk(base):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), base)
            if rel.endswith(".lock"):   # a lock, not a record: its holder line is rewritten by each verb
                continue
            if rel in READER_STATE or _reader_state_mid_write(rel):
                continue
            data = None if rel == "log" or rel.endswith(".shim.log") else truth._read(os.path.join(d, f))
            out[rel] = "a log" if data is None else truth.hashlib.sha256(data).hexdigest()
    return out


def records_changed(before: dict, after: dict) -> list[str]:
    """What differs between two records() of one run: files made, gone, rewritten."""
    return (["%s made" % k for k in sorted(after.keys() - before.keys())]
            + ["%s gone" % k for k in sorted(before.keys() - after.keys())]
            + ["%s rewritten" % k for k in sorted(before.keys() & after.keys()) if before[k] != after[k]])


def removed_logs(target, name: str) -> list[str]:
    d = target.host_path("%s/removed" % target.home)
    try:
        return ["%s/removed/%s" % (target.home, f) for f in os.listdir(d) if f.startswith(name + "-")]
    except OSError:
        return []


def check_all(session, models: dict, status_of) -> list[str]:
    """Every invariant over every run, once, on each node. `status_of(target)` -> {name: run
    doc}: for a multi-node run, each node's own record (an ordinary run of that name there)."""
    out = []
    by_target: dict = {}
    for m in models.values():
        for tname, tok in views(m):
            by_target.setdefault(tname, []).append((m, tok))
    for tname, ms in by_target.items():
        t = session.targets[tname]
        ms = [(m, tok) for m, tok in ms if not seams.hidden(session, m)]   # checked unlisted: check_answer
        procs = truth.scan()
        before = {tok: live_of(m, tok, t, procs) for m, tok in ms}
        docs = status_of(tname)
        out += seams.check_answer(session, tname, docs, models)
        procs = truth.scan()
        after = {tok: live_of(m, tok, t, procs) for m, tok in ms}
        for m, tok in ms:
            doc = docs.get(m.name)
            found = check_state(m, doc) + check_members(m, t, doc, before[tok], after[tok])
            found += check_version(m, t, tok) + check_log(m, t, removed_logs(t, m.name), tok)
            seen = [p for p in after[tok].values() if not unseeable(p, said(m, doc), after[tok])]
            # listed as strays (gave_up), as a Ray driver's survivors (exited): check_members' part
            strays_named = m.state == "gave_up" and m.escapees or m.kind == "ray" and m.state == "exited" and m.escapees
            if m.state in ENDED + ("removed",) and seen and not found and not strays_named:
                found.append("inv1 %s: %s, but %d of its processes live" % (m.name, m.state, len(seen)))
            out += [v.replace(m.name, "%s@%s" % (m.name, tname), 1) if m.kind in NODES else v for v in found]
    return out + runward_leftovers(session, models)


def live_of(m, tok: str, target, procs: list | None = None) -> dict:
    """The run's live processes from ground truth: its token's tree; for a Ray run, also every
    process that carries its marker (what Ray or the entrypoint started without the token)."""
    tree = truth.tree(tok, target.pidns, procs)
    return {**ray.marked(m.name, procs), **tree} if m.kind == "ray" else tree


def settle(fn, deadline_s: float = DEADLINE_S) -> list[str]:
    """Poll fn() (a list of violations) until it is empty or the deadline passes; the last
    list is the verdict. The poll is the wait: no fixed sleep stands in for a check."""
    end = time.monotonic() + deadline_s
    delay = 0.05
    while True:
        v = fn()
        if not v or time.monotonic() > end:
            return v
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)
