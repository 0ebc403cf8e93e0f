"""The verified lifecycle on the local target, with real processes and real process trees."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import EXAMPLE, alive, gate, marked, read_stat, wait_for

PY = sys.executable


def job(*env: str) -> list[str]:
    """start arguments for the example job with TRAIN_* switches."""
    args = []
    for e in ("TRAIN_STEP_SECONDS=0.05", *env):
        args += ["--env", e]
    return [*args, "--", PY, str(EXAMPLE)]


def test_start_status_stop_roundtrip(cli):
    rc, doc = cli.json("start", "t", "--settle", "0.5", *job())
    assert rc == 0, doc
    res = doc["result"]
    assert res["alive_after_settle"] is True and "alive_after_settle" in res["verified"]
    pid = res["pid"]
    # the reported pid is the real program's (python running train.py), not a wrapper
    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert cmd[1].endswith(b"train.py"), cmd
    assert Path(f"/proc/{pid}/environ").read_bytes().count(b"RUNWARD_RUN=t.1") == 1
    st = cli.status("t")
    assert st["state"] == "running" and st["pid"] == pid
    assert st["tree"]["processes"] >= 3  # main + 2 workers (+ escapee)
    assert st["log"]["exists"] and st["log"]["size"] > 0
    before = marked("t.")
    assert pid in before
    rc, doc = cli.json("stop", "t", "--grace", "10")
    assert rc == 0, doc
    assert doc["result"]["verified_dead"] is True
    assert not [p for p, s in before.items() if alive(p, s)]
    st = cli.status("t")
    assert st["state"] == "exited"
    # the example job checkpoints on TERM and exits 0
    assert st["exit"]["code"] == 0
    assert "checkpoint saved" in Path(st["log"]["path"]).read_text()


def test_stop_kills_escaped_double_fork_and_term_ignorer(cli):
    rc, doc = cli.json("start", "esc", "--settle", "0.5",
                       *job("TRAIN_ESCAPEE_LINGER=1", "TRAIN_IGNORE_TERM=1", "TRAIN_WORKERS=2"))
    assert rc == 0, doc
    # the job logs its escapee's pid once the double fork is done: before that its first child
    # is still in the job's session, and its middle ones come and go (a quick /proc read saw them)
    log = Path(cli.status("esc")["log"]["path"])
    wait_for(lambda: "escapee_pid=" in log.read_text() and "escapee_pid=-" not in log.read_text(),
             what="the job to say its escapee's pid")
    tree = wait_for(lambda: (lambda m: m if len(m) >= 4 else None)(marked("esc.")), what="4 processes of the run")
    # the escapee is in its own session, its parent is not the job: pgrp/sid differ
    sids = {Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[3] for p in tree}
    assert len(sids) >= 2, "expected the escapee in a session of its own"
    rc, doc = cli.json("stop", "esc", "--grace", "1")
    assert rc == 0, doc
    res = doc["result"]
    assert res["verified_dead"] is True
    fates = {p["pid"]: p["fate"] for p in res["processes"]}
    assert set(tree) <= set(fates), (tree, fates)
    assert "killed" in fates.values(), "the TERM-ignoring worker must have been KILLed"
    assert not [p for p, s in tree.items() if alive(p, s)]
    assert not marked("esc.")


HEIR = r"""
import os, signal, sys, time
def on_term(*_):
    if os.fork() == 0:  # the heir: forked as the stop's TERM lands, needs 1.5 s to end cleanly
        signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), os._exit(0)))
        return  # to the loop below (a handler runs no other handler while it runs)
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_child_forked_as_the_stop_lands_gets_the_rest_of_the_grace_and_one_term(cli):
    """A job whose TERM handler forks a child and exits: the stop finds the child once every
    process it knew is dead, gives it TERM once, and waits for it within the grace: it ends
    by itself after 1.5 s, not killed, and no process of the run is left."""
    rc, doc = cli.json("start", "heir", "--settle", "0.3", "--", PY, "-c", HEIR)
    assert rc == 0, doc
    rc, doc = cli.json("stop", "heir", "--grace", "10")
    assert rc == 0, doc
    res = doc["result"]
    fates = {p["pid"]: p for p in res["processes"]}
    assert len(fates) == 2 and res["verified_dead"], res
    assert all(p["fate"] == "exited_after_SIGTERM" and p["signals"] == ["SIGTERM"] for p in fates.values()), \
        [(p["fate"], p["signals"], p.get("exited_after")) for p in fates.values()]
    assert res["stop_s"] >= 1.5, res
    assert not marked("heir.")


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/pids", os.W_OK) and not os.access("/sys/fs/cgroup", os.W_OK),
                    reason="needs a writable cgroup hierarchy (root)")
