"""The oracle finds the trust issue's holes when they are put back (issue 26): two of the
sequences it printed, shrunk by hand to the steps that matter, kept as regression tests. Each
fails on a copy of the tree with its fix taken out (docs/testing.md, "Known holes": how, and
what the oracle printed); the third, a multi-node deploy, is test_oracle.py's
`..._two_node_run_lands_on_both_filesystems`."""

from __future__ import annotations

import pytest

from oracle import machine, world


def _session(kind: str):
    why = world.why_not(kind)
    if why:
        pytest.skip(why)
    return machine.make([kind])()


def test_oracle_an_env_i_escapee_of_a_job_that_ended_without_cgroups_is_still_the_runs():
    """Issue 25 item 3 (supervise/shim.py's _wait_adopted taken out): an ordinary user's run (no cgroup),
    its job leaves an `env -i` escapee in a session of its own and exits by itself. Put back,
    status said exited while the escapee lived (invariant 1), and stop would call it stopped."""
    state = _session("user")
    try:
        state.start(k=0, sh=False, supervised=False)
        state.all_true()
        state.escape(i=0, kind="envi")
        state.all_true()
        state.job_ends(i=0, how="exit 0")
        state.all_true()
        state.stop(i=0)
        state.all_true()
    finally:
        state.teardown()


def test_oracle_restart_after_a_local_edit_without_deploy_is_refused():
    """Issue 25 item 11 (verbs/restart.py's local-drift check taken out): the user edits the
    job's code here and restarts without --deploy. Put back, the restart said exit 0 and the
    new attempt ran the old code; the oracle expects the refusal (exit 2, the run untouched)."""
    state = _session("local")
    try:
        state.start(k=0, sh=False, supervised=False)
        state.all_true()
        state.edit_local(i=0, deploy=False)
        state.all_true()
        state.restart(i=0, deploy=False)
        state.all_true()
    finally:
        state.teardown()


def test_oracle_a_stop_that_names_its_blind_spot_is_judged_as_status_is():
    """Found by the pct soak (seed 7300): a supervised run in the LXC container (no cgroup),
    an `env -i` escapee, the job SIGKILLed (the shim restarts it), then the shim SIGKILLed: the
    escapee goes to pid 1 with nothing tying it to the run. runward's stop says so (its
    blind_spot, README) and verifies the rest. Invariant 1 excused exactly such processes,
    invariant 2 (right after the stop) did not, and called the stop a false verdict: the oracle
    now judges both the same way. Every other process of the run still counts."""
    state = _session("pct")
    try:
        state.start(k=0, sh=False, supervised=True)
        state.all_true()
        state.escape(i=0, kind="envi")
        state.all_true()
        state.job_ends(i=0, how="kill 9")
        state.all_true()
        state.kill_shim(i=0)
        state.all_true()
        state.stop(i=0)
        state.all_true()
    finally:
        state.teardown()


@pytest.mark.parametrize("kind", ["podown", "podman", "user", "local"])
def test_oracle_an_env_i_escapee_of_an_attempt_whose_shim_was_killed_is_said_after_restart(kind):
    """Found by the podown soak (seeds 13000, 13001): no cgroup (a podman container, an
    ordinary user), an `env -i` escapee, the shim SIGKILLed (the escapee goes to pid 1), then
    restart. Its stop named attempt 1's blind spot; attempt 2 runs with a live shim and its
    status said nothing of the escapee, alive, of the same run (invariant 1), nor did the next
    stop (invariant 2). Every later attempt carries that blind spot now. Then rm removes the
    run, saying it (docs/runs.md); the oracle took the escapee for a removed run's process alive
    and now judges it as status's note. local (root, a cgroup): the escapee is found and stopped
    by restart, and nothing is said blind."""
    state = _session(kind)
    try:
        state.start(k=0, sh=True, supervised=False)
        state.all_true()
        state.escape(i=0, kind="envi")
        state.all_true()
        state.kill_shim(i=0)
        state.all_true()
        state.restart(i=0, deploy=False)
        state.all_true()
        state.stop(i=0)
        state.all_true()
        state.rm(i=0, logs=False)
        state.all_true()
    finally:
        state.teardown()


def test_the_oracle_tells_run_1s_processes_from_run_10s():
    """Found by the user soak (seed 8200): with ten runs in one session, run 10's processes
    (token ORCTOK-ID-10) were counted as removed run 1's (ORCTOK-ID-1 is a substring of it),
    and the oracle reported 'alive but the run is removed'. Real processes, /proc read."""
    import os
    import subprocess

    from oracle import truth
    tok = "ORCTOK-test%d" % os.getpid()
    one = subprocess.Popen(["sh", "-c", "sleep 60; : %s-1" % tok])
    ten = subprocess.Popen(["sh", "-c", "sleep 60; : %s-10" % tok])
    try:
        ns = os.readlink("/proc/self/ns/pid")
        assert set(truth.tree(tok + "-1", ns)) >= {one.pid} and ten.pid not in truth.tree(tok + "-1", ns)
        assert one.pid not in truth.tree(tok + "-10", ns) and ten.pid in truth.tree(tok + "-10", ns)
    finally:
        for p in (one, ten):
            p.kill()
            p.wait()


def test_a_stop_in_restarts_settle_period_is_a_cancelled_restart_and_the_oracle_takes_it(cli):
    """The ssh soak (seed 9100) called `stop` and `restart` at once a violation: the stop
    came while restart's new attempt settled, and restart said exit 1, Cancelled. That is
    runward right (the attempt was started, then stopped by the user: nothing runs) and the
    oracle's model wrong; forced here with a long settle, real processes, ground truth."""
    import json
    from conftest import alive, marked, wait_for
    from oracle.more import restart_cancelled_by_stop
    rc, doc = cli.json("start", "sr", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    p = cli.popen("restart", "sr", "--settle", "30", "--json")
    rec = cli.home / "runs" / "sr" / "attempts" / "2.json"
    wait_for(lambda: rec.exists() and (json.loads(rec.read_text()).get("job") or {}).get("pid"), 30,
             "restart's new attempt in its settle period")
    rc, sdoc = cli.json("stop", "sr")
    out, err = p.communicate(timeout=60)
    rdoc = json.loads(out)
    assert rc == 0 and sdoc["result"]["verified_dead"], sdoc
    assert restart_cancelled_by_stop(p.returncode, rdoc), rdoc
    assert not [pid for pid, start in marked("sr.").items() if alive(pid, start)], "something of the run lives"
    assert not restart_cancelled_by_stop(1, {"error": {"type": "OperationFailed", "message": "x"}})
