"""Blind spots: processes that no search of runward's finds once their shim is gone (an adopted
escapee that cleared its environment and left the session, where the run has no cgroup). status,
stop and rm say so (`blind_spot`) rather than pass over them; a supervised run's shim ends what an
attempt left before it restarts. Real processes as an ordinary user or root; ground truth from
/proc."""

from __future__ import annotations

import json
import os
import signal

import pytest

from conftest import alive, wait_for
from helpers_membership import kill_all, ordinary, procs_with, record, stat_fields  # noqa: F401 (a fixture)


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


# --- an earlier attempt's blind spot: no later attempt's search finds what it dropped ---------

def _start_escaping(run, name: str, digit: str) -> str:
    """Start NAME whose job leaves an `env -i setsid` escapee (`sleep TOKEN`); the token."""
    token = f"7{os.getpid() % 100000:05d}{digit}"
    line = f'env -i setsid sh -c "(sleep {token} &); exit 0"; exec sleep 600'
    p = run("start", name, "--settle", "0.2", "--json", "--sh", line)
    assert p.returncode == 0, p.stdout + p.stderr
    return token


def _adopted(run, name: str, token: str) -> tuple[int, dict]:
    """(the escapee's pid, the attempt record) once the run's shim has adopted the escapee."""
    esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
    att = record(run.home, name)
    wait_for(lambda: int(stat_fields(esc)[1]) == att["shim"]["pid"], what="the shim to adopt the escapee")
    return esc, att


