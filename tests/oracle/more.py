"""More rules (issue 26, second stop): pull, `logs -f` interrupted, a NaN line acted on by a
health action, two verbs at once on one run. A mixin of machine.OracleRules: the same model,
the same invariant after every step; the facts each rule checks at once come from /proc and
the job's files, never from runward."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from . import checks, truth
from .model import MAX_RUNS

PICK = st.integers(0, 1 << 16)
FOLLOW_S = 30.0   # how long a follow may take to print the job's line
OVER_SSH = ("ssh", "link", "podman", "pct")   # one target reached over ssh (a start's Ctrl-C)


BOOTSTRAP = "import sys,os,marshal"   # every runward agent's command line (its bootstrap)


def _ports(pids) -> set:
    """Local TCP ports of the sockets these processes hold (an ssh client's, its master's)."""
    inodes, ports = set(), set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
        for table in ("tcp", "tcp6"):
            for line in (truth._read("/proc/%d/net/%s" % (pid, table)) or b"").decode().split("\n")[1:]:
                w = line.split()
                if len(w) > 9 and w[9] in inodes:
                    ports.add(int(w[1].rsplit(":", 1)[1], 16))
    return ports


def _via_our_ssh(p, procs: dict, ports: set) -> bool:
    """p descends from an sshd session of one of our connections (its SSH_CONNECTION's client
    port is one of ours): on the testbed's ssh hosts, which share this machine's pid namespace
    with every other user's agents."""
    while p is not None:
        env = truth._read("/proc/%d/environ" % p.pid) or b""
        for kv in env.split(b"\0"):
            if kv.startswith(b"SSH_CONNECTION="):
                w = kv.split(b"=", 1)[1].split()
                return len(w) > 1 and w[1].isdigit() and int(w[1]) in ports
        p = procs.get(p.ppid)
    return False


def _started_by_us(p, procs: dict, own: set, ports: set) -> bool:
    """p, a process in a container, was started by this session: an ancestor of it is ours
    (OWN: carries our RUNWARD_HOME here) or under an sshd session of our connections (pct's
    lxc-attach); past a podman exec's conmon, which init adopts and whose environment podman
    clears, the `podman exec` client at the other end of its attach socket stands for its
    parent."""
    q, seen = p, set()
    while q is not None and q.pid not in seen:
        seen.add(q.pid)
        if q.pid in own:
            return True
        if os.path.basename(q.cmdline.split(" ", 1)[0]) == "conmon":
            client = _exec_client(q, procs)
            return client is not None and (client.pid in own or _via_our_ssh(client, procs, ports))
        q = procs.get(q.ppid)
    return _via_our_ssh(p, procs, ports)


def _sockets(pid: int) -> set:
    try:
        links = [os.readlink("/proc/%d/fd/%s" % (pid, fd)) for fd in os.listdir("/proc/%d/fd" % pid)]
    except OSError:
        return set()
    return {ln[8:-1] for ln in links if ln.startswith("socket:[")}


