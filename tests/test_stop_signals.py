"""What a stop sends and what it then calls dead, from the outside through the CLI with real
processes: one stop signal per process, ESRCH as the only proof of death when pidfds run out,
the members of the job's session found without a cgroup, the old attempt's grace kept by
--replace, and runward's own KILL never read as the OOM killer's."""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, alive, read_stat, wait_for, world_readable_src

PY = sys.executable


# --- a stop signals each process once -------------------------------------------------------

SIGNAL_COUNTER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    out = sys.argv[1]
    HELPER = '''
    import signal, sys, time
    out = sys.argv[1]
    def on(s, f):
        open(out, "a").write("helper %d\\\\n" % s)
    signal.signal(signal.SIGTERM, on)
    signal.signal(signal.SIGINT, on)
    open(out, "a").write("helper up\\\\n")
    time.sleep(1.5)
    '''
    got = []
    def on(s, f):
        got.append(time.time())
        open(out, "a").write("job %d\\n" % s)
        if len(got) == 1:  # a checkpoint uploader started on the stop signal
            subprocess.Popen([sys.executable, "-c", HELPER, out])
    signal.signal(signal.SIGTERM, on)
    signal.signal(signal.SIGINT, on)
    print("ready", flush=True)
    while not got or time.time() - got[0] < 3.0:
        time.sleep(0.05)
""")


def test_stop_sends_the_stop_signal_to_each_process_once(cli, tmp_path):
    """A job that starts a helper when it gets SIGTERM must not get a second SIGTERM: to
    torchrun, Lightning and the HF Trainer a second signal means "abort now"."""
    script = tmp_path / "job.py"
    script.write_text(SIGNAL_COUNTER)
    out = tmp_path / "signals.txt"
    rc, doc = cli.json("start", "once", "--settle", "0.3", "--", PY, str(script), str(out))
    assert rc == 0, doc
    rc, doc = cli.json("stop", "once", "--grace", "20")
    assert rc == 0, doc
    lines = out.read_text().splitlines()
    assert lines.count("job 15") == 1, lines
    assert "helper up" in lines
    assert lines.count("helper 15") <= 1, lines
    for f in doc["result"]["processes"]:
        assert f["signals"].count("SIGTERM") <= 1, f
        assert len(f["signals"]) <= 2 and f["signals"][-1:] != ["SIGTERM", "SIGTERM"], f


# --- only ESRCH means gone -------------------------------------------------------------------

def _low_fd_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))


def test_kill_under_a_low_fd_limit_never_calls_the_living_dead(cli, tmp_path):
    """With few descriptors pidfd_open fails with EMFILE: those processes must still be
    signalled and watched (by pid and start time), and reported dead only once seen dead."""
    token = "98765%d" % os.getpid()
    procs = [subprocess.Popen(["sleep", token]) for _ in range(60)]
    try:
        wait_for(lambda: all(read_stat(p.pid) for p in procs), what="sleepers")
        p = subprocess.run(cli.argv("kill", f"sleep {token}", "--yes", "--max-procs", "100", "--grace", "5", "--json"),
                           cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=120,
                           preexec_fn=_low_fd_limit)
        doc = json.loads(p.stdout)
        for q in procs:
            q.poll()  # reap what died, so "alive" below is the kernel's truth
        living = [q.pid for q in procs if q.returncode is None and alive(q.pid)]
        if doc["result"].get("verified_dead"):
            assert not living, f"verified_dead, yet {len(living)} of 60 live: {living[:5]}"
        assert not living, (p.returncode, doc)
        assert p.returncode == 0, doc
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()


# --- the run's session and group stay part of it ------------------------------------------

NONROOT = "rwtrust"


@pytest.fixture
def nonroot(tmp_path):
    """A CLI runner as an ordinary user: no cgroup of its own, so only the session and
    group (and the marker) can find what the job left behind."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create and switch to an ordinary user")
    py = shutil.which("python3", path="/usr/bin:/bin")
    if not py:
        pytest.skip("no system python3 for the ordinary user")
    try:
        pw = pwd.getpwnam(NONROOT)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", NONROOT], check=True)
        pw = pwd.getpwnam(NONROOT)
    base = Path(f"/tmp/rwtrust-{os.getpid()}-{tmp_path.name}")
    base.mkdir(mode=0o700)
    os.chown(base, pw.pw_uid, pw.pw_gid)

    def run(*args, timeout=120):
        env = {"PATH": "/usr/bin:/bin", "RUNWARD_HOME": str(base / "home"), "PYTHONPATH": world_readable_src(),
               "HOME": str(base), "LANG": "C.UTF-8"}
        return subprocess.run([py, "-m", "runward", *args], cwd=base, env=env, capture_output=True, text=True,
                              timeout=timeout, user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])

    probe = run("--help")
    if probe.returncode != 0:
        pytest.skip(f"the ordinary user cannot run runward from {ROOT}: {probe.stderr[-300:]}")
    yield run, base
    subprocess.run(["pkill", "-KILL", "-u", NONROOT])
    shutil.rmtree(base, ignore_errors=True)


