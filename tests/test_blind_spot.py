"""Hostile black-box review s3 (issue 25's late fixes): each test is a finding, reproduced
with real processes and files, ground truth read from /proc and the files themselves, never
from runward's own answers. Each fails on the code it was found on (d87cae8)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

from conftest import alive, read_stat, wait_for
from test_membership import kill_all, ordinary, procs_with, record, stat_fields  # noqa: F401 (a fixture)


# --- drift: a pushed directory's files are never hashed at start -----------------------------

def test_a_file_edited_on_the_target_inside_a_pushed_directory_is_drift(cli, tmp_path):
    """A run whose `files` is a directory: its start records {dir: None} (sha256 of a
    directory fails, kept as None), so `drift` ("the code on disk is not the code running",
    README) is blind to every file in it: a.py rewritten and b.py deleted on the target
    while the job runs, and status says nothing."""
    pkg = cli.cwd / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("print('a')\n")
    (pkg / "b.py").write_text("print('b')\n")
    dst = tmp_path / "dst" / "pkg"
    (cli.cwd / "runward.toml").write_text(
        f'[runs.dirdrift]\nsh = "exec sleep 600"\nfiles = ["pkg:{dst}"]\n')
    rc, doc = cli.json("deploy", "dirdrift")
    assert rc == 0, doc
    rc, doc = cli.json("start", "dirdrift", "--settle", "0.2")
    assert rc == 0, doc
    try:
        started_with = hashlib.sha256((dst / "a.py").read_bytes()).hexdigest()
        (dst / "a.py").write_text("print('changed behind runward')\n")
        (dst / "b.py").unlink()
        assert hashlib.sha256((dst / "a.py").read_bytes()).hexdigest() != started_with
        st = cli.status("dirdrift")
        assert st["state"] == "running", st
        drifted = {d["path"] for d in st.get("drift") or ()}
        assert {str(dst / "a.py"), str(dst / "b.py")} <= drifted, (
            "the code on disk is not the code running, and status does not say so: %s" % st.get("drift"))
    finally:
        cli.json("stop", "dirdrift", "--grace", "2")


# --- the lingering shim killed: what it held goes to pid 1, and nothing says so ---------------

def test_a_shim_killed_while_it_lingers_for_an_adopted_escapee_is_said_as_a_blind_spot(ordinary):
    """No cgroup (an ordinary user). The job exits by itself; its escapee (env -i, setsid,
    double fork) is adopted, and the shim lingers as its parent (shim._wait_adopted): `stray`.
    Then the shim is SIGKILLed from outside: the escapee goes to pid 1, untraceable. Before:
    status `exited` with no blind_spot, stop 'already stopped ... verified' with no
    blind_spot, rm removed the records, `sleep TOKEN` alive throughout. runs.blind_spot
    returns None whenever the shim recorded the exit itself, but a lingering shim recorded it
    and then held the orphans; killed, it dropped them."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}4"
    line = f'env -i setsid sh -c "(sleep {token} &); exit 0"; exit 3'
    p = run("start", "lingerkill", "--settle", "0", "--json", "--sh", line)
    # the job ends at once: within the settle period that start may call it an early exit (1)
    assert p.returncode in (0, 1) and json.loads(p.stdout)["result"]["pid"], p.stdout + p.stderr
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
        att = wait_for(lambda: record(run.home, "lingerkill").get("exit") and record(run.home, "lingerkill"),
                       what="the job's exit recorded")
        shim = att["shim"]
        wait_for(lambda: int(stat_fields(esc)[1]) == shim["pid"], what="the shim to hold the escapee")
        st = json.loads(run("status", "lingerkill", "--json").stdout)["result"]["runs"][0]
        assert st["state"] == "stray", st  # the late fix holds while the shim lives
        os.kill(shim["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
        assert alive(esc) and int(stat_fields(esc)[1]) != shim["pid"]  # ground truth: alive, at pid 1
        st = json.loads(run("status", "lingerkill", "--json").stdout)["result"]["runs"][0]
        seen = esc in (st.get("stray_processes") or []) + ((st.get("tree") or {}).get("pids") or [])
        assert seen or "cannot be found" in (st.get("blind_spot") or ""), (
            "status says %r with no word of what it cannot see while %d lives" % (st["state"], esc))
        p = run("stop", "lingerkill", "--grace", "2", "--json")
        doc = json.loads(p.stdout)
        assert not alive(esc) or "cannot be found" in ((doc.get("result") or {}).get("blind_spot") or ""), (
            "stop: %s while sleep %s (pid %d) lives" % (doc, token, esc))
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))