def _exec_client(conmon, procs: dict):
    """The `podman exec` whose session this conmon keeps: the podman process at the other end
    of a unix socket conmon holds (the exec session's attach socket), as the kernel's socket
    table in conmon's network namespace pairs them (`ss -x`). None once that client is gone."""
    mine = _sockets(conmon.pid)
    try:
        table = subprocess.run(["nsenter", "--net=/proc/%d/ns/net" % conmon.pid, "ss", "-xpnH"],
                               capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in table.split("\n"):
        w = line.split()
        if len(w) < 9 or w[7] not in mine:
            continue
        for pid in re.findall(r"pid=(\d+),", line):
            q = procs.get(int(pid))
            if q is not None and " exec " in q.cmdline and os.path.basename(q.cmdline.split(" ", 1)[0]) == "podman":
                return q
    return None


def _has_ssh_child(pid: int) -> bool:
    """The CLI has spawned its ssh: the request is on its way to the target."""
    return any(p.ppid == pid and p.cmdline.split(" ", 1)[0].endswith("ssh") for p in truth.scan())


def follow_procs(session, target, before: set) -> list:
    """What runward started for a follow, read from /proc: processes new since `before` (pid,
    start) that carry one of this session's RUNWARD_HOMEs here (local agents, the CLI's ssh or
    podman child), or are an agent in the target's pid namespace started for this session: on
    an ssh host, one under an sshd session of our own connections; in a container, one whose
    host-side ancestry leads to a process of ours (_started_by_us). A shared container (rwpod,
    pct:200) holds other callers' agents too, some begun while ours follows and alive with
    their own caller long after: those are not ours (docs/testing.md, "logs -f in a shared
    container"). Shims, residents and ssh control masters (`[mux]`) are the docs' to keep."""
    homes = [str(session.home)] + [t.home for t in session.targets.values() if t.kind == "user"]
    mine = [("RUNWARD_HOME=%s\0" % h).encode() for h in homes]
    procs = {p.pid: p for p in truth.scan()}
    ours = [p for p in procs.values() if any(w in (truth._read("/proc/%d/environ" % p.pid) or b"") for w in mine)]
    dirs = [str(session.dir)] + ([str(session.user_base)] if session.user_base else [])
    masters = [p.pid for p in procs.values() if "[mux]" in p.cmdline and any(d in p.cmdline for d in dirs)]
    ports = _ports([p.pid for p in ours] + masters)
    out = [p for p in ours if (p.pid, p.start) not in before]
    own = {p.pid for p in ours}
    for p in procs.values():
        if (p.pid, p.start) in before or p in out or p.pidns != target.pidns or BOOTSTRAP not in p.cmdline:
            continue
        if target.kind in ("local", "user"):
            continue
        if _started_by_us(p, procs, own, ports) if target.root != "/" else _via_our_ssh(p, procs, ports):
            out.append(p)
    return [p for p in out if not any(w in p.cmdline for w in ("runward-shim", "runward-resident", "[mux]"))]


class MoreRules:
    """Mixed into machine.OracleRules (it gives cli, pick, target, nodes, job, signal_job...)."""

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK, node=st.integers(0, 1))
    def pull(self, i, node):
        """pull the job's own file (ran-TOKEN, which it writes) from the node it runs on: the
        bytes here are the bytes in the job's filesystem there."""
        # a supervised run's restarts append to the file; a run refused at its start never wrote it
        m = self.pick(i, lambda m: not (m.supervised and m.live) and m.attempt > 0)
        if m is None:
            return
        self.acted("pull", m)
        views = checks.views(m)
        tname, tok = views[node % len(views)]
        t = self.session.targets[tname]
        remote = "%s/%s/ran-%s" % (t.app, m.name, tok)
        base = self.session.user_base if m.kind == "user" else self.session.dir
        self.n += 1
        local = os.path.join(str(base), "pulled-%d" % self.n)
        rc, doc = self.cli("pull", "--on", tname, "%s:%s" % (remote, local), kind=m.kind)
        self.expect("pull %s from %s" % (remote, tname), rc, doc, (0,))
        with open(local, "rb") as f:
            got = f.read()
        want = truth._read(t.host_path(remote))
        if got != want:
            raise self.violation("pull %s: said verified, %d bytes here, the job's file has %s" % (
                remote, len(got), None if want is None else len(want)))

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def logs_follow_interrupted(self, i):
        """logs -f, then Ctrl-C once the job's line is printed: the CLI ends (130) and nothing
        that followed the log is left, on the target or here (invariant 7)."""
        m = self.pick(i, lambda m: m.state == "running" and self.single(m))
        if m is None:
            return
        self.acted("logs -f", m)
        t = self.target(m)
        ran = truth.read_text(t.root, "%s/%s/ran-%s" % (t.app, m.name, m.token)) or ""
        nonce = ran.split("\n")[-2].split()[1]
        before = {(q.pid, q.start) for q in truth.scan()}
        p = self.session.popen("logs", m.name, "-f", "-n", "20", kind=m.kind, json_out=False)
        seen, end = "", time.monotonic() + FOLLOW_S
        try:
            while nonce not in seen and time.monotonic() < end and p.poll() is None:
                if select.select([p.stdout], [], [], 0.5)[0]:
                    seen += os.read(p.stdout.fileno(), 65536).decode("utf-8", "replace")
            if nonce not in seen:
                raise self.violation("logs -f %s: the job's line (nonce %s) not printed in %.0f s (exit %s): %r" % (
                    m.name, nonce, FOLLOW_S, p.poll(), seen[-300:]))
            during = [q for q in follow_procs(self.session, t, before) if q.pid != p.pid]
            p.send_signal(signal.SIGINT)
            rc = p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        self.expect("logs -f %s, interrupted" % m.name, rc, {"output": seen[-300:]}, (130,))
        left = checks.settle(lambda: ["inv7 %s: logs -f ended (Ctrl-C), still running: %s" % (
            m.name, [q.cmdline[:80] for q in ps]) for ps in [[q for q in during if truth.alive(q)]] if ps])
        if left:
            raise self.violation(left[0])
        self.follow_seen = during   # for a look by hand: what the follow ran

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def nan_line(self, i):
        """The job logs a NaN loss; its run says `nan = "stop"`: its shim stops it within its
        interval, with nobody connected. The effect is read from /proc: nothing of it lives."""
        m = self.pick(i, lambda m: m.state == "running" and m.health and self.single(m) and not m.paused)
        if m is None:
            return
        self.acted("nan_line", m)
        self.signal_job(m, "nan 0")
        t = self.target(m)
        left = checks.settle(lambda: ["%s: the NaN line's stop left %d processes" % (m.name, len(ps))
                                      for ps in [truth.tree(m.token, t.pidns)] if ps])
        if left:
            raise self.violation(left[0])
        m.stopped()

    @precondition(lambda self: any(k in OVER_SSH for k in self.KINDS)
                  and sum(m.state != "removed" for m in self.runs.values()) < MAX_RUNS)
    @rule(k=PICK, delay=st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.35, 0.6]))
    def start_interrupted(self, k, delay):
        """Ctrl-C at a random moment of a start over ssh (the far agent goes on without the
        CLI: an ssh session's command gets no hangup). What the CLI says must be what the
        target did, read from /proc after the far side had time to decide: `launched` true
        (or exit 0) means it runs; false ("nothing was started") means nothing of it lives;
        null (not known) is taken from ground truth. A run that never started is removed
        (`rm`), so the model goes on from a known state."""
        kinds = [x for x in self.KINDS if x in OVER_SSH]
        kind = kinds[k % len(kinds)]
        self.acted("start_interrupted")
        m = self.define(kind)
        p = self.session.popen("start", m.name, kind=kind)
        left = checks.settle(lambda: [] if p.poll() is not None or _has_ssh_child(p.pid) else ["no ssh yet"], 60)
        if left:
            raise self.violation("start %s: no ssh to the target after 60 s" % m.name)
        time.sleep(delay)   # the moment of the Ctrl-C after the request left, drawn: not a wait for anything
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        doc = self.session.doc(out, err)
        res = doc.get("result") or {}
        said = True if p.returncode == 0 else res.get("launched")
        if p.returncode not in (0, 130):
            raise self.violation("start %s, interrupted after %.2f s: exit %d: %s" % (
                m.name, delay, p.returncode, str(doc)[:600]))
        t = self.target(m)
        runs = lambda: bool(truth.tree(m.token, t.pidns))
        if said is None:   # not known: ground truth decides, once the far side had time to
            alive = not checks.settle(lambda: [] if runs() else ["not (yet) alive"], deadline_s=12)
        else:
            alive = not checks.settle(lambda: [] if runs() == said else ["not as said"], deadline_s=12) and said
            if said is False and runs():
                raise self.violation("start %s, interrupted after %.2f s, said nothing was started, yet it runs: %s" % (
                    m.name, delay, str(doc)[:600]))
            if said is True and not runs():
                raise self.violation("start %s, interrupted after %.2f s, said it runs, yet nothing of it lives: %s" % (
                    m.name, delay, str(doc)[:600]))
        if alive:
            m.running_version = m.deployed_version
            return
        rc, doc = self.cli("rm", m.name, kind=kind)
        self.expect("rm %s (never started)" % m.name, rc, doc, (0, 4))
        m.state, m.log_removed = "removed", True

    @precondition(lambda self: any(k in OVER_SSH for k in self.KINDS) and bool(self.runs))
    @rule(i=PICK, delay=st.sampled_from([0.0, 0.1, 0.3, 0.6, 1.0, 1.5]))
    def restart_interrupted(self, i, delay):
        """Ctrl-C at a random moment of a restart over ssh. Its word names the step it was in;
        held to /proc once the far side had time to finish what it had begun: before the stop
        (`checks`) the old attempt runs on; after the stop began (`stop:begun`, `deploy`) it is
        dead and nothing new runs; in the start step the launch is as `launched` says (null:
        ground truth); `stop` (sent, not known begun) may go either way, and nothing new runs."""
        m = self.pick(i, lambda m: m.kind in OVER_SSH and m.state == "running" and not m.supervised
                      and not m.paused and m.local_version == m.deployed_version)
        if m is None:
            return
        self.acted("restart_interrupted", m)
        t = self.target(m)
        lines = lambda: (truth.read_text(t.root, "%s/%s/ran-%s" % (t.app, m.name, m.token)) or "").count("\n")
        before, old = lines(), self.job(m)
        p = self.session.popen("restart", m.name, kind=m.kind)
        left = checks.settle(lambda: [] if p.poll() is not None or _has_ssh_child(p.pid) else ["no ssh yet"], 60)
        if left:
            raise self.violation("restart %s: no ssh to the target after 60 s" % m.name)
        time.sleep(delay)   # the moment of the Ctrl-C, drawn: not a wait for anything
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        doc = self.session.doc(out, err)
        res = doc.get("result") or {}
        if p.returncode not in (0, 130):
            raise self.violation("restart %s, interrupted after %.2f s: exit %d: %s" % (
                m.name, delay, p.returncode, str(doc)[:600]))
        step = "done" if p.returncode == 0 else res.get("interrupted_in")
        launched = True if step == "done" else (res.get("launched") if step == "start" else False)
        old_lives = lambda: truth.alive(old)
        new_runs = lambda: lines() > before and bool(truth.tree(m.token, t.pidns))
        # what was begun ends on the target by itself: let it, then read
        checks.settle(lambda: [] if (not old_lives() or step == "checks") and (
            launched is not None or new_runs() or not truth.tree(m.token, t.pidns)) else ["settling"], 15)
        what = "restart %s, interrupted after %.2f s in %s: %s" % (m.name, delay, step, str(doc)[:500])
        if step == "checks":
            if not old_lives() or lines() != before:
                raise self.violation(what + ": said it runs on as it was, but the old attempt is gone or a new one began")
            return
        if old_lives() and step != "stop":
            raise self.violation(what + ": the old attempt still lives")
        if launched is False and (lines() > before):
            raise self.violation(what + ": said nothing was started, yet a new attempt began")
        if launched is True and not new_runs():
            raise self.violation(what + ": said the new attempt runs, yet it does not")
        if old_lives():   # the stop was sent, never begun there: the old attempt runs on
            return
        if new_runs():
            m.state, m.attempt, m.escapees, m.exits, m.paused = "running", m.attempt + 1, 0, set(), 0
            m.running_version = m.deployed_version
        else:
            m.stopped()

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def stop_and_restart_at_once(self, i):
        """stop and restart of one run at the same time: either order is right (stopped, or a
        new attempt running), and nothing of the run is left but the new attempt's own tree
        (invariants 1 and 7 after). stop exits 0; restart exits 0, or 1 when the stop came in
        its new attempt's settle period (restart_cancelled_by_stop): that attempt was started
        and stopped, and restart says so (the ssh soak, seed 9100, saw it)."""
        m = self.pick(i, lambda m: m.state == "running" and self.single(m) and not m.supervised)
        if m is None:
            return
        self.acted("stop+restart", m)
        deploy = ["--deploy"] if m.local_version != m.deployed_version else []
        ps = [self.session.popen("stop", m.name, kind=m.kind),
              self.session.popen("restart", m.name, *deploy, kind=m.kind)]
        outs = [p.communicate(timeout=180) for p in ps]
        for what, p, (out, err) in zip(("stop", "restart"), ps, outs):
            doc = self.session.doc(out, err)
            if what == "restart" and restart_cancelled_by_stop(p.returncode, doc):
                continue
            self.expect("%s %s (with the other at once)" % (what, m.name), p.returncode, doc, (0,))
        if deploy:
            m.deployed_version = m.local_version
        t = self.target(m)
        alive = truth.tree(m.token, t.pidns)
        m.attempt += 1
        if alive:   # stop, then restart: a new attempt runs (the job says so: a new line)
            # the line comes when the job's python has started, which restart's 0.5 s settle
            # does not wait for on a loaded machine: polled, as every world's move is
            late = checks.settle(lambda: [] if (truth.read_text(t.root, "%s/%s/ran-%s" % (
                t.app, m.name, m.token)) or "").count("\n") >= m.attempt else ["no new line"])
            if late:
                raise self.violation("%s: alive after stop+restart, but the job did not start again" % m.name)
            m.state, m.escapees, m.exits, m.paused = "running", 0, set(), 0
            m.running_version = m.deployed_version
        else:       # restart, then stop: the new attempt's verified stop
            m.state = "running"
            m.stopped()


def restart_cancelled_by_stop(rc: int, doc: dict) -> bool:
    """restart's answer when a stop ended its new attempt in the settle period: exit 1,
    Cancelled, the stop named, failed at its start step. Any other failure is a violation."""
    e = doc.get("error") or {}
    return (rc == 1 and e.get("type") == "Cancelled" and "stopped by `runward stop`" in (e.get("message") or "")
            and (e.get("details") or {}).get("failed_step") == "start")
