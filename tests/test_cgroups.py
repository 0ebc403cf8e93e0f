"""A run's cgroup holds what no other search finds: a process the job moved into a cgroup below
the run's own (a nested runtime, a scope of its own), with its environment and session cleared
and the shim gone, is still the run's; stop ends it, verified from /proc, and stop, rm and prune
remove the run's own empty cgroups and no other's. Needs root and a writable cgroup tree (else
each test skips); ground truth from /proc and /sys/fs/cgroup."""

from __future__ import annotations

import json
import os
import signal

import pytest

from conftest import alive, fresh_name, kill_procs, marked, wait_for


NEST = r"""
for h in pids memory unified; do
  d=$(awk -F: -v h=$h '($2==h)||(h=="unified"&&$1=="0"){print $3}' /proc/self/cgroup)
  case "$d" in */runward/*) mkdir -p "/sys/fs/cgroup/$h$d/sub" && echo $$ > "/sys/fs/cgroup/$h$d/sub/cgroup.procs";; esac
done
setsid sh -c 'env -i sleep 300 >/dev/null 2>&1 &'
exec sleep 300
"""


def _subs(cgs):
    return [os.path.join(c, "sub") for c in cgs]


def _procs(paths):
    out = set()
    for p in paths:
        try:
            out.update(int(x) for x in open(os.path.join(p, "cgroup.procs")).read().split())
        except OSError:
            pass
    return out


def _leave_nothing(procs: dict, cgroups) -> None:
    """A test's own processes killed (by pid + start) and, deepest first, its run's cgroups
    removed once empty, whatever an assertion left behind."""
    kill_procs(procs)
    for d in sorted(_tree(cgroups), key=len, reverse=True):
        wait_for(lambda: not open(os.path.join(d, "cgroup.procs")).read().split(), 10, f"{d} empty")
        try:
            os.rmdir(d)
        except OSError:
            pass


def test_a_process_in_a_cgroup_below_the_runs_is_the_runs(cli):
    """A job (as root) that puts itself in a cgroup below the run's own (a nested runtime, a
    scope of its own) and leaves an escapee there that cleared its environment and its session:
    with the shim gone, only the cgroup ties it to the run, and the kernel keeps it in the run's
    subtree. A stop that reads the run's cgroup.procs alone calls the run dead (and 7d20ce8's
    rmdir of the run's cgroup then fails silently: it has a child)."""
    import signal
    rc, doc = cli.json("start", "cgnest", "--settle", "0.5", "--sh", NEST)
    assert rc == 0, doc
    cgs = doc["result"]["cgroups"]
    if not cgs:
        pytest.skip("no writable cgroup hierarchy here (not root)")
    wait_for(lambda: len(_procs(_subs(cgs))) >= 2, 10, "the job and its escapee in the nested cgroup")
    rec = __import__("json").loads((cli.home / "runs" / "cgnest" / "attempts" / "1.json").read_text())
    esc = [p for p in _procs(_subs(cgs)) if p != doc["result"]["pid"]]
    assert esc, _procs(_subs(cgs))
    try:
        os.kill(rec["shim"]["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(rec["shim"]["pid"]), 10, "the shim's death")
        rc, st = cli.json("stop", "cgnest", "--grace", "2")
        left = [p for p in esc if alive(p)]
        assert not left or rc != 0, "stop said %d (%s) with the escapee %s alive in %s" % (
            rc, st["result"].get("verified"), left, _subs(cgs))
        assert rc == 0 and not any(os.path.isdir(c) for c in cgs), (rc, [c for c in cgs if os.path.isdir(c)])
    finally:
        for p in _procs(_subs(cgs)):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        wait_for(lambda: not _procs(_subs(cgs)), 10, "the nested cgroup empty")
        for p in _subs(cgs) + cgs:
            try:
                os.rmdir(p)
            except OSError:
                pass


def test_stop_and_rm_remove_only_their_own_runs_empty_cgroups(cli, tmp_path):
    """Runs whose names share a prefix ("x", "x.1", "x-2") and a run "x" of another
    RUNWARD_HOME, each left with empty cgroups (shim and job SIGKILLed): stop and rm of "x"
    remove x's, and not one of the others'."""
    import json
    import signal
    other = dict(cli.env, RUNWARD_HOME=str(tmp_path / "home2"))
    cgs = {}
    for home, name in ((None, "x"), (None, "x.1"), (None, "x-2"), ("2", "x")):
        env = other if home else cli.env
        p = __import__("subprocess").run(cli.argv("start", name, "--settle", "0.2", "--json", "--", "sleep", "300"),
                                         cwd=cli.cwd, env=env, capture_output=True, text=True, timeout=60)
        doc = json.loads(p.stdout)
        assert p.returncode == 0, doc
        if not doc["result"]["cgroups"]:
            pytest.skip("no writable cgroup hierarchy here (not root)")
        h = tmp_path / ("home2" if home else "home")
        rec = json.loads((h / "runs" / name / "attempts" / "1.json").read_text())
        for pid in (rec["shim"]["pid"], doc["result"]["pid"]):
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), 10, "its death")
        cgs[(home, name)] = doc["result"]["cgroups"]
    assert all(os.path.isdir(c) for v in cgs.values() for c in v)
    try:
        for verb in ("stop", "rm"):
            p = cli.run(verb, "x")
            assert p.returncode == 0, p.stdout + p.stderr
            assert not any(os.path.isdir(c) for c in cgs[(None, "x")]), verb
            left = {k: [c for c in v if not os.path.isdir(c)] for k, v in cgs.items() if k != (None, "x")}
            assert not any(left.values()), "%s x removed another run's cgroups: %s" % (verb, left)
    finally:
        for v in cgs.values():
            for c in v:
                try:
                    os.rmdir(c)
                except OSError:
                    pass