def test_a_shim_killed_in_its_backoff_while_it_holds_an_adopted_escapee_is_a_blind_spot(ordinary):
    """The same drop in a supervised run's backoff: attempt 1 exits (code 3) leaving an
    adopted escapee, the shim waits out a 60 s backoff as its parent, and is SIGKILLed.
    Before: status `exited`, stop 'already stopped ... verified', both with no blind_spot,
    while `sleep TOKEN` lived at pid 1."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}0"
    line = f'env -i setsid sh -c "(sleep {token} &); exit 0"; exit 3'
    p = run("start", "backoffkill", "--settle", "0", "--restart", "on-failure", "--max-restarts", "1",
            "--backoff", "60", "--json", "--sh", line)
    # the job ends at once: within the settle period that start may call it an early exit (1)
    assert p.returncode in (0, 1) and json.loads(p.stdout)["result"]["pid"], p.stdout + p.stderr
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
        att = wait_for(lambda: record(run.home, "backoffkill").get("exit") and record(run.home, "backoffkill"),
                       what="attempt 1's exit recorded")
        shim = att["shim"]
        assert int(stat_fields(esc)[1]) == shim["pid"] and not (run.home / "runs" / "backoffkill" / "attempts"
                                                                / "2.json").exists()
        os.kill(shim["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
        assert alive(esc)
        st = json.loads(run("status", "backoffkill", "--json").stdout)["result"]["runs"][0]
        seen = esc in (st.get("stray_processes") or []) + ((st.get("tree") or {}).get("pids") or [])
        assert seen or "cannot be found" in (st.get("blind_spot") or ""), st
        doc = json.loads(run("stop", "backoffkill", "--grace", "2", "--json").stdout)
        assert not alive(esc) or "cannot be found" in ((doc.get("result") or {}).get("blind_spot") or ""), doc
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))


def test_a_stray_run_whose_shim_was_killed_says_its_blind_spot_in_status_too(ordinary):
    """The job leaves two: `sleep 1TOKEN` in its session (found: the run is `stray`) and an
    env -i setsid escapee the shim adopted; the lingering shim is SIGKILLed. Status computed
    blind_spot only for orphaned/lost/exited, and `stray` is none of them: status said
    'stray, 1 still alive: stop ends them' (stop then said the blind spot, status never)."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}1"
    line = f'sleep 1{token} & env -i setsid sh -c "(sleep {token} &); exit 0"; exit 3'
    p = run("start", "straykill", "--settle", "0", "--json", "--sh", line)
    # the job ends at once: within the settle period that start may call it an early exit (1)
    assert p.returncode in (0, 1) and json.loads(p.stdout)["result"]["pid"], p.stdout + p.stderr
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
        att = wait_for(lambda: record(run.home, "straykill").get("exit") and record(run.home, "straykill"),
                       what="the job's exit recorded")
        shim = att["shim"]
        wait_for(lambda: int(stat_fields(esc)[1]) == shim["pid"], what="the shim to hold the escapee")
        os.kill(shim["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
        assert alive(esc)
        st = json.loads(run("status", "straykill", "--json").stdout)["result"]["runs"][0]
        assert st["state"] == "stray" and esc not in (st.get("stray_processes") or []), st
        assert "cannot be found" in (st.get("blind_spot") or ""), (
            "status: stray, with no word of sleep %s (pid %d) it cannot see: %s" % (token, esc, st))
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid) + procs_with(f"sleep\01{token}\0".encode(), run.uid))


