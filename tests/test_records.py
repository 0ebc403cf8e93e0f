"""rm, prune and logs --attempt/--since/--grep, on this machine with real runs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import alive, marked, wait_for


def _stopped(cli, name: str, *sh: str) -> None:
    for line in sh:
        rc, doc = cli.json("start", name, "--settle", "0.3", "--sh", line)
        assert rc == 1 and doc["error"]["type"] == "ExitedEarly", doc  # each one ends by itself


# --------------------------------------------------------------------------- rm

def test_rm_refuses_a_live_run_and_removes_a_stopped_one_keeping_its_log(cli):
    rc, doc = cli.json("start", "r1", "--settle", "0.2", "--", "sh", "-c", "echo hello-r1; sleep 300")
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    rc, doc = cli.json("rm", "r1")
    assert rc == 1 and doc["error"]["type"] == "RunAlive" and str(pid) in doc["error"]["message"], doc
    assert alive(pid) and (cli.home / "runs" / "r1" / "run.json").is_file()
    rc, doc = cli.json("stop", "r1", "--grace", "2")
    assert rc == 0, doc
    p = cli.run("rm", "r1")
    assert p.returncode == 0, p.stderr
    kept = (cli.home / "removed")
    logs = list(kept.glob("r1-*.log"))
    assert len(logs) == 1 and "hello-r1" in logs[0].read_text()
    assert str(logs[0]) in p.stdout, "rm must say where the log is kept"
    assert not (cli.home / "runs" / "r1").exists()
    rc, doc = cli.json("status", "r1")
    assert rc == 4
    rc, doc = cli.json("rm", "r1")
    assert rc == 4 and doc["error"]["type"] == "RunNotFound"


def test_rm_with_logs_removes_an_outside_log_unless_another_run_writes_it(cli, tmp_path):
    own, shared = tmp_path / "own.log", tmp_path / "shared.log"
    cli.json("start", "b", "--settle", "0.3", "--log", str(own), "--sh", "echo b")
    cli.json("start", "c", "--settle", "0.3", "--log", str(shared), "--sh", "echo c")
    cli.json("start", "d", "--settle", "0.3", "--log", str(shared), "--sh", "echo d")
    rc, doc = cli.json("rm", "b")  # without --logs, a log of the user's choosing stays put
    assert rc == 0 and own.is_file() and doc["result"]["logs"][0]["kept"], doc
    cli.json("start", "b", "--settle", "0.3", "--log", str(own), "--sh", "echo b")
    rc, doc = cli.json("rm", "b", "--logs")
    assert rc == 0 and not own.exists(), doc
    rc, doc = cli.json("rm", "c", "--logs")
    assert rc == 0 and shared.is_file() and "another run" in doc["result"]["logs"][0]["why"], doc
    _stopped(cli, "a", "echo in-the-run-directory")
    rc, doc = cli.json("rm", "a", "--logs")
    assert rc == 0 and not doc["result"]["logs"][0]["kept"] and not (cli.home / "removed").exists(), doc


def test_rm_refuses_while_a_process_of_the_run_lives(cli):
    """The job exited but left a child carrying the run's marker: the records are what lets
    `runward stop` find it, so they stay."""
    rc, doc = cli.json("start", "st", "--settle", "0.5", "--sh", "sleep 300 & exit 0")
    # the launcher exited, its child runs on: not verified (exit 5), the child named
    assert rc == 5 and doc["error"]["type"] == "NotVerified" and doc["result"]["children"], doc
    stray = wait_for(lambda: marked("st."), what="the stray child")
    rc, doc = cli.json("rm", "st")
    assert rc == 1 and doc["error"]["type"] == "RunAlive" and str(min(stray)) in doc["error"]["message"], doc
    rc, doc = cli.json("stop", "st", "--grace", "1")
    assert rc == 0, doc
    rc, doc = cli.json("rm", "st")
    assert rc == 0, doc


# --------------------------------------------------------------------------- prune

def _age_exit(cli, name: str, days: float) -> None:
    """A week cannot pass in a test: the attempt's recorded end is moved back instead (the
    record is the target's state, which prune reads)."""
    run = json.loads((cli.home / "runs" / name / "run.json").read_text())
    path = cli.home / "runs" / name / "attempts" / f"{run['attempt']}.json"
    att = json.loads(path.read_text())
    att["exit"]["at"] -= days * 86400
    path.write_text(json.dumps(att))