MOVE = r"""
echo $$ > '%s'
for h in pids memory unified; do
  d=$(awk -F: -v h=$h '($2==h)||(h=="unified"&&$1=="0"){print $3}' /proc/self/cgroup)
  case "$d" in */runward/*) mkdir -p "/sys/fs/cgroup/$h$d/sub/deeper" && echo $$ > "/sys/fs/cgroup/$h$d/sub/deeper/cgroup.procs";; esac
done
exec env -i sleep 600
"""


def _tree(cgs):
    """Every directory at or below the run's cgroups (ground truth from /sys/fs/cgroup)."""
    out = []
    for c in cgs:
        for root, _dirs, _files in os.walk(c):
            out.append(root)
    return out


@pytest.mark.parametrize("supervised", [False, True], ids=["plain", "supervised"])
def test_a_child_moved_below_the_runs_cgroup_is_stopped_and_rm_leaves_no_cgroup(cli, supervised):
    from conftest import read_stat
    name = fresh_name("rv7c")
    pidf = cli.cwd / f"{name}.child"
    mover = cli.cwd / f"{name}.sh"
    mover.write_text(MOVE % pidf)
    sup = ["--restart", "always", "--backoff", "60s"] if supervised else []
    rc, doc = cli.json("start", name, "--settle", "0.5", *sup, "--sh", f"setsid sh '{mover}' & exec sleep 600")
    assert rc == 0, doc
    cgs = doc["result"]["cgroups"]
    if not cgs:
        pytest.skip("no writable cgroup hierarchy here (not root)")
    child = int(wait_for(lambda: pidf.exists() and pidf.read_text().strip(), 10, "the child's pid"))
    # moved, env cleared: wait until the child is sleep in the nested cgroup with no marker
    wait_for(lambda: any(str(child) in open(os.path.join(c, "sub", "deeper", "cgroup.procs")).read().split()
                         for c in cgs if os.path.isdir(os.path.join(c, "sub", "deeper"))), 10, "the child moved")
    wait_for(lambda: b"RUNWARD_RUN" not in open(f"/proc/{child}/environ", "rb").read(), 10, "the child's env cleared")
    procs = {child: read_stat(child)[1], doc["result"]["pid"]: doc["result"]["start_time"]}
    assert read_stat(child)[0] not in ("Z", "X")
    assert os.getsid(child) != os.getsid(doc["result"]["pid"]), "the child has its own session"
    rec = json.loads((cli.home / "runs" / name / "attempts" / "1.json").read_text())
    shim = rec["shim"]["pid"]
    try:
        os.kill(shim, signal.SIGKILL)
        wait_for(lambda: not alive(shim), 10, "the shim's death")
        rc, st = cli.json("stop", name, "--grace", "2")
        left = {p: s for p, s in procs.items() if alive(p, s)}
        assert not left, f"stop (exit {rc}, {st.get('result', {}).get('verified')}) left {left} alive"
        assert rc == 0 and "no_process_of_run_alive" in st["result"]["verified"], st
        rc, rmd = cli.json("rm", name)
        assert rc == 0, rmd
        assert not _tree(cgs), f"rm left the run's cgroups: {_tree(cgs)}"
        assert not (cli.home / "runs" / name / "attempts" / "1.json").exists()
    finally:
        _leave_nothing(procs, cgs)


