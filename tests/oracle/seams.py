"""Two seams of issue 39, walked by the oracle: an ssh alias re-pointed between calls (the
`alias` kind) and a container hop that never answers (the `pctw` kind).

alias: `ssh://rworacle-alias`, an alias in the session's own ssh_config naming rw1 or rw2,
rewritten in place by `repoint` (same size: only the address and host key alias change). The
testbed's hosts share this machine's files and pids, so each host gets a home of its own: the
target's python is a wrapper that sets HOME by the network namespace it runs in (as
tests/test_ssh_routes.py does), and the run's files and command are relative to that home. A
run belongs to the host the alias named when it started; while the alias names the other, the
run is out of the rules' reach, and every answer through the alias must be the other host's:
status never lists it, a listed job lives in the named host's network namespace (/proc), prune
never removes it, and `deploy` of it sends the file to the host named now (its sha256 there).

pctw: `pct:200` through a `pct` of the session's own, first on PATH: the testbed's pct, or,
while `wedged_hop` runs, one that never answers (its pid kept, then sleep). A call through it
must exit 3 within twice RUNWARD_HOP_TIMEOUT (README's fault table) naming the hop, leave no
hung pct running, and change nothing: every process of the kind's runs lives on, and a
project's `status` still answers its other targets."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from . import truth

HOSTS = ("rw1", "rw2")
ALIAS = "rworacle-alias"
ALIAS_PYTHON = "/tmp/oracle-{id}/alias/python3"
# RUNWARD_HOP_TIMEOUT of a session with the pctw kind: a wedge costs seconds, not tens. The
# soak's; the CI profile (tests/test_oracle.py) sets a shorter one, as each wedge waits it twice
HOP_BOUND_S = 3.0
HOP = "pct:200"
PICK = st.integers(0, 1 << 16)


def netns(host: str) -> int:
    return os.stat("/run/netns/runward-" + host).st_ino


def alias_targets(session) -> dict:
    """The alias kind's target as each host sees it: its home and code under that host's HOME."""
    from .world import KINDS, Target
    base = Path(ALIAS_PYTHON.format(id=session.id)).parent
    base.mkdir(parents=True)
    wrapper = base / "python3"
    wrapper.write_text('#!/bin/sh\nHOME=%s/home-$(readlink /proc/self/ns/net | tr -dc 0-9)\nexport HOME\n'
                       'mkdir -p "$HOME"\nexec /usr/bin/python3 "$@"\n' % base)
    wrapper.chmod(0o755)
    pidns = os.readlink("/proc/self/ns/pid")
    return {h: Target("alias", KINDS["alias"][0], "%s/home-%d/.runward" % (base, netns(h)),
                      "%s/home-%d/app" % (base, netns(h)), "/", pidns, spec_app="app") for h in HOSTS}


def alias_config(tb: dict, host: str) -> str:
    return "\nHost %s\n  HostName %s\n  HostKeyAlias %s\n  User root\n  IdentityFile %s\n" % (
        ALIAS, tb["addresses"][host], host, tb["client_key"])


def hidden(session, m) -> bool:
    """A run of a host the alias does not name now: out of the rules' reach."""
    return m.kind == "alias" and m.host != session.alias_host


# A wedged `pct exec` as a real one wedges: pct execs lxc-attach, which waits on a child of its
# own (the attach into the container) that holds the call's stdio and never answers. A stand-in
# that hung in its first process alone (exec sleep) was ended by a kill of that pid alone, so a
# runward that killed only the pid, not its group, passed (docs/testing.md, "Plants").
WEDGED_PCT = """#!/bin/sh
if [ -e %(flag)s ]; then
    sleep 1000 &
    echo $$ $! >> %(pids)s
    wait
    exit 1
fi
exec %(real)s/pct "$@"
"""


def wedge_wait_s() -> float:
    """Past the bound's own check: a call still running then is hung."""
    return 2 * HOP_BOUND_S + 8 + 20


def wedgeable_pct(session) -> str:
    """The pctw kind's bin directory: a `pct` that passes through to the testbed's, or hangs
    (its pid and its child's in pct-pids) while pct-wedged exists. Its bound is set short for
    the session."""
    d = session.dir / "bin"
    d.mkdir()
    p = d / "pct"
    p.write_text(WEDGED_PCT % dict(flag=session.dir / "pct-wedged", pids=session.dir / "pct-pids",
                                   real=session.tb["bin"]))
    p.chmod(0o755)
    session.env["RUNWARD_HOP_TIMEOUT"] = "%g" % HOP_BOUND_S
    return str(d)


def check_answer(session, tname: str, docs: dict, models: dict) -> list[str]:
    """What status said through the alias is about the host it names now: no run of the other
    host listed, and each listed job that lives is in the named host's network namespace."""
    if tname != "alias":
        return []
    out, now = [], session.alias_host
    for name, doc in docs.items():
        m = models.get(name)
        if m is not None and hidden(session, m):
            out.append("alias %s: status through the alias (now %s) lists %s, a run of %s" % (name, now, name, m.host))
        pid = doc.get("pid")
        cmd = truth._read("/proc/%s/cmdline" % pid) if pid else None
        if cmd and b"ORCTOK-" in cmd:   # a job of the session's, not a pid reused
            try:
                ns = os.stat("/proc/%s/ns/net" % pid).st_ino
            except OSError:
                continue
            if ns != netns(now):
                out.append("alias %s: status through the alias (now %s) names pid %s, which lives in "
                           "another host's network namespace" % (name, now, pid))
    return out


def _none_alive(pids: Path) -> list[str]:
    try:
        listed = pids.read_text().split()
    except OSError:
        return []
    left = []
    for p in listed:
        st_ = truth._read("/proc/%s/stat" % p)
        if st_ and st_.rsplit(b") ", 1)[1][:1] not in b"ZX":
            left.append(p)
    return left


