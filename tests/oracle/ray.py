"""The ray kind (issue 41 item 7): runs on `ray://local`, the head of scripts/ray-testbed's
cluster, every CLI call inside its network namespace (`ip netns exec rwray ...`), as a user on
the head runs it (docs/ray.md). Ground truth is /proc, as for every kind: the job's token in
its command line, and the marker runward's entrypoint sets (`RUNWARD_RUN=NAME.N` in the
environment), read here so that a process of the run that carries no token is still seen.

What the model expects of a Ray run, beside an ordinary one (docs/ray.md):
- a supervision policy (restart, health actions) is refused at start: exit 2, nothing
  started, no record made but deploy's;
- a stop ends the run as `stopped`, `exit.stopped_by` runward: runward's own signal and grace
  to the driver's tree, so Ray records the driver's end (FAILED -15, or SUCCEEDED where the
  job's handler exits 0), not its STOPPED;
- an end by itself is `exited` with Ray's `driver_exit_code`; a signal's end reads as that
  signal (Ray's 128+N and -N alike), so a --sh run's shell exit 128+N may read either way;
- escapees that outlive the driver make the run `stray`, as on every target, and status names
  them (`stray_processes`); rm is refused while they live;
- no shim: nothing kills one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from . import truth

NETNS = "rwray"
ON = "ray://local"
RAY_DIR = os.environ.get("RUNWARD_RAY") or "/tmp/runward-ray"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def why_not() -> str | None:
    """None when the Ray testbed is up (its ray.json, and `scripts/ray-testbed status` says
    both nodes answer), else why not."""
    try:
        with open(os.path.join(RAY_DIR, "ray.json")) as f:
            tb = json.load(f)
    except (OSError, ValueError):
        return "no Ray testbed (%s/ray.json): run `scripts/ray-testbed up` as root" % RAY_DIR
    if tb.get("netns") != NETNS:
        return "the Ray testbed's namespace is %r, the oracle's ray kind runs in %r" % (tb.get("netns"), NETNS)
    p = subprocess.run([os.path.join(ROOT, "scripts", "ray-testbed"), "status"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 0:
        return "the Ray cluster is down (`scripts/ray-testbed status`: %s): `scripts/ray-testbed up`" % (
            (p.stderr or p.stdout).strip().splitlines()[-1:] or ["exit %d" % p.returncode])[0]
    return None


def argv_head() -> list:
    """runward's CLI on the head: inside the cluster's namespace (the dashboard is on its loopback)."""
    return ["ip", "netns", "exec", NETNS, sys.executable, "-m", "runward"]


def exits(sh: bool, how: str, n: int) -> set:
    """The exit facts a Ray run ending `how` with `n` may be reported as."""
    if how == "code":
        return {("code", n)}
    return {("signal", signal.Signals(n).name)} | ({("code", 128 + n)} if sh else set())


def marked(name: str, procs: list | None = None) -> dict:
    """host pid -> Proc of every live process whose environment carries the run's marker
    (`RUNWARD_RUN=NAME.N`, any attempt): the agent's own way of finding a Ray run's processes."""
    want = ("\0RUNWARD_RUN=%s." % name).encode()
    out = {}
    for p in truth.scan() if procs is None else procs:
        env = truth._read("/proc/%d/environ" % p.pid)
        if env is not None and (want in b"\0" + env):
            out[p.pid] = p
    return out


def check(m, doc: dict | None) -> list[str]:
    """What a Ray run's status must say beside the common invariants: a stop runward made is
    stopped by runward, whatever Ray's record of the driver's end."""
    if m.state != "stopped" or doc is None:
        return []
    ex = doc.get("exit") or {}
    if ex.get("stopped_by") != "runward":
        return ["inv3 %s: stopped by runward, status says Ray %s, stopped_by %s" % (
            m.name, doc.get("ray_state"), ex.get("stopped_by"))]
    return []


def exit_codes(facts: set) -> set:
    """The `driver_exit_code`s Ray may give for these exit facts: N for a code; for a signal,
    -N (the driver died by it) or 128+N (a shell above it)."""
    out = set()
    for fact in facts:
        if fact[0] == "code":
            out.add(fact[1])
        elif fact[0] == "signal":
            n = int(signal.Signals["SIG" + fact[1].replace("SIG", "", 1)])
            out |= {-n, 128 + n}
    return out


def history_says(cli, m) -> list[str]:
    """`history NAME` of a Ray run keeps what Ray forgets (docs/ray.md): one row per attempt,
    the last in the model's state, with Ray's word (a stop runward made: stopped_by runward;
    an end by itself: Ray's exit code, the signal's 128+N or -N where it died by one)."""
    rc, doc = cli("history", m.name, kind=m.kind)
    rows = (doc.get("result") or {}).get("attempts") or []
    if rc != 0 or len(rows) != m.attempt:
        return ["history %s: exit %d, %d attempts, the model %d: %s" % (m.name, rc, len(rows), m.attempt, str(doc)[:300])]
    last, said = rows[-1], rows[-1].get("ray") or {}
    if last.get("state") != m.state:
        return ["history %s: attempt %d reads %s, the model %s" % (m.name, m.attempt, last.get("state"), m.state)]
    if m.state == "stopped" and said.get("stopped_by") != "runward":
        return ["history %s: stopped by runward, its ray row says %s" % (m.name, said)]
    if m.state == "exited" and m.exits:
        if said.get("exit_code") not in exit_codes(m.exits):
            return ["history %s: Ray's exit code %s, the job's end is %s" % (m.name, said.get("exit_code"), sorted(m.exits))]
    return []


# The cluster is shared: another user's `scripts/ray-testbed restart-head|restart-node2` (which
# rewrites that node's pids file) makes the Jobs API refuse a while and Ray forget its jobs.
# A failure in a session that saw it is said as the harness's, not as runward's.
SEEN_AT: dict = {}


def restarts() -> tuple:
    """When each node of the cluster last (re)started: its pids file's mtime."""
    out = []
    for f in ("head.pids", "node2.pids"):
        try:
            out.append(os.stat(os.path.join(RAY_DIR, f)).st_mtime_ns)
        except OSError:
            out.append(None)
    return tuple(out)


def down() -> list:
    """The cluster's nodes none of whose daemons live now (a restart's KILL, before its pids
    file is written again)."""
    out = []
    for f in ("head.pids", "node2.pids"):
        try:
            with open(os.path.join(RAY_DIR, f)) as fh:
                pids = [int(line.split()[0]) for line in fh if line.strip()]   # "pid starttime" lines
        except (OSError, ValueError):
            continue
        if pids and not any(os.path.exists("/proc/%d" % p) for p in pids):
            out.append(f.split(".")[0])
    return out


def restarted() -> str | None:
    """Why a failure now is the world's: a node of the cluster restarted since a session of
    the ray kind began (SEEN_AT), or is down now, or None."""
    if "at" not in SEEN_AT:
        return None
    if restarts() != SEEN_AT["at"]:
        return "a node of the shared Ray cluster restarted under the session (%s/*.pids rewritten)" % RAY_DIR
    gone = down()
    if gone:
        return "the shared Ray cluster's %s is down (no daemon of %s/%s.pids lives)" % (
            " and ".join(gone), RAY_DIR, gone[0])
    return None
