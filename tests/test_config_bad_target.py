"""One bad [targets.X] table in runward.toml (a Ray target's resources naming CPU, a scheme
that is not one, an unknown key) made every verb fail, the stop of a run on another target
too. The table is kept and its error raised, unchanged (exit 2), where that target is used:
by --on, by a run that names it, by a project-wide status (which says it failed beside the
others' answers); doctor still says it. Real local runs; ground truth from /proc."""

from __future__ import annotations

import os

from conftest import CLI, wait_for

TOML = """[targets.good]
on = "local"
[targets.bad]
on = "ray://local"
resources = { CPU = 1 }
[targets.bad2]
on = "bogus://x"
[targets.bad3]
on = "local"
colour = "red"
[runs.job]
command = ["sleep", "120"]
on = "good"
settle = 0
[runs.other]
command = ["sleep", "120"]
on = "bad"
"""


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def test_a_bad_target_table_blocks_only_what_uses_that_target(cli: CLI):
    (cli.cwd / "runward.toml").write_text(TOML)
    rc, doc = cli.json("start", "job")
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    try:
        assert cli.status("job")["state"] == "running"
        rc, doc = cli.json("status")  # project-wide: the good target's answer, the bad ones as failed
        assert rc == 2, doc
        by = {r["target"]: r for r in doc["targets"]}
        assert by["good (local)"]["ok"] and [r["name"] for r in by["good (local)"]["result"]["runs"]] == ["job"], by
        assert "[targets.bad] resources names CPU" in by["bad"]["error"]["message"], by
        assert "bogus://x" in by["bad2"]["error"]["message"], by
        assert "[targets.bad3] unknown key(s) colour" in by["bad3"]["error"]["message"], by
        text = cli.run("status").stdout
        assert "== bad\n  error: " in text and "job" in text, text
    finally:
        rc, doc = cli.json("stop", "job")
    assert rc == 0, doc
    wait_for(lambda: not _alive(pid), timeout=10, what="the job's end")


def test_using_a_bad_target_gives_its_error_and_doctor_says_it(cli: CLI):
    (cli.cwd / "runward.toml").write_text(TOML)
    rc, doc = cli.json("start", "other")  # the run names the bad target
    assert rc == 2 and doc["error"]["type"] == "BadInput", doc
    assert doc["error"]["message"].startswith(f"{cli.cwd / 'runward.toml'}: [targets.bad] resources names CPU"), doc
    assert not (cli.home / "runs" / "other").exists()
    rc, doc = cli.json("status", "--on", "bad3")
    assert rc == 2 and doc["error"]["message"] == f"{cli.cwd / 'runward.toml'}: [targets.bad3] unknown key(s) colour", doc
    rc, doc = cli.json("doctor")
    assert rc == 2, doc
    said = {e["target"]: e["message"] for e in doc["result"]["config_errors"]}
    assert set(said) == {"bad", "bad2", "bad3"}, said
    assert "BAD TARGET bad2: unknown scheme" in cli.run("doctor").stdout