class SeamRules:
    """Mixed into machine.OracleRules: the re-pointed alias and the wedged hop."""

    @precondition(lambda self: "alias" in self.KINDS and any(
        m.kind == "alias" and m.state != "removed" for m in self.runs.values()))
    @rule()
    def repoint(self):
        """The machine behind the alias is replaced: the alias now names the other host (the
        session's ssh_config rewritten in place). A run of the old host is unknown there
        (`status NAME`, `logs NAME`: exit 4); the invariant that follows reads status through
        the alias: the new host's runs, never the old one's (check_answer)."""
        s = self.session
        self.acted("repoint")
        s.alias_host = HOSTS[1 - HOSTS.index(s.alias_host)]
        s.targets["alias"] = s.alias_targets[s.alias_host]
        s.write_ssh_config()
        for m in [m for m in self.runs.values() if hidden(s, m) and m.state != "removed"][:1]:
            for args in (("status", m.name), ("logs", m.name, "-n", "5")):   # no such run on the host named now
                rc, doc = self.cli(*args, kind=m.kind)
                if rc != 4:
                    raise self.violation("alias %s: %s through the alias (now %s), a run of %s: exit %d, expected 4 "
                                         "(no such run there): %s" % (m.name, " ".join(args), s.alias_host, m.host,
                                                                      rc, str(doc)[:400]))

    @precondition(lambda self: "alias" in self.KINDS and any(
        hidden(self.session, m) and m.state != "removed" for m in self.runs.values()))
    @rule(i=PICK)
    def deploy_elsewhere(self, i):
        """deploy of a run after its alias was re-pointed: the host named now gets the file
        (issue 39 item 1: "0 sent, 1 unchanged, verified" while the new host had none)."""
        c = [m for m in self.runs.values() if hidden(self.session, m) and m.state != "removed"]
        m = c[i % len(c)]
        self.acted("deploy_elsewhere", m)
        rc, doc = self.cli("deploy", m.name, kind=m.kind)
        self.expect("deploy %s (alias now %s)" % (m.name, self.session.alias_host), rc, doc, (0,))
        t = self.session.targets["alias"]
        want = truth.hashlib.sha256((self.session.work / m.name / "job.py").read_bytes()).hexdigest()
        got = truth.sha256(t.root, "%s/%s/job.py" % (t.app, m.name))
        if got != want:
            raise self.violation("alias %s: deploy said verified with the alias naming %s; the file there has %s, "
                                 "local %s: %s" % (m.name, self.session.alias_host, got, want, str(doc)[:300]))

    @precondition(lambda self: "pctw" in self.KINDS)
    @rule(i=PICK, verb=st.sampled_from(["status", "project", "status NAME", "stop", "logs"]))
    def wedged_hop(self, i, verb):
        """`pct exec` hangs (a wedged container) during one call: the call ends within twice
        its bound with exit 3 naming the hop, no hung pct is left, and nothing changed: the
        invariant after it holds with the model untouched."""
        s = self.session
        m = self.pick(i, lambda m: m.kind == "pctw" and m.state != "removed")
        if m is None and verb not in ("status", "project"):
            verb = "status"
        args = {"status": ("status", "--on", "pctw"), "project": ("status",), "status NAME": ("status", m and m.name),
                "stop": ("stop", m and m.name), "logs": ("logs", m and m.name, "-n", "5")}[verb]
        self.acted("wedged_hop", m)
        kept = self.kept([x for x in self.runs.values() if x.kind == "pctw" and x.state != "removed"])
        flag, pids = s.dir / "pct-wedged", s.dir / "pct-pids"
        s.write_toml()   # the project's targets, before any run is defined
        flag.touch()
        try:
            t0 = time.monotonic()
            rc, doc = self.cli(*args, kind="pctw", timeout=wedge_wait_s())
            took = time.monotonic() - t0
        except subprocess.TimeoutExpired:   # the CLI killed; what it left is judged below
            rc, doc, took = None, {}, time.monotonic() - t0
        finally:
            flag.unlink()
        what = "%s with %s wedged" % (" ".join(args), HOP)
        hung = _none_alive(pids)
        # never left to outlive the session: each the stand-in or its sleep (a pid reused is not)
        truth.kill_procs([p for p in (truth._proc(int(x), False) for x in hung)
                          if p and (p.cmdline.startswith("sleep 1000") or str(s.dir / "bin" / "pct") in p.cmdline)])
        if rc is None:
            raise self.violation("%s: no answer within %g s (its bound is %g s); the hung pct left running: pids %s" % (
                what, wedge_wait_s(), HOP_BOUND_S, hung))
        err = doc.get("error") or {}
        if verb == "project":
            by = {r.get("target"): r for r in doc.get("targets") or ()}
            err = (by.get("pctw (%s)" % HOP) or {}).get("error") or {}
            mute = [k for k, r in by.items() if not k.startswith("pctw ") and not r.get("ok")]
            if mute:
                raise self.violation("%s: the targets that answer are not shown: %s" % (what, mute))
        if rc != 3 or err.get("hop") != HOP or "did not answer" not in (err.get("message") or ""):
            raise self.violation("%s: exit %d, expected 3 naming %s: %s" % (what, rc, HOP, str(doc)[:500]))
        if took > 2 * HOP_BOUND_S + 8:   # README: within about twice the bound; 8 s for the CLI on a loaded machine
            raise self.violation("%s: answered after %.1f s, its bound is %g s" % (what, took, HOP_BOUND_S))
        if hung:
            raise self.violation("%s: the hung pct is left running: pids %s" % (what, hung))
        self.as_they_were(what, kept)
        pids.write_text("")
