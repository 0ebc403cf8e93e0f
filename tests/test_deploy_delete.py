"""Deploy never costs a run its state (issue 25, item 2): push/deploy --delete into a directory
that holds runward's home or a live run's log is refused on the far side (exit 2) before anything
is removed; the records, the log and the run's stoppability survive."""

from __future__ import annotations

import uuid

from conftest import alive


def _start(cli, name: str, *args: str) -> dict:
    rc, doc = cli.json("start", name, "--settle", "0.3", *args, "--", "sleep", "300")
    assert rc == 0 and doc["ok"], doc
    return doc["result"]


def _src(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("print('new')\n")
    return src


def test_delete_into_a_directory_holding_the_home_is_refused_and_the_run_stays_stoppable(cli, tmp_path):
    """The home is tmp_path/home: a push --delete into tmp_path (its parent) would remove the
    records; into home/runs, the records themselves. Both refused, exit 2, naming the
    destination; the run's records and its job survive, and stop still stops it."""
    name = "keep" + uuid.uuid4().hex[:6]
    pid = _start(cli, name)["pid"]
    src = _src(tmp_path)
    for dest in (tmp_path, cli.home / "runs"):
        rc, doc = cli.json("push", "--delete", f"{src}:{dest}")
        assert rc == 2 and doc["error"]["type"] == "BadInput", doc
        msg = doc["error"]["message"]
        assert "refused" in msg and str(dest) in msg and "runward's state" in msg, doc
    assert (cli.home / "runs" / name / "run.json").is_file() and not (cli.home / "runs" / "train.py").exists()
    assert alive(pid)
    rc, doc = cli.json("stop", name, "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    assert not alive(pid)


def test_delete_into_a_directory_holding_a_live_runs_log_is_refused_until_the_run_ends(cli, tmp_path):
    """A run logging outside the home (--log out/logs/job.log, rotated beside it): --delete
    into out/ would take the log from under the live job. Refused, naming the run and the
    log; once the run is stopped, the same push goes ahead (the refusal is for live runs)."""
    name = "log" + uuid.uuid4().hex[:6]
    log = tmp_path / "out" / "logs" / "job.log"
    log.parent.mkdir(parents=True)
    _start(cli, name, "--log", str(log))
    (tmp_path / "out" / "logs" / "job.log.1").write_text("an older rotation\n")
    src = _src(tmp_path)
    for dest in (tmp_path / "out", log.parent):
        rc, doc = cli.json("push", "--delete", f"{src}:{dest}")
        assert rc == 2 and doc["error"]["type"] == "BadInput", doc
        msg = doc["error"]["message"]
        assert str(dest) in msg and name in msg and str(log) in msg, doc
        rc, doc = cli.json("push", "--delete", "--dry-run", f"{src}:{dest}")
        assert rc == 2, doc
    assert log.is_file() and (log.parent / "job.log.1").is_file()
    rc, doc = cli.json("stop", name, "--grace", "2")
    assert rc == 0 and doc["result"]["verified_dead"], doc
    rc, doc = cli.json("push", "--delete", f"{src}:{tmp_path / 'out'}")
    assert rc == 0 and (tmp_path / "out" / "train.py").is_file(), doc