def test_prune_removes_only_stopped_runs_that_ended_long_ago(cli):
    _stopped(cli, "old", "echo old-output")
    _stopped(cli, "new", "echo new-output")
    _age_exit(cli, "old", 8)
    rc, doc = cli.json("start", "live", "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    p = cli.run("prune", "--older-than", "7d", "--dry-run")
    assert p.returncode == 0 and "old" in p.stdout and "new" not in p.stdout.replace("\n  kept", ""), p.stdout
    assert (cli.home / "runs" / "old" / "run.json").is_file(), "--dry-run removed something"
    rc, doc = cli.json("prune", "--older-than", "7d")
    assert rc == 0, doc
    assert [r["name"] for r in doc["result"]["removed"]] == ["old"]
    assert not (cli.home / "runs" / "old").exists() and (cli.home / "runs" / "new" / "run.json").is_file()
    assert "old-output" in next((cli.home / "removed").glob("old-*.log")).read_text()
    rc, doc = cli.json("prune", "--older-than", "0s")  # everything stopped goes; the live run never
    assert rc == 0 and [r["name"] for r in doc["result"]["removed"]] == ["new"], doc
    assert any(k["name"] == "live" and k["why"].startswith("live") for k in doc["result"]["kept"])
    assert cli.status("live")["state"] == "running"
    cli.json("stop", "live", "--grace", "1")


def test_prune_bad_duration_is_exit_2(cli):
    for bad in ("7x", "", "d", "-3d"):
        rc, doc = cli.json("prune", f"--older-than={bad}")
        assert rc == 2 and doc["error"]["type"] == "BadInput", (bad, doc)


# --------------------------------------------------------------------------- logs selections

def test_logs_attempt_is_that_attempts_section_only(cli):
    # attempt 1 ends without a newline: its section still ends where attempt 2's header begins
    _stopped(cli, "j", "echo one-a; printf one-partial", "echo two-a; echo two-b", "echo three-a")
    for n, want in ((1, ["one-a", "one-partial"]), (2, ["two-a", "two-b"]), (3, ["three-a"])):
        rc, doc = cli.json("logs", "j", "--attempt", str(n))
        assert rc == 0, doc
        lines = doc["result"]["lines"]
        assert lines[0].startswith(f"=== runward: j attempt {n} started ") and lines[1:] == want, lines
    rc, doc = cli.json("logs", "j", "--attempt", "2", "-n", "1")
    assert doc["result"]["lines"] == ["two-b"]
    rc, doc = cli.json("logs", "j", "--attempt", "9")
    assert rc == 4 and "attempts: 1-3" in doc["error"]["message"], doc
    rc, doc = cli.json("logs", "j", "--attempt", "1", "-f", "--for", "1")
    assert rc == 2, doc


def test_logs_grep_matches_on_the_target_with_and_without_follow(cli):
    _stopped(cli, "g", "for i in 1 2 3 4 5; do echo step $i loss 0.$i; echo noise $i; done")
    rc, doc = cli.json("logs", "g", "--grep", r"^step [24]\b")
    assert rc == 0 and doc["result"]["lines"] == ["step 2 loss 0.2", "step 4 loss 0.4"], doc
    rc, doc = cli.json("logs", "g", "--grep", "noise", "-n", "2")
    assert doc["result"]["lines"] == ["noise 4", "noise 5"] and doc["result"]["truncated"]
    rc, doc = cli.json("logs", "g", "--grep", "(")
    assert rc == 2 and doc["error"]["type"] == "BadInput"
    rc, doc = cli.json("start", "gf", "--settle", "0.2", "--sh",
                       "sleep 0.5; for i in 1 2 3; do echo keep $i; echo drop $i; done; sleep 300")
    assert rc == 0, doc
    rc, doc = cli.json("logs", "gf", "-f", "--for", "2.5", "--grep", "^keep")
    assert rc == 0 and doc["result"]["lines"] == ["keep 1", "keep 2", "keep 3"], doc
    cli.json("stop", "gf", "--grace", "1")


def test_logs_since_by_timestamps_else_by_the_attempts_start(cli):
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    _stopped(cli, "s", f"echo '2020-01-01 00:00:00 old line'; echo after-old; echo '{now} new line'; echo after-new")
    rc, doc = cli.json("logs", "s", "--since", "10m")
    assert rc == 0, doc
    res = doc["result"]
    # a line without a timestamp takes the time of the last one above it (the header: the start)
    assert res["lines"][1:] == [f"{now} new line", "after-new"] and res["since_by"] == "both", res
    _stopped(cli, "u", "echo no-stamp-1; echo no-stamp-2")
    rc, doc = cli.json("logs", "u", "--since", "1h")
    assert doc["result"]["lines"][1:] == ["no-stamp-1", "no-stamp-2"]
    assert doc["result"]["since_by"] == "attempt_start"
    time.sleep(1.5)
    rc, doc = cli.json("logs", "u", "--since", "1s")  # the attempt began before the window
    assert rc == 0 and doc["result"]["lines"] == [], doc
    rc, doc = cli.json("logs", "u", "--since", "soon")
    assert rc == 2


def test_logs_without_selection_is_unchanged(cli):
    _stopped(cli, "p", "for i in $(seq 1 30); do echo line $i; done")
    rc, doc = cli.json("logs", "p")
    assert rc == 0 and doc["result"]["lines"][-1] == "line 30" and len(doc["result"]["lines"]) == 20
    assert set(doc["result"]) == {"name", "log", "lines", "offset"}  # offset: where `logs --offset` reads on
    assert Path(doc["result"]["log"]).is_file() and os.access(doc["result"]["log"], os.R_OK)
    assert doc["result"]["offset"] == Path(doc["result"]["log"]).stat().st_size