def test_a_backoff_with_an_adopted_orphan_still_says_the_pending_restart(ordinary):
    """Issue 25 item 12: during every wait before a restart, status says `restarting` with
    `next_restart_at`. Attempt 1 exits (3) leaving an adopted escapee; the shim waits out a
    60 s backoff. Before: state `stray`, next_restart_at None (the pending restart unsaid),
    and the stop that cancelled it said only '1 process(es) dead' (no 'cancelled')."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}6"
    line = f'env -i setsid sh -c "(sleep {token} &); exit 0"; exit 3'
    p = run("start", "backoffstray", "--settle", "0", "--restart", "on-failure", "--max-restarts", "1",
            "--backoff", "60", "--json", "--sh", line)
    assert p.returncode in (0, 1) and json.loads(p.stdout)["result"]["pid"], p.stdout + p.stderr
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
        wait_for(lambda: record(run.home, "backoffstray").get("exit"), what="attempt 1's exit recorded")
        st = wait_for(lambda: (lambda s: s if s["state"] in ("stray", "restarting") else None)(
            json.loads(run("status", "backoffstray", "--json").stdout)["result"]["runs"][0]), what="the backoff")
        assert esc in (st.get("stray_processes") or []) + ((st.get("tree") or {}).get("pids") or []), st
        assert st.get("next_restart_at"), "a restart is pending in 60 s and status does not say so: %s" % st
        p = run("stop", "backoffstray", "--grace", "2", "--json")
        doc = json.loads(p.stdout)
        assert doc["result"].get("restart_cancelled") and "cancelled" in run("status", "backoffstray").stdout + \
            json.dumps(doc), doc
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))


# --- a lost run's session number, reused by another program -----------------------------------

REUSE = r'''
import os, sys
target, token = int(sys.argv[1]), sys.argv[2]
for _ in range(3000):
    r, w = os.pipe()
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(target - 1))
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if os.getpid() != target:
            os._exit(1)
        os.setsid()  # session and group TARGET, as the lost job's were
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", token])
        os._exit(0)  # the leader goes; its sleep stays in session TARGET
    os.close(w)
    hit = os.read(r, 1) == b"" and os.waitpid(pid, 0)[1] == 0
    os.close(r)
    if hit:
        sys.exit(0)
sys.exit(3)
'''


def test_a_lost_runs_reused_session_number_is_another_programs_and_never_stopped(cli):
    """A lost attempt (shim and job SIGKILLed: no exit record) keeps claiming session/group
    X (its job's pid) with no end bound: once X is free, any program that gets pid X and
    makes a session leaves processes that runward calls the run's. Before: status listed an
    unrelated `sleep` as the run's stray, `start` was refused over it, and `stop` SIGTERMed
    it ('1 process(es) dead, verified'): design rule 2 (pids are reused) and rule 3."""
    if os.geteuid() != 0 or not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        pytest.skip("needs root to pick the next pid (ns_last_pid) and make the reuse real")
    rc, doc = cli.json("start", "lostreuse", "--settle", "0.2", "--", "sleep", "600")
    assert rc == 0, doc
    att = record(cli.home, "lostreuse")
    shim, job = att["shim"], att["job"]
    token = f"8{os.getpid() % 100000:05d}6"
    try:
        for who in (shim, job):
            os.kill(who["pid"], signal.SIGKILL)
            wait_for(lambda: not alive(who["pid"], who["start"]), what="the run's process gone")
        assert cli.status("lostreuse")["state"] == "lost"
        # an unrelated program (no marker, no cgroup of the run, not adopted) in session X
        p = subprocess.run([sys.executable, "-c", REUSE, str(job["pid"]), token], env={"PATH": "/usr/bin:/bin"})
        if p.returncode != 0:
            pytest.skip("pid %d was not free to take again (a busy machine)" % job["pid"])
        other = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode()), what="the unrelated sleep")[0]
        assert int(stat_fields(other)[3]) == job["pid"] and b"RUNWARD_RUN" not in open(
            f"/proc/{other}/environ", "rb").read()
        st = cli.status("lostreuse")
        assert other not in (st.get("stray_processes") or []), "an unrelated process called the run's: %s" % st
        rc, doc = cli.json("stop", "lostreuse", "--grace", "2")
        assert alive(other), "stop signalled an unrelated process: %s" % doc
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode()))


# --- rm over what status says it cannot see -------------------------------------------------

def test_rm_of_a_run_whose_status_names_a_blind_spot_does_not_pass_over_it_in_silence(ordinary):
    """Design rule 11: nothing destructive is decided on unknown. No cgroup, the job and its
    shim SIGKILLed: status says (blind_spot) that an escapee may live unfound, and one does.
    Before: `rm` removed the records with not a word of it (exit 0), while `sleep TOKEN` ran."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}8"
    line = f'env -i setsid sh -c "(sleep {token} &); exit 0"; exec sleep 600'
    p = run("start", "escrm", "--settle", "0.2", "--json", "--sh", line)
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
        att = record(run.home, "escrm")
        wait_for(lambda: int(stat_fields(esc)[1]) == att["shim"]["pid"], what="the shim to adopt the escapee")
        for who in (att["shim"], att["job"]):
            os.kill(who["pid"], signal.SIGKILL)
            wait_for(lambda: not alive(who["pid"], who["start"]), what="the run's process gone")
        st = json.loads(run("status", "escrm", "--json").stdout)["result"]["runs"][0]
        assert "cannot be found" in (st.get("blind_spot") or ""), st  # status says it
        p = run("rm", "escrm", "--json")
        doc = json.loads(p.stdout)
        assert alive(esc)
        said = json.dumps(doc)
        assert p.returncode != 0 or "cannot be found" in said or "blind_spot" in said, (
            "rm removed the records in silence while sleep %s (pid %d) lives: %s" % (token, esc, said))
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))


