"""Failure attribution (agent/health/attribution.py): the first rank that failed on its own (root
cause) and what the others did because of it (cascade), from real log formats and from a real
two-rank torchrun job (gloo, CPU) whose rank 1 dies while rank 0 waits in all_reduce.

Fixtures: tests/fixtures/logs/SOURCES.md says where each format is from."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from conftest import wait_for  # noqa: E402
from helpers_attribution import OOM_JOB, _torchrun, attr  # noqa: E402


def test_gloo_job_whose_rank_1_ran_out_of_memory_names_rank_1_and_rank_0_as_cascade():
    res = attr("torchrun_gloo_oom.log")
    root = res["root"]
    assert (root["rank"], root["kind"], root["cascade"]) == (1, "cuda_oom", False), root
    assert "Tried to allocate" in root["line"], root  # the exception line, not its source line
    assert [(e["rank"], e["cascade"], e["what"]) for e in res["effects"]] == [(0, True, "lost its peer")], res
    assert res["first_observed"]["rank"] == 1 and res["first_observed"]["exitcode"] == 1, res
    assert root["t"] is not None and root["t_from"].startswith("torchrun"), root  # its table's time
    assert res["summary"].startswith("root cause: rank 1 CUDA out of memory at 16:02:45; "
                                     "rank 0 then lost its peer (effects)"), res["summary"]


def test_tee_prefixes_nest_and_the_global_rank_wins():
    res = attr("torchrun_tee_gloo.log")  # [default1]:[rank1]: ...
    assert res["root"]["rank"] == 1 and res["root"]["kind"] == "exception", res["root"]
    assert res["root"]["what"] == "ValueError: bad batch: shape mismatch at step 3"
    assert [e["rank"] for e in res["effects"]] == [0] and res["effects"][0]["cascade"]


def test_nccl_watchdog_timeouts_after_one_ranks_oom_are_its_cascade_not_torchruns_root():
    res = attr("nccl_oom_cascade.log")
    assert res["root"]["rank"] == 2 and res["root"]["kind"] == "cuda_oom", res["root"]
    assert sorted(e["rank"] for e in res["effects"]) == [0, 1, 3], res["effects"]
    assert all(e["what"] == "timed out in the collective" for e in res["effects"]), res["effects"]
    # torchrun saw rank 0's SIGABRT (its watchdog) first: said beside, never taken for the root
    assert res["first_observed"]["rank"] == 0
    assert res["summary"] == ("root cause: rank 2 CUDA out of memory; ranks 0,1,3 then timed out in the "
                              "collective (effects); torchrun's first observed failure is rank 0")


def test_only_timeouts_name_no_root_cause():
    """Every rank timed out and none failed on its own: a hang, not a crash. No root is made up."""
    res = attr("nccl_watchdog.log")
    assert res["root"] is None and res["effects"][0]["rank"] == 0, res
    assert res["summary"].startswith("no rank failed on its own in the log"), res["summary"]
    assert "02:07:08" in res["summary"]  # the watchdog's glog time, month not zero-padded (E321)


def test_plain_traceback_of_a_single_process_job():
    res = attr("cuda_oom.log")
    assert res["root"]["kind"] == "cuda_oom" and res["root"]["rank"] is None and res["effects"] == []
    assert res["summary"] == "root cause: CUDA out of memory"


def test_real_torchrun_job_status_names_the_oom_rank_and_rank_0_as_cascade(cli, tmp_path):
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    script = tmp_path / "oom_job.py"
    script.write_text(OOM_JOB)
    name = f"attr{os.getpid()}"
    rc, doc = cli.json("start", name, "--settle", "0.2", "--", torchrun, "--standalone", "--nproc_per_node=2",
                       str(script), timeout=120)
    assert rc == 0, doc
    st = wait_for(lambda: (lambda s: s if s["state"] == "exited" else None)(cli.status(name)), 120,
                  "the torchrun job to fail")
    assert st["exit"]["code"] == 1, st
    a = st["attribution"]
    assert a["root"]["rank"] == 1 and a["root"]["kind"] == "cuda_oom", a
    assert [(e["rank"], e["cascade"]) for e in a["effects"]] == [(0, True)], a
    human = cli.run("status", name).stdout
    assert "root cause: rank 1 CUDA out of memory at " in human, human
    assert "rank 0 then lost its peer (effects)" in human, human


def test_gave_up_notification_carries_the_root_cause(cli, tmp_path):
    """The shim's gave_up event (a command's stdin, a webhook's body) says who failed first."""
    got = tmp_path / "events.jsonl"
    recorder = tmp_path / "rec.py"
    recorder.write_text("import sys\nopen(sys.argv[1], 'a').write(sys.stdin.read() + '\\n')\n")
    job = tmp_path / "job.py"
    job.write_text("import sys\nsys.stderr.write('[rank3]: Traceback (most recent call last):\\n'\n"
                   "  '[rank3]:   File \"train.py\", line 9, in <module>\\n'\n"
                   "  '[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\\n'\n"
                   "  '[rank0]: RuntimeError: Connection reset by peer\\n')\nsys.exit(1)\n")
    name = f"attrgu{os.getpid()}"
    cli.json("start", name, "--restart", "on-failure", "--max-restarts", "0", "--settle", "0",
             "--notify", f"{sys.executable} {recorder} {got}", "--", sys.executable, str(job))
    wait_for(lambda: got.exists() and '"gave_up"' in got.read_text(), 30, "the gave_up notification")
    gave = next(json.loads(ln) for ln in got.read_text().splitlines() if '"gave_up"' in ln)
    a = gave["attribution"]
    assert a["root"]["rank"] == 3 and a["root"]["kind"] == "cuda_oom", gave
    assert a["summary"] == "root cause: rank 3 CUDA out of memory; rank 0 then lost its peer (effects)", a