def test_cgroup_catches_child_that_clears_env_and_double_forks(cli, tmp_path):
    pidfile = tmp_path / "hidden.pid"
    script = f"setsid sh -c 'env -i sh -c \"echo \\$\\$ > {pidfile}; exec sleep 300\" &' ; exec sleep 300"
    rc, doc = cli.json("start", "cg", "--settle", "0.3", "--sh", script)
    assert rc == 0, doc
    assert doc["result"]["cgroups"], "expected a cgroup for the run on this machine"
    hidden = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="hidden pid"))
    env = Path(f"/proc/{hidden}/environ").read_bytes()
    assert b"RUNWARD_RUN" not in env  # it escaped the marker
    start = read_stat(hidden)[1]
    rc, doc = cli.json("stop", "cg", "--grace", "2")
    assert rc == 0, doc
    assert not alive(hidden, start)


def test_stale_pid_is_never_signalled(cli, tmp_path):
    rc, doc = cli.json("start", "stale", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    rc, doc = cli.json("stop", "stale", "--grace", "5")
    assert rc == 0
    # an unrelated process now "owns" the recorded pid: forge the record to point at it
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        rec_path = cli.home / "runs" / "stale" / "attempts" / "1.json"
        rec = json.loads(rec_path.read_text())
        rec["job"]["pid"] = victim.pid  # same pid, but the recorded start time is the old job's
        rec["exit"] = None
        rec_path.write_text(json.dumps(rec))
        st = cli.status("stale")
        assert st["state"] != "running"
        rc, doc = cli.json("stop", "stale", "--grace", "1")
        assert rc == 0 and doc["result"]["already_stopped"] is True
        assert alive(victim.pid), "runward signalled a pid whose start time did not match"
    finally:
        victim.kill()
        victim.wait()


def test_stop_and_start_from_a_shell_whose_command_line_contains_the_job(cli):
    # The classic trap: `pkill -f train.py` inside `bash -c '...train.py...'` kills the bash.
    # runward's search never sees its own words in argv (the request is on stdin), and it never
    # signals its ancestors, so the chain completes.
    rc, doc = cli.json("start", "trap", "--settle", "0.3", *job())
    assert rc == 0, doc
    first_pid = doc["result"]["pid"]
    base = " ".join(cli.argv())
    line = (f"{base} stop trap --grace 5 && {base} start trap --settle 0.3 --env TRAIN_STEP_SECONDS=0.05 "
            f"-- {PY} {EXAMPLE}; echo done")
    p = subprocess.run(["bash", "-c", line], cwd=cli.cwd, env=cli.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("done")
    st = cli.status("trap")
    assert st["state"] == "running" and st["attempt"] == 2 and st["pid"] != first_pid


def test_protected_decides_each_pid_as_the_whole_rule_does(cli):
    # protected() answers per pid when asked (a stop asks about a few); its answers must be
    # the rule's: pid 1, us and our ancestors, kernel threads, every shim; never the job
    from runward.agent.core import procfs
    rc, doc = cli.json("start", "prot", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    shim = json.loads((cli.home / "runs" / "prot" / "attempts" / "1.json").read_text())["shim"]["pid"]
    procs = procfs.scan()
    prot = procfs.protected(procs)
    kernel = [p.pid for p in procs.values() if p.ppid == 2]
    assert kernel and 1 in prot and os.getpid() in prot and os.getppid() in prot and all(k in prot for k in kernel)
    assert shim in prot and doc["result"]["pid"] not in prot
    rule = procfs.ancestors(os.getpid(), procs) | {1} | {p.pid for p in procs.values() if p.pid == 2 or p.ppid == 2} \
        | {p.pid for p in procs.values() if p.pid == p.sid and b"runward-shim" in p.cmdline_raw()}
    assert prot.all() == rule and {pid for pid in procs if pid in prot} | prot.always == rule


def test_exit_of_unattended_job_is_recorded(cli):
    rc, doc = cli.json("start", "ends", "--settle", "0.1", "--sh", gate(cli.cwd / "go-ends") + "; exit 7")
    assert rc == 0, doc
    (cli.cwd / "go-ends").touch()
    st = wait_for(lambda: (lambda s: s if s["state"] == "exited" else None)(cli.status("ends")),
                  what="the job to exit")
    assert st["exit"]["code"] == 7 and st["exit"]["signal"] is None
    rc, doc = cli.json("start", "sig", "--settle", "0.1", "--sh", gate(cli.cwd / "go-sig") + "; kill -SEGV $$")
    assert rc == 0, doc
    (cli.cwd / "go-sig").touch()
    st = wait_for(lambda: (lambda s: s if s["state"] == "exited" else None)(cli.status("sig")),
                  what="the job to die")
    assert st["exit"]["signal"] == "SIGSEGV"


def test_early_exit_is_reported_at_once_with_log_tail(cli):
    t0 = time.monotonic()
    rc, doc = cli.json("start", "crash", "--settle", "30", *job("TRAIN_CRASH_AT=2"))
    elapsed = time.monotonic() - t0
    assert rc == 1
    assert doc["ok"] is False and doc["error"]["type"] == "ExitedEarly"
    assert doc["result"]["exit"]["code"] == 1
    assert any("RuntimeError" in ln for ln in doc["result"]["last_lines"])
    assert elapsed < 15, "an early exit must be reported when it happens, not after the settle"


def test_concurrent_starts_give_one_job(cli):
    procs = [cli.popen("start", "dup", "--settle", "0.5", "--json", "--", "sleep", "300") for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    loser = json.loads(next(o for p, o in zip(procs, outs) if p.returncode == 1)[0])
    assert loser["error"]["type"] == "AlreadyRunning"
    assert len(marked("dup.")) == 1


def test_cli_killed_mid_start_then_status_is_true(cli):
    p = cli.popen("start", "k9", "--settle", "5", "--", "sleep", "300")
    rec = cli.home / "runs" / "k9" / "attempts" / "1.json"
    wait_for(lambda: rec.exists() and json.loads(rec.read_text()).get("job"), what="the job record")
    p.kill()
    p.wait()
    st = cli.status("k9")
    truth = marked("k9.")
    assert st["state"] == "running" and st["pid"] in truth


def test_cli_killed_mid_stop_then_status_is_true(cli):
    rc, _ = cli.json("start", "k9s", "--settle", "0.3", "--", PY, "-c",
                     "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)")
    assert rc == 0
    p = cli.popen("stop", "k9s", "--grace", "3")
    wait_for(lambda: _agent_child_of(p.pid), what="the stop's agent to run")
    time.sleep(0.5)  # likely inside the grace period now; the truth is checked below, not assumed
    p.kill()
    p.wait()
    st = cli.status("k9s")
    truth = marked("k9s.")
    assert (st["state"] == "running") == bool(truth)
    # and a later stop finishes the job verifiably
    rc, doc = cli.json("stop", "k9s", "--grace", "0.5")
    assert rc == 0 and not marked("k9s.")
    assert cli.status("k9s")["state"] == "exited"


def _agent_child_of(pid: int) -> bool:
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"import sys,os,marshal" in cmd:
                return True
    return False


def test_orphaned_and_lost_states(cli):
    rc, doc = cli.json("start", "orph", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    rec = json.loads((cli.home / "runs" / "orph" / "attempts" / "1.json").read_text())
    os.kill(rec["shim"]["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(rec["shim"]["pid"]), what="the shim to die")
    st = cli.status("orph")
    assert st["state"] == "orphaned"
    rc, doc = cli.json("stop", "orph", "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"]
    # a record from another boot is "lost"
    rc, _ = cli.json("start", "gone", "--settle", "0.2", "--", "sleep", "300")
    path = cli.home / "runs" / "gone" / "attempts" / "1.json"
    rec = json.loads(path.read_text())
    pid, start = rec["job"]["pid"], rec["job"]["start"]
    rec["boot_id"] = "00000000-0000-0000-0000-000000000000"
    path.write_text(json.dumps(rec))
    assert cli.status("gone")["state"] == "lost"
    os.kill(pid, signal.SIGKILL)


def test_secrets_are_recorded_but_never_printed(cli, tmp_path):
    proof = tmp_path / "proof"
    secret = "s3cr3t-value-42"
    p = cli.run("start", "sec", "--settle", "0.3", "--env", f"HF_TOKEN={secret}", "--env", "PLAIN=visible",
                "--sh", f'printf %s "$HF_TOKEN" > {proof}; exec sleep 300')
    assert p.returncode == 0, p.stderr
    wait_for(lambda: proof.exists() and proof.read_text() == secret, what="the job to see its secret")
    outputs = [p.stdout + p.stderr]
    for args in (["status", "sec"], ["status", "sec", "--json"], ["start", "sec", "--json", "--", "true"],
                 ["logs", "sec"], ["stop", "sec", "--json"]):
        r = cli.run(*args)
        outputs.append(r.stdout + r.stderr)
    assert all(secret not in o for o in outputs)
    rc, doc = cli.json("restart", "sec", "--settle", "0.3")
    assert rc == 0, doc
    assert secret not in json.dumps(doc)
    # restart re-used the secret on the target without it ever leaving the target
    st = cli.status("sec")
    assert st["state"] == "running"
    rec = json.loads((cli.home / "runs" / "sec" / "attempts" / "2.json").read_text())
    assert rec["env"]["HF_TOKEN"] == secret and rec["env"]["PLAIN"] == "visible"
    assert oct((cli.home / "runs" / "sec" / "attempts" / "2.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("args,needle", [
    (["start", "../x", "--", "true"], "../x"),
    (["start", "bad name", "--", "true"], "bad name"),
    (["start", "x" * 65, "--", "true"], "x" * 65),
    (["start", "ok", "--env", "NOEQUALS", "--", "true"], "NOEQUALS"),
    (["start", "ok", "--cwd", "/nonexistent/dir", "--", "true"], "/nonexistent/dir"),
    (["start", "ok", "--stop-signal", "FOO", "--", "true"], "FOO"),
    (["start", "ok", "--", "no-such-command-xyz"], "no-such-command-xyz"),
    (["start", "ok", "--settle", "-1", "--", "true"], "-1"),
    (["start", "ok"], "no command"),
    (["start", "ok", "--ready", "(unclosed", "--", "true"], "(unclosed"),
    (["start", "ok", "--gpus", "a,b", "--", "true"], "a,b"),
    (["start", "ok", "--on", "ftp://x", "--", "true"], "ftp://x"),
])
def test_bad_input_is_named_exit_2_and_leaves_no_record(cli, args, needle):
    p = cli.run(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr and "hint" in p.stderr
    runs = cli.home / "runs"
    assert not runs.exists() or not [n for n in os.listdir(runs) if not n.startswith(".")]
    rc, doc = cli.json(*args)
    assert rc == 2 and doc["error"]["type"] == "BadInput" and doc["error"]["exit_code"] == 2


def test_unknown_signal_on_stop_is_bad_input(cli):
    rc, _ = cli.json("start", "sg", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    p = cli.run("stop", "sg", "--signal", "NOPE")
    assert p.returncode == 2 and "NOPE" in p.stderr
    assert cli.status("sg")["state"] == "running"


def test_stop_of_stopped_and_unknown_runs(cli):
    rc, _ = cli.json("start", "once", "--settle", "0.2", "--", "sleep", "300")
    assert cli.json("stop", "once")[0] == 0
    rc, doc = cli.json("stop", "once")
    assert rc == 0 and doc["result"]["already_stopped"] is True
    rc, doc = cli.json("stop", "never")
    assert rc == 4 and doc["error"]["type"] == "RunNotFound"
    rc, doc = cli.json("status", "never")
    assert rc == 4


def test_already_running_refused_then_replace(cli):
    rc, doc = cli.json("start", "rep", "--settle", "0.2", "--", "sleep", "300")
    first = doc["result"]["pid"]
    rc, doc = cli.json("start", "rep", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 1 and doc["error"]["type"] == "AlreadyRunning"
    rc, doc = cli.json("start", "rep", "--settle", "0.2", "--replace", "--", "sleep", "301")
    assert rc == 0, doc
    assert doc["result"]["replaced"]["verified_dead"] and not alive(first)
    assert doc["result"]["attempt"] == 2


def test_restart_keeps_logs_of_every_attempt(cli):
    rc, doc = cli.json("start", "rs", "--settle", "0.2", "--sh", "echo first-attempt-line; exec sleep 300")
    assert rc == 0
    log = Path(doc["result"]["log"])
    wait_for(lambda: "first-attempt-line" in log.read_text(), what="first line")
    rc, doc = cli.json("restart", "rs", "--settle", "0.2")
    assert rc == 0, doc
    steps = [s["step"] for s in doc["result"]["steps"]]
    assert steps == ["stop", "start"] and doc["result"]["attempt"] == 2
    text = wait_for(lambda: (lambda t: t if t.splitlines().count("first-attempt-line") == 2 else None)(log.read_text()),
                    what="second attempt's line")
    assert "attempt 1 started" in text and "attempt 2 started" in text
    assert text.index("attempt 1 started") < text.index("attempt 2 started")


def test_restart_carries_every_start_setting(cli, tmp_path, monkeypatch):
    """What start was given, restart gives again: the ready timeout, the GPU wait and the
    extra files hashed for drift too (they were dropped from the stored spec)."""
    from runward import api as ops
    from runward.targets import parse_target
    monkeypatch.setenv("RUNWARD_HOME", str(cli.home))
    extra = tmp_path / "conf.yaml"
    extra.write_text("lr: 3e-4\n")
    local = parse_target("local")
    ops.start(local, "carry", argv=["sleep", "300"], settle=0.2, hash_files=[str(extra)],
              wait_gpus_free={"timeout": 5.0, "max_used_mib": 512.0}, ready_timeout=42.0)
    try:
        before = ops.spec(local, "carry")["spec"]
        ops.restart(local, "carry", overrides={"settle": 0.2, "reuse_env": True})
        after = ops.spec(local, "carry")
        assert after["attempt"] == 2
        for spec in (before, after["spec"]):
            assert spec["hash_files"] == [str(extra)] and spec["ready_timeout"] == 42.0
            assert spec["wait_gpus_free"] == {"timeout": 5.0, "max_used_mib": 512.0}
        assert cli.status("carry")["state"] == "running"
    finally:
        ops.stop(local, "carry", grace=5)


def test_restart_does_not_start_when_stop_cannot_be_verified(cli, tmp_path):
    rc, _ = cli.json("start", "nv", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    rc, doc = cli.json("restart", "never-was")
    assert rc == 4


def test_ready_regex(cli):
    rc, doc = cli.json("start", "rdy", "--settle", "0.1", "--ready", r"^step 3 ", *job())
    assert rc == 0, doc
    assert doc["result"]["ready"] is True and doc["result"]["ready_line"].startswith("step 3 ")
    rc, doc = cli.json("start", "nrdy", "--settle", "0.1", "--ready", "^never$", "--ready-timeout", "1",
                       "--", "sleep", "300")
    assert rc == 5 and doc["error"]["type"] == "NotVerified"


def test_logs_tail_and_follow_across_restart(cli):
    rc, doc = cli.json("start", "lf", "--settle", "0.2", "--sh", "for i in 1 2 3; do echo A$i; done; exec sleep 300")
    assert rc == 0
    log = Path(doc["result"]["log"])
    wait_for(lambda: "A3" in log.read_text(), what="A3")
    rc, doc = cli.json("logs", "lf", "-n", "2")
    assert doc["result"]["lines"] == ["A2", "A3"]
    f = cli.popen("logs", "lf", "-f", "-n", "1", "--for", "8")
    time.sleep(1.0)  # let the follower reach the end of the file before the restart
    rc, doc = cli.json("restart", "lf", "--settle", "0.2")
    assert rc == 0
    out, _ = f.communicate(timeout=30)
    lines = out.splitlines()
    assert lines[0] == "A3"
    hdr = next(i for i, ln in enumerate(lines) if "attempt 2 started" in ln)
    assert lines[hdr + 1:hdr + 4] == ["A1", "A2", "A3"], lines


def test_help_is_fast_path_without_heavy_imports():
    out = subprocess.run([PY, "-X", "importtime", "-m", "runward", "--help"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent / "src")))
    assert out.returncode == 0
    imported = {ln.split("|")[-1].strip() for ln in out.stderr.splitlines() if "|" in ln}
    for heavy in ("runward.transport.agentcall", "runward.agent", "runward.api", "concurrent.futures",
                  "subprocess", "matplotlib", "runward.lint"):
        assert heavy not in imported, heavy


FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.mark.skipif(not (FREEZER / "cgroup.procs").exists() or not os.access(FREEZER, os.W_OK),
                    reason="needs the cgroup v1 freezer, writable (root)")
def test_unkillable_survivor_is_reported_and_restart_starts_nothing(cli):
    """A frozen process cannot die, even of SIGKILL, until thawed: the kernel condition of a
    task stuck in uninterruptible sleep. stop must report it as a survivor (exit 5), never hang,
    and restart must not start a second attempt beside it."""
    rc, doc = cli.json("start", "frz", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0
    pid = doc["result"]["pid"]
    cg = FREEZER / f"runward-test-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "cgroup.procs").write_text(str(pid))
        (cg / "freezer.state").write_text("FROZEN")
        wait_for(lambda: (cg / "freezer.state").read_text().strip() == "FROZEN", what="frozen")
        t0 = time.monotonic()
        rc, doc = cli.json("restart", "frz", "--grace", "0.3")
        assert rc == 5, doc
        assert time.monotonic() - t0 < 60
        assert doc["error"]["details"]["failed_step"] == "stop"
        surv = doc["result"]["survivors"]
        assert [s["pid"] for s in surv] == [pid]
        st = cli.status("frz")
        assert st["attempt"] == 1, "restart started a new attempt beside an unverified stop"
        p = cli.run("stop", "frz", "--grace", "0.2")
        assert p.returncode == 5 and "survivor: pid" in p.stderr
    finally:
        (cg / "freezer.state").write_text("THAWED")
        wait_for(lambda: not alive(pid), what="the thawed process to die of its pending KILL")
        cg.rmdir()


def test_cgroup_of_a_run_that_ended_by_itself_is_removed(cli):
    rc, doc = cli.json("start", "cgend", "--settle", "0.1", "--sh", gate(cli.cwd / "go"))
    assert rc == 0, doc
    (cli.cwd / "go").touch()
    cgs = doc["result"]["cgroups"]
    if not cgs:
        pytest.skip("no writable cgroup hierarchy here")
    wait_for(lambda: cli.status("cgend")["state"] == "exited", what="the job to end")
    wait_for(lambda: not any(os.path.isdir(c) for c in cgs), what="the shim to remove the empty cgroups")


def test_same_run_name_in_two_homes_are_two_runs(cli, tmp_path):
    """bench/peers found a stop in one RUNWARD_HOME killing a same-named run of another."""
    other = dict(cli.env, RUNWARD_HOME=str(tmp_path / "other-home"))
    rc, a = cli.json("start", "twin", "--settle", "0.2", "--", "sleep", "301")
    assert rc == 0
    import subprocess as sp
    p = sp.run(cli.argv("start", "twin", "--settle", "0.2", "--json", "--", "sleep", "302"), env=other,
               cwd=cli.cwd, capture_output=True, text=True)
    b = json.loads(p.stdout)
    assert p.returncode == 0, b
    try:
        rc, doc = cli.json("stop", "twin", "--grace", "2")
        assert rc == 0 and [x["pid"] for x in doc["result"]["processes"]] == [a["result"]["pid"]]
        assert alive(b["result"]["pid"], b["result"]["start_time"])
        assert cli.status("twin")["state"] == "exited"
    finally:
        sp.run(cli.argv("stop", "twin", "--grace", "1"), env=other, cwd=cli.cwd, capture_output=True)
    assert not alive(b["result"]["pid"], b["result"]["start_time"])


def test_a_cgroup_removed_while_it_is_read_reads_as_empty(monkeypatch):
    """The shim removes a run's cgroup the moment it empties; a stop reading cgroup.procs
    then may have opened the file before the rmdir and read it after: the kernel answers
    ENODEV. Forced here: the open happens, then the rmdir, then the read."""
    from runward.agent.proc import cgroups
    from runward.agent.core import procfs
    roots = cgroups.roots()
    if not roots:
        pytest.skip("needs a writable cgroup hierarchy (root)")
    cg = Path(roots[0][1]) / ("runward-test-enodev-%d" % os.getpid())
    cg.mkdir()
    real_open = open

    def open_then_remove(path, *a, **kw):
        f = real_open(path, *a, **kw)
        if str(path).startswith(str(cg)):
            cg.rmdir()
        return f
    monkeypatch.setattr(procfs, "open", open_then_remove, raising=False)  # cgroups.pids reads through it
    try:
        assert cgroups.pids([str(cg)]) == set()
    finally:
        if cg.exists():
            cg.rmdir()


@pytest.mark.parametrize("verb", ["rm", "stop", "prune"])
def test_cgroup_left_by_a_killed_shim_is_removed_by_the_verb_that_ends_the_run(cli, verb):
    """The shim removes an attempt's empty cgroup when its job ends; one SIGKILLed first
    cannot, and its cgroups stayed behind for ever (CI's machine held ~3,000 empty ones under
    /sys/fs/cgroup/*/runward, from the tests' runs). The verb that finds the run over removes
    them: a stop that finds nothing alive, rm, prune."""
    rc, doc = cli.json("start", "cgleft", "--settle", "0.1", "--sh", gate(cli.cwd / "go"))
    assert rc == 0, doc
    cgs = doc["result"]["cgroups"]
    if not cgs:
        pytest.skip("no writable cgroup hierarchy here")
    rec = json.loads((cli.home / "runs" / "cgleft" / "attempts" / "1.json").read_text())
    os.kill(rec["shim"]["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(rec["shim"]["pid"]), what="the shim's death")
    (cli.cwd / "go").touch()  # the job ends by itself, its shim gone: nobody removes its cgroups
    wait_for(lambda: not alive(doc["result"]["pid"]), what="the job's end")
    assert all(os.path.isdir(c) for c in cgs), "the control: the cgroups outlive the job when the shim is gone"
    args = {"rm": ["rm", "cgleft"], "stop": ["stop", "cgleft"], "prune": ["prune", "--older-than", "0"]}[verb]
    p = cli.run(*args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert not any(os.path.isdir(c) for c in cgs), f"{verb} left the run's empty cgroups: {cgs}"