def test_supervised_a_child_left_in_attempt_1s_nested_cgroup_is_stopped_after_the_restart(cli):
    """Supervised, the job exits by itself (after its child moved below attempt 1's cgroup, env
    cleared, own session); the shim starts attempt 2; then the shim is SIGKILLed. stop must end
    attempt 1's child too, and rm leave no cgroup of either attempt."""
    from conftest import gate, read_stat
    name = fresh_name("rv7u")
    pidf = cli.cwd / f"{name}.child"
    mover = cli.cwd / f"{name}.sh"
    mover.write_text(MOVE % pidf)
    go = cli.cwd / f"{name}.go"
    # attempt 1: leave the mover, wait for the gate, exit 3; attempt 2: sleep
    line = (f'n=${{RUNWARD_RUN##*.}}; if [ "$n" = 1 ]; then setsid sh \'{mover}\' & {gate(go)}; exit 3; fi; '
            "exec sleep 600")
    rc, doc = cli.json("start", name, "--settle", "0.3", "--restart", "always", "--backoff", "0", "--sh", line)
    assert rc == 0, doc
    cgs = doc["result"]["cgroups"]
    if not cgs:
        pytest.skip("no writable cgroup hierarchy here (not root)")
    child = int(wait_for(lambda: pidf.exists() and pidf.read_text().strip(), 10, "the child's pid"))
    wait_for(lambda: b"RUNWARD_RUN" not in open(f"/proc/{child}/environ", "rb").read(), 10, "the child's env cleared")
    procs = {child: read_stat(child)[1]}
    all_cgs = list(cgs)
    try:
        go.touch()
        a2 = cli.home / "runs" / name / "attempts" / "2.json"
        wait_for(lambda: a2.exists() and marked(f"{name}.2"), 20, "attempt 2 running")
        procs.update(marked(f"{name}.2"))
        rec2 = json.loads(a2.read_text())
        all_cgs += rec2.get("cgroups") or []
        shim = rec2["shim"]["pid"]
        os.kill(shim, signal.SIGKILL)
        wait_for(lambda: not alive(shim), 10, "the shim's death")
        rc, st = cli.json("stop", name, "--grace", "2")
        left = {p: s for p, s in procs.items() if alive(p, s)}
        assert not left, f"stop (exit {rc}, {st.get('result', {}).get('verified')}) left {left} alive"
        assert rc == 0, st
        rc, rmd = cli.json("rm", name)
        assert rc == 0, rmd
        assert not _tree(all_cgs), f"rm left the run's cgroups: {_tree(all_cgs)}"
    finally:
        _leave_nothing(procs, all_cgs)