# --- restart --deploy leaves a locally deleted file on the target, unsaid ---------------------

def test_restart_deploy_says_the_local_drift_it_left(cli, tmp_path):
    """A file renamed locally in a pushed directory (a.py -> a2.py): `restart --deploy` sends
    a2.py and leaves a.py on the target (no --delete), which the job still sees. Before: exit
    0, 'verified', no word of it in the result; the next plain `restart` is then refused for
    that very drift. `--no-deploy` lists the local_drift it leaves; --deploy must as well."""
    pkg = cli.cwd / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("print('a')\n")
    dst = tmp_path / "dst" / "pkg"
    (cli.cwd / "runward.toml").write_text(f'[runs.renamed]\nsh = "exec sleep 600"\nfiles = ["pkg:{dst}"]\n')
    assert cli.json("deploy", "renamed")[0] == 0
    rc, doc = cli.json("start", "renamed", "--settle", "0.2")
    assert rc == 0, doc
    try:
        (pkg / "a.py").rename(pkg / "a2.py")
        rc, doc = cli.json("restart", "renamed", "--deploy", "--settle", "0.2")
        assert rc == 0, doc
        assert (dst / "a.py").exists() and (dst / "a2.py").exists()  # ground truth: both on the target
        assert "local_drift" in json.dumps(doc["result"]) and str(dst / "a.py") in json.dumps(doc["result"]), (
            "restart --deploy left %s on the target and said nothing: %s" % (dst / "a.py", doc["result"]))
    finally:
        cli.json("stop", "renamed", "--grace", "2")


# --- local_drift's "still deployed" read from deployed.json, not from the target -------------

def test_a_file_push_delete_removed_is_not_said_to_be_still_deployed(cli, tmp_path):
    """b.py deleted locally, then `push --delete` of the same directory removes it from the
    target (ground truth: gone). deployed.json is only `deploy`'s: status went on saying 'b.py
    deleted locally, still deployed', and `restart` refused for a drift that is not there."""
    pkg = cli.cwd / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("a\n")
    (pkg / "b.py").write_text("b\n")
    dst = tmp_path / "dst" / "pkg"
    (cli.cwd / "runward.toml").write_text(f'[runs.pushdel]\nsh = "exec sleep 600"\nfiles = ["pkg:{dst}"]\n')
    assert cli.json("deploy", "pushdel")[0] == 0
    rc, doc = cli.json("start", "pushdel", "--settle", "0.2")
    assert rc == 0, doc
    try:
        (pkg / "b.py").unlink()
        rc, doc = cli.json("push", "--on", "local", "--delete", f"pkg:{dst}")
        assert rc == 0, doc
        assert not (dst / "b.py").exists() and (dst / "a.py").exists()  # ground truth
        st = cli.status("pushdel")
        stale = [d for d in st.get("local_drift") or () if d.get("remote") == str(dst / "b.py")]
        assert not stale, "status says %s is still deployed; it is gone: %s" % (dst / "b.py", stale)
    finally:
        cli.json("stop", "pushdel", "--grace", "2")


# --- a local file of a pushed directory that cannot be read -----------------------------------