def _pids_of_user(uid: int, needle: bytes) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid != uid:
                    continue
                if needle in Path(f"/proc/{d}/cmdline").read_bytes():
                    st = read_stat(int(d))
                    if st and st[0] != "Z":
                        out.append(int(d))
            except OSError:
                pass
    return out


def test_session_member_that_cleared_its_env_outlives_the_leader(nonroot):
    """Without a cgroup, a child that cleared its environment and stays in the job's session
    is found by status (stray processes alive, not plain "exited") and ended by stop."""
    run, base = nonroot
    uid = pwd.getpwnam(NONROOT).pw_uid
    token = b"876543%d" % os.getpid()
    p = run("start", "sess", "--settle", "0.2", "--json", "--sh",
            f"env -i /bin/sleep {token.decode()} & sleep 1; exit 0")
    assert p.returncode == 0, p.stdout + p.stderr
    leader = json.loads(p.stdout)["result"]["pid"]
    # the leader's own command line carries the token too: it is the job, not a stray
    stray = wait_for(lambda: [q for q in _pids_of_user(uid, token) if q != leader], what="the env -i child")
    # the leader exits after a second; the child stays in its session and group
    wait_for(lambda: json.loads(run("status", "sess", "--json").stdout)["result"]["runs"][0].get("exit"),
             what="the leader's exit recorded")
    st = json.loads(run("status", "sess", "--json").stdout)["result"]["runs"][0]
    assert set(stray) <= set(st.get("stray_processes") or []), st
    assert st["state"] != "exited", st
    p = run("stop", "sess", "--grace", "5", "--json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["result"]["verified_dead"] and not doc["result"]["already_stopped"], doc
    assert not [q for q in stray if alive(q)], stray


def test_replace_uses_the_old_attempts_grace(cli, tmp_path):
    """The old job needs its own (long) grace to checkpoint; --replace must not cut it short
    with the new request's default."""
    script = tmp_path / "slowckpt.py"
    script.write_text(textwrap.dedent("""
        import signal, sys, time
        def on(s, f):
            time.sleep(2.5); print("checkpoint saved", flush=True); sys.exit(0)
        signal.signal(signal.SIGTERM, on)
        print("up", flush=True)
        while True: time.sleep(0.1)
    """))
    rc, doc = cli.json("start", "rp", "--settle", "0.3", "--grace", "20", "--", PY, str(script))
    assert rc == 0, doc
    rc, doc = cli.json("start", "rp", "--settle", "0.3", "--replace", "--grace", "1", "--", PY, str(script))
    assert rc == 0, doc
    rep = doc["result"]["replaced"]
    assert rep["grace_s"] == 20, rep
    assert any(f["fate"].startswith("exited_after") for f in rep["processes"]), rep
    cli.json("stop", "rp", "--grace", "10")


def test_a_kill_sent_by_runwards_own_stop_is_no_oom_alert(cli):
    """stop's KILL after the grace of a TERM-ignoring job: the job ended by SIGKILL, but not
    the OOM killer's; status must not guess "possibly OOM-killed" (hostile review F5). A job
    SIGKILLed from outside still gets the guess."""
    rc, doc = cli.json("start", "stopkill", "--settle", "0.3", "--grace", "1", "--sh", 'trap "" TERM; exec sleep 600')
    assert rc == 0, doc
    rc, doc = cli.json("stop", "stopkill")
    assert rc == 0 and any(p["fate"] == "killed" for p in doc["result"]["processes"]), doc
    st = cli.status("stopkill")
    kinds = [a["kind"] for a in (st.get("health") or {}).get("alerts") or []]
    assert "oom_killed" not in kinds and "OOM" not in cli.run("status", "stopkill").stdout, st
    rc, doc = cli.json("start", "outkill", "--settle", "0.3", "--", "sleep", "600")
    assert rc == 0, doc
    os.kill(doc["result"]["pid"], signal.SIGKILL)
    st = wait_for(lambda: (lambda s: s if s["state"] == "exited" else None)(cli.status("outkill")), what="the exit")
    assert "oom_killed" in [a["kind"] for a in (st.get("health") or {}).get("alerts") or []], st
