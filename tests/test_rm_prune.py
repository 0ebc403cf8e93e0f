"""rm and prune decide only on what they read, and keep or remove every file of a log:
a Slurm job whose state cannot be read is not a finished one (design rule 11), a log's
rotations (log.1 .. log.N) go where the log goes, and prune --logs removes the logs of the
runs it removes. Real runs, the real logger, the real single-node Slurm."""

from __future__ import annotations

import json
import re
from pathlib import Path


import testbed
from conftest import wait_for
from helpers_slurm import in_queue, sb  # noqa: F401 (sb: the Slurm testbed fixture)

# 60 numbered lines of ~100 bytes through a 1K log_max: the log rotates about six times
LINES = 60
JOB = ("import sys\n"
       "for i in range(%d):\n"
       "    print('line %%04d %%s' %% (i, 'x' * 90), flush=True)\n" % LINES)
NUM = re.compile(r"^line (\d{4}) x")


def _family(log: Path) -> list[Path]:
    """The log and every file named LOG.<number> beside it, whoever made them."""
    return sorted([p for p in log.parent.glob(log.name + ".*") if p.suffix[1:].isdigit()] +
                  ([log] if log.exists() else []))


def _numbers(files) -> list[int]:
    return sorted(int(m.group(1)) for f in files for ln in f.read_text().splitlines() if (m := NUM.match(ln)))


def _rotated_run(cli, name: str, *extra: str) -> Path:
    """A run whose 60 lines went through several rotations and which has ended."""
    (cli.cwd / "lines.py").write_text(JOB)
    rc, doc = cli.json("start", name, "--log-max", "1k", "--log-keep", "20", "--settle", "0.3",
                       "--cwd", str(cli.cwd), *extra, "--", "python3", "lines.py")
    assert rc in (0, 1), doc  # it may end within the settle period (ExitedEarly): that is all it does
    log = Path(json.loads((cli.home / "runs" / name / "attempts" / "1.json").read_text())["log"])
    wait_for(lambda: cli.status(name)["state"] == "exited", timeout=30, what=f"{name} to end")
    wait_for(lambda: _numbers(_family(log)) == list(range(LINES)), timeout=30, what="all 60 lines logged")
    assert len(_family(log)) >= 4, "the test needs several rotated files"
    return log


# --------------------------------------------------------------------------- rotated logs (item 5)

def test_rm_keeps_every_rotated_file_of_the_log_it_says_it_keeps(cli):
    _rotated_run(cli, "rot-keep")
    rc, doc = cli.json("rm", "rot-keep")
    assert rc == 0, doc
    ent = doc["result"]["logs"][0]
    assert ent["kept"] and ent["moved_to"], ent
    kept = _family(Path(ent["moved_to"]))
    assert _numbers(kept) == list(range(LINES)), f"lines lost: {len(_numbers(kept))} of {LINES} kept"
    assert sorted(map(str, kept[1:])) == sorted(ent["rotated_moved_to"]), ent
    p = cli.run("prune", "--older-than", "0s")  # nothing left to prune; the kept files stay
    assert p.returncode == 0 and _numbers(_family(Path(ent["moved_to"]))) == list(range(LINES))


def test_rm_logs_removes_every_rotation_inside_and_outside_but_no_stranger_file(cli, tmp_path):
    out = tmp_path / "outside.log"
    _rotated_run(cli, "rot-out", "--log", str(out))
    rc, doc = cli.json("rm", "rot-out", "--logs")
    assert rc == 0 and not doc["result"]["logs"][0]["kept"], doc
    assert _family(out) == [], f"left behind: {[p.name for p in _family(out)]}"
    _rotated_run(cli, "rot-in")
    rc, doc = cli.json("rm", "rot-in", "--logs")
    assert rc == 0, doc
    assert not (cli.home / "removed").exists() and not (cli.home / "runs" / "rot-in").exists(), doc
    # a run without log_max never rotated: a LOG.1 beside its log is someone else's file
    plain, stranger = tmp_path / "plain.log", tmp_path / "plain.log.1"
    stranger.write_text("logrotate's, not runward's\n")
    rc, doc = cli.json("start", "plain", "--settle", "0.3", "--log", str(plain), "--sh", "echo plain")
    wait_for(lambda: cli.status("plain")["state"] == "exited", timeout=30, what="plain to end")
    rc, doc = cli.json("rm", "plain", "--logs")
    assert rc == 0 and not plain.exists() and stranger.read_text().startswith("logrotate"), doc