def _unreadable_project(run, name, sh):
    base = run.home.parent
    pkg = base / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("print(1)\n")
    (base / "runward.toml").write_text(f'[runs.{name}]\nsh = "{sh}"\nfiles = ["pkg:{base}/dst/pkg"]\n')
    for p in (pkg, pkg / "a.py", base / "runward.toml"):
        os.chown(p, run.uid, run.uid)
    p = run("deploy", name, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    return pkg


def test_status_with_an_unreadable_local_file_in_a_pushed_directory_answers(ordinary):
    """`status` in the project reads the local files for local_drift; one it may not read
    (mode 000) made it die with a PermissionError traceback, exit 1, no JSON document under
    --json (README: every command prints exactly one)."""
    run = ordinary
    pkg = _unreadable_project(run, "unread", "exec sleep 600")
    p = run("start", "unread", "--settle", "0.2", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        (pkg / "a.py").chmod(0)
        p = run("status", "unread", "--json")
        assert "Traceback" not in p.stderr, p.stderr[-600:]
        doc = json.loads(p.stdout)  # one JSON document
        assert str(pkg / "a.py") in json.dumps(doc), doc
    finally:
        run("stop", "unread", "--grace", "2")


def test_restart_deploy_that_stopped_the_run_never_exits_2(ordinary):
    """README: a restart's exit 2 means bad input found before anything was stopped ("the old
    attempt untouched"). A local file that turns unreadable after the plan (the old job's
    TERM trap chmods it, as any process of the user may) failed the deploy after the stop:
    exit 2, 'the run is stopped'. A script reading exit 2 as untouched is misled; the other
    deploy failures after the stop (disk full, a directory in the way) are exit 1."""
    run = ordinary
    base = run.home.parent
    pkg = _unreadable_project(run, "unread2", f"trap 'chmod 000 {base}/pkg/a.py; exit 0' TERM; "
                                              "while :; do sleep 0.1; done")
    p = run("start", "unread2", "--settle", "0.2", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    job = record(run.home, "unread2")["job"]
    try:
        (pkg / "a.py").write_text("print(2)\n")
        p = run("restart", "unread2", "--deploy", "--settle", "0.2", "--json")
        stopped = not alive(job["pid"], job["start"])
        assert not (p.returncode == 2 and stopped), (
            "exit 2 (untouched, README) while the old attempt was stopped: %s" % p.stdout[-400:])
    finally:
        (pkg / "a.py").chmod(0o644)
        run("stop", "unread2", "--grace", "2")


# --- a supervised restart's earlier attempt's cgroup is searched by nobody --------------------

def test_a_supervised_runs_first_attempt_escapee_is_ended_before_its_restart(cli):
    """Root, with cgroups. Attempt 1 leaves an escapee (env -i, setsid, double fork: it stays
    in attempt 1's cgroup, adopted by the shim) and exits 3. The shim ends what attempt 1 left
    before it restarts (a launcher that backgrounds its job would else add one copy per
    restart), so no escapee of attempt 1 lives beside attempt 2, where a later search of
    attempt 2's cgroup alone (the shim SIGKILLed) could not see it. Ground truth: /proc."""
    token = f"8{os.getpid() % 100000:05d}4"
    line = (f'n=${{RUNWARD_RUN##*.}}; if [ $n = 1 ]; then env -i setsid sh -c "(sleep {token} &); exit 0"; '
            'exit 3; fi; exec sleep 600')
    rc, doc = cli.json("start", "supcg", "--settle", "0", "--restart", "on-failure", "--max-restarts", "1",
                       "--backoff", "0", "--sh", line)
    try:
        if not (doc.get("result") or {}).get("cgroups") and not record(cli.home, "supcg").get("cgroups"):
            pytest.skip("no cgroup for runs here (needs root and a writable cgroup tree)")
        att2 = wait_for(lambda: (lambda a: a if a.get("job") else None)(record(cli.home, "supcg", 2)),
                        what="attempt 2 running")
        wait_for(lambda: not procs_with(f"sleep\0{token}\0".encode()), what="attempt 1's escapee ended")
        shim = att2["shim"]
        os.kill(shim["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(shim["pid"], shim["start"]), what="the shim gone")
        rc, doc = cli.json("stop", "supcg", "--grace", "2")
        assert rc == 0 and doc["result"]["verified_dead"], doc
        assert not procs_with(f"sleep\0{token}\0".encode()) and not alive(att2["job"]["pid"], att2["job"]["start"])
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode()))
        cli.json("stop", "supcg", "--grace", "1")


# --- a file where the source has a directory: replaced without --delete, unsaid ---------------

def _strings(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)
    elif isinstance(doc, str):
        yield doc


def test_a_file_where_the_source_has_a_directory_is_not_removed_unsaid(cli, tmp_path):
    """The target has a file `sub` where the source has a directory `sub/`. The dry run lists
    only what it would send; the real push (no --delete) removes the file, its bytes gone,
    and makes the directory: exit 0, 'verified', no word of it. The reverse (a directory
    where a file goes) is refused (F4). Either refuse, or say it in the plan."""
    pkg = cli.cwd / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "b.py").write_text("b\n")
    dst = tmp_path / "dst" / "pkg"
    dst.mkdir(parents=True)
    (dst / "sub").write_text("the operator's notes, not runward's\n")
    rc, plan = cli.json("push", "--on", "local", "--dry-run", f"pkg:{dst}")
    said = str(dst / "sub") in set(_strings(plan))
    rc, doc = cli.json("push", "--on", "local", f"pkg:{dst}")
    if (dst / "sub").is_dir():  # ground truth: the file is gone
        assert said and str(dst / "sub") in set(_strings(doc)), (
            "the file %s was removed without --delete and neither the plan nor the push said so: %s"
            % (dst / "sub", doc))
    else:
        assert rc != 0 and (dst / "sub").read_text().startswith("the operator's"), doc