def test_an_escapee_dropped_by_a_killed_shim_is_said_by_every_later_attempt(ordinary):
    """No cgroup; attempt 1's `env -i` escapee goes to pid 1 when its shim is SIGKILLed; then
    restart. Before: restart's stop named the blind spot, but attempt 2 (running, a live shim)
    said nothing in status or in its own stop while the escapee, of this run, lived (the
    podown soak's inv1, seeds 13000 and 13001). The note is carried by each later attempt:
    one started after a stop, and a supervised restart's. Ground truth: /proc."""
    run = ordinary
    token = _start_escaping(run, "carried", "9")
    try:
        esc, att = _adopted(run, "carried", token)
        os.kill(att["shim"]["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(att["shim"]["pid"], att["shim"]["start"]), what="the shim gone")
        p = run("restart", "carried", "--settle", "0.2", "--grace", "2", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        # ground truth: of the run (its token), alive, tied to it by nothing runward can read
        # (no marker in its environment, a parent that is no shim, a session of its own)
        assert alive(esc) and b"RUNWARD_RUN" not in open(f"/proc/{esc}/environ", "rb").read()
        assert int(stat_fields(esc)[1]) != att["shim"]["pid"] and int(stat_fields(esc)[3]) != att["job"]["pid"]
        st = json.loads(run("status", "carried", "--json").stdout)["result"]["runs"][0]
        assert st["state"] == "running" and st["attempt"] == 2 and esc not in st["tree"]["pids"], st
        assert "attempt 1 of this run" in (st.get("blind_spot") or "") and "cannot be found" in st["blind_spot"], st
        assert "note: attempt 1 of this run" in run("status", "carried").stdout
        doc = json.loads(run("stop", "carried", "--grace", "2", "--json").stdout)["result"]
        assert doc["verified_dead"] and "attempt 1 of this run" in (doc.get("blind_spot") or ""), doc
        # attempt 3 fails once; the shim restarts it as attempt 4, which carries the note too
        sup = 'n=${RUNWARD_RUN##*.}; [ $n = 3 ] && exit 3; exec sleep 600'
        p = run("start", "carried", "--settle", "0", "--restart", "on-failure", "--max-restarts", "1",
                "--backoff", "0", "--json", "--sh", sup)
        assert p.returncode in (0, 1), p.stdout + p.stderr  # attempt 3 may end within the settle
        st = wait_for(lambda: (lambda s: s if s["state"] == "running" and s["attempt"] == 4 else None)(
            json.loads(run("status", "carried", "--json").stdout)["result"]["runs"][0]), what="attempt 4 running")
        assert alive(esc) and "attempt 1 of this run" in (st.get("blind_spot") or ""), st
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))
        run("stop", "carried", "--grace", "1")


def test_start_replace_says_the_blind_spot_of_the_attempt_it_replaced(ordinary):
    """No cgroup; attempt 1's escapee goes to pid 1 with its SIGKILLed shim; `start --replace`.
    Its --json said the replaced attempt's blind_spot; its text said only 'stopped attempt 1
    first (verified dead)' while `sleep TOKEN` lived (restart's stop step says the note)."""
    run = ordinary
    token = _start_escaping(run, "repl", "2")
    try:
        esc, att = _adopted(run, "repl", token)
        os.kill(att["shim"]["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(att["shim"]["pid"], att["shim"]["start"]), what="the shim gone")
        p = run("start", "repl", "--replace", "--settle", "0.2", "--grace", "2", "--sh", "exec sleep 600")
        assert p.returncode == 0 and alive(esc), p.stdout + p.stderr
        assert "stopped attempt 1 first" in p.stdout and "  note: this run has no cgroup here" in p.stdout, p.stdout
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))
        run("stop", "repl", "--grace", "1")


# --- rm over what status says it cannot see -------------------------------------------------

def test_rm_of_a_run_whose_status_names_a_blind_spot_does_not_pass_over_it_in_silence(ordinary):
    """Design rule 11: nothing destructive is decided on unknown. No cgroup, the job and its
    shim SIGKILLed: status says (blind_spot) that an escapee may live unfound, and one does.
    Before: `rm` removed the records with not a word of it (exit 0), while `sleep TOKEN` ran."""
    run = ordinary
    token = _start_escaping(run, "escrm", "8")
    try:
        esc, att = _adopted(run, "escrm", token)
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


# --- a multi-node run's node names its blind spot in text as in --json ----------------------

def test_a_nodes_blind_spot_is_said_in_the_multi_node_text_too(ordinary):
    """Two local nodes (homes of their own), no cgroup; node 1's job leaves an env -i escapee
    the shim adopts, and node 1's shim is SIGKILLed: the escapee goes to pid 1. --json gave
    node 1's blind_spot; the text of status and stop did not (a node's line alone: 'stopped
    by runward stop, ... verified dead' while `sleep TOKEN` lived)."""
    run = ordinary
    token = f"7{os.getpid() % 100000:05d}3"
    base = run.home.parent
    (base / "runward.toml").write_text(
        f'[targets.n0]\non = "local"\nhome = "{base}/n0"\n\n[targets.n1]\non = "local"\nhome = "{base}/n1"\n\n'
        f'[runs.mnblind]\nnodes = ["n0", "n1"]\nsettle = 0.3\ncommand = ["sh", "-c", '
        f'"[ {{node_rank}} = 1 ] && env -i setsid sh -c \'(sleep {token} &); exit 0\'; exec sleep 600"]\n')
    p = run("start", "mnblind", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    try:
        esc = wait_for(lambda: procs_with(f"sleep\0{token}\0".encode(), run.uid), what="the escapee")[0]
        att = record(base / "n1", "mnblind")
        wait_for(lambda: int(stat_fields(esc)[1]) == att["shim"]["pid"], what="the shim to adopt the escapee")
        os.kill(att["shim"]["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(att["shim"]["pid"], att["shim"]["start"]), what="the shim gone")
        node = json.loads(run("status", "mnblind", "--json").stdout)["result"]["nodes"][1]
        assert "cannot be found" in (node["run"].get("blind_spot") or ""), node
        text = run("status", "mnblind").stdout
        assert "    note: this run has no cgroup here" in text, text
        p = run("stop", "mnblind", "--grace", "2")
        assert alive(esc) and "    note: this run has no cgroup here" in p.stdout, p.stdout + p.stderr
    finally:
        kill_all(procs_with(f"sleep\0{token}\0".encode(), run.uid))
        run("stop", "mnblind", "--grace", "1")


# --- a reboot ends what a killed shim dropped ---------------------------------------------------

def test_a_record_of_another_boot_names_no_blind_spot(ordinary):
    """No cgroup; the shim and the job SIGKILLed: status says the blind spot (a process may
    live unfound). Then a reboot (a record of another boot id, as tests/faults' reboot): every
    process of that boot is gone. Before: status (`lost`, 'the machine rebooted'), stop and rm
    all said a process of the run went to pid 1 and cannot be found, on a machine where
    nothing of it can live; a new attempt carried nothing, the old one's own words did."""
    run = ordinary
    p = run("start", "rebooted", "--settle", "0.2", "--json", "--sh", "exec sleep 600")
    assert p.returncode == 0, p.stdout + p.stderr
    path = run.home / "runs" / "rebooted" / "attempts" / "1.json"
    att = json.loads(path.read_text())
    for who in (att["shim"], att["job"]):
        os.kill(who["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(who["pid"], who["start"]), what="the run's process gone")
    st = json.loads(run("status", "rebooted", "--json").stdout)["result"]["runs"][0]
    assert "cannot be found" in (st.get("blind_spot") or ""), st  # this boot: it may live
    att = json.loads(path.read_text())
    att["boot_id"] = "00000000-0000-0000-0000-000000000000"
    path.write_text(json.dumps(att))
    st = json.loads(run("status", "rebooted", "--json").stdout)["result"]["runs"][0]
    assert st["state"] == "lost" and not st.get("blind_spot"), st
    assert "cannot be found" not in run("status", "rebooted").stdout
    doc = json.loads(run("stop", "rebooted", "--json").stdout)["result"]
    assert not doc.get("blind_spot"), doc
    doc = json.loads(run("rm", "rebooted", "--json").stdout)
    assert "cannot be found" not in json.dumps(doc), doc


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