# --------------------------------------------------------------------------- prune --logs (item 6)

def test_prune_logs_removes_the_pruned_runs_logs_but_one_a_live_run_writes(cli, tmp_path):
    own, pair, live_log = tmp_path / "own.log", tmp_path / "pair.log", tmp_path / "live.log"
    for name, args in (("pr-in", ()), ("pr-own", ("--log", str(own))), ("pr-pa", ("--log", str(pair))),
                       ("pr-pb", ("--log", str(pair))), ("pr-dead", ("--log", str(live_log)))):
        rc, doc = cli.json("start", name, "--settle", "0.3", *args, "--sh", f"echo {name}")
        wait_for(lambda: cli.status(name)["state"] == "exited", timeout=30, what=f"{name} to end")
    rot = _rotated_run(cli, "pr-rot", "--log", str(tmp_path / "rot.log"))
    rc, doc = cli.json("start", "pr-live", "--settle", "0.3", "--log", str(live_log), "--", "sleep", "300")
    assert rc == 0, doc
    rc, doc = cli.json("prune", "--older-than", "0s", "--logs")
    assert rc == 0, doc
    removed = {r["name"]: r for r in doc["result"]["removed"]}
    assert sorted(removed) == ["pr-dead", "pr-in", "pr-own", "pr-pa", "pr-pb", "pr-rot"], doc
    assert not own.exists() and not (cli.home / "removed").exists(), "pruned runs' logs removed"
    assert not pair.exists(), "a log only pruned runs wrote to goes with the last of them"
    assert _family(rot) == [], [p.name for p in _family(rot)]
    dead = removed["pr-dead"]["logs"][0]
    assert live_log.is_file() and dead["kept"] and "another run" in dead["why"], dead
    assert cli.status("pr-live")["state"] == "running"
    assert cli.json("stop", "pr-live", "--grace", "1")[0] == 0


# --------------------------------------------------------------------------- Slurm unreadable (item 4)


def test_rm_and_prune_refuse_a_slurm_run_whose_state_cannot_be_read(cli, sb, tmp_path):  # noqa: F811
    on = "slurm://local/" + sb["partition"]
    rc, doc = cli.json("start", "sl-unk", "--on", on, "--settle", "1", "--", "/bin/sleep", "300")
    assert rc == 0 and doc["result"]["slurm_state"] == "RUNNING", doc
    job_id = doc["result"]["job_id"]
    conf = cli.env.get("SLURM_CONF")
    cli.env["SLURM_CONF"] = str(testbed.unreachable_slurm_conf(sb, tmp_path))
    rc, doc = cli.json("rm", "sl-unk", "--on", on)
    assert rc == 3 and doc["error"]["type"] == "Unreachable", doc
    assert "Slurm" in doc["error"]["message"] and "Unable to contact slurm controller" in doc["error"]["message"], doc
    assert (cli.home / "runs" / "sl-unk" / "run.json").is_file() and in_queue(job_id)
    rc, doc = cli.json("prune", "--older-than", "0s", "--on", on)
    assert rc == 0 and not doc["result"]["removed"], doc
    kept = [k for k in doc["result"]["kept"] if k["name"] == "sl-unk"]
    assert kept and "unknown" in kept[0]["why"] and "Slurm" in kept[0]["why"], doc
    assert (cli.home / "runs" / "sl-unk" / "run.json").is_file() and in_queue(job_id)
    cli.env.pop("SLURM_CONF")  # the controller answers again: the job is found running, then stopped
    if conf is not None:
        cli.env["SLURM_CONF"] = conf
    rc, doc = cli.json("rm", "sl-unk", "--on", on)
    assert rc == 1 and doc["error"]["type"] == "RunAlive", doc
    assert cli.json("stop", "sl-unk", "--on", on, "--grace", "5")[0] == 0
    rc, doc = cli.json("rm", "sl-unk", "--on", on)
    assert rc == 0, doc
