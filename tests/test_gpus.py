"""GPU awareness (issue 5) without a GPU: `gpus`, `start --gpus --wait-gpus-free`, the verified
release after `stop`, and `status` — against the nvidia-smi stand-in (tests/bin/nvidia-smi) on
PATH, with real processes (the example job, plain sleeps) attached to its fake GPUs. Inside
real containers (podman, from the testbed) the stand-in is pushed to /usr/bin/nvidia-smi and
reports the job's host pid, as the real tool does there; runward maps it back through NSpid."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import fakegpu
import testbed
from conftest import CLI, EXAMPLE, alive, marked, wait_for
from runward.agent.core import wire
from runward.agent.proc import gpus

PY = sys.executable


@pytest.fixture
def gcli(cli, tmp_path):
    """The CLI with the stand-in first on PATH and a fresh 4-GPU state; cli.state is its path."""
    cli.state = fakegpu.create_state(tmp_path / "smi.json", gpus=4)
    cli.env = fakegpu.env_with_standin(cli.state, cli.env)
    return cli


@pytest.fixture
def holders():
    """Plain processes that hold fake GPU memory; killed at the end."""
    procs = []

    def hold(gpu, mib, state, seconds=300, release_delay=0.0):
        p = subprocess.Popen(["sleep", str(seconds)])
        procs.append(p)
        fakegpu.attach(state, gpu, p.pid, mib, release_delay)
        return p
    yield hold
    for p in procs:
        p.kill()
        p.wait()


def train(*env: str) -> list[str]:
    args = []
    for e in ("TRAIN_STEP_SECONDS=0.05", *env):
        args += ["--env", e]
    return [*args, "--", PY, str(EXAMPLE)]


def set_state(path, **changes):
    def change(s):
        for i, g in changes.pop("gpu_fields", {}).items():
            s["gpus"][i].update(g)
        s.update(changes)
    fakegpu.update(path, change)


# --------------------------------------------------------------------------- parsing


def test_cells_sentinels_and_units():
    assert gpus.cell("[N/A]") == (None, "[N/A]")
    assert gpus.cell(" [Not Supported]") == (None, "[Not Supported]")
    assert gpus.cell("[Insufficient Permissions]") == (None, "[Insufficient Permissions]")
    assert gpus.cell("81559 MiB") == (81559, None)
    assert gpus.cell("100 %") == (100, None)
    assert gpus.cell("12.5") == (12.5, None)
    assert gpus.cell("NVIDIA H100 80GB HBM3", number=False) == ("NVIDIA H100 80GB HBM3", None)


def test_header_captures_are_read_by_column_name():
    text = (fakegpu.FIXTURES / "h100-mig__query-compute-apps__csv.txt").read_text()
    rows = gpus.rows(text, gpus.APP_COLS)
    assert [(r["pid"], r["used_memory"]) for r in rows] == [("21180", "2296 MiB"), ("21181", "1272 MiB"),
                                                            ("21198", "7484 MiB")]
    # a capture without the uuid column cannot be read as the agent's query: a clear error
    text = (fakegpu.FIXTURES / "h100-x8__query-gpu__csv.txt").read_text()
    with pytest.raises(wire.AgentFailure) as e:
        gpus.rows(text, gpus.GPU_COLS)
    assert e.value.type == "GpuUnavailable"


# --------------------------------------------------------------------------- gpus: scenarios


def test_several_gpus_and_a_real_job_mapped_to_its_run(gcli, holders):
    rc, doc = gcli.json("start", "g", "--gpus", "2", "--settle", "0.5", *train("TRAIN_GPU_MIB=4096"))
    assert rc == 0, doc
    job = doc["result"]["pid"]
    wait_for(lambda: any(p["pid"] == job for p in fakegpu.read_state(gcli.state)["procs"]), what="job attached")
    other = holders(0, 1500, gcli.state)
    rc, doc = gcli.json("gpus")
    assert rc == 0, doc
    res = doc["result"]
    assert res["mapping"] == "direct" and res["pids_are_local"] is True
    assert [g["index"] for g in res["gpus"]] == [0, 1, 2, 3]
    g0, g1, g2 = res["gpus"][:3]
    assert g2["uuid"] == fakegpu.gpu_uuid(2) and g2["name"] == fakegpu.H100
    assert (g2["used_mib"], g2["total_mib"], g2["utilization_pct"]) == (4096, fakegpu.H100_MIB, 0)
    assert [(p["pid"], p["used_mib"], p["run"], p["attempt"], p["mapped_by"]) for p in g2["processes"]] == [
        (job, 4096, "g", 1, "direct")]
    assert [(p["pid"], p["used_mib"], p["run"], p["state"]) for p in g0["processes"]] == [(other.pid, 1500, None, "S")]
    assert g1["processes"] == [] and g1["used_mib"] == 0
    human = gcli.run("gpus").stdout
    assert "run g attempt 1" in human and f"pid {job}" in human and "mapping: direct" in human
    st = gcli.status("g")
    assert st["gpu_usage"] == [{"index": 2, "used_mib": 4096, "total_mib": fakegpu.H100_MIB, "run_mib": 4096,
                                "processes": 1}]
    assert "gpu 2: 4,096 MiB / 81,559 MiB used, this run 4,096 MiB" in gcli.run("status").stdout


def test_a_same_named_run_of_another_home_is_not_claimed(gcli, tmp_path):
    """Two runward homes on one GPU machine, each with a run named "g": each `gpus` names only
    its own, and says whose the other process is."""
    rc, doc = gcli.json("start", "g", "--gpus", "1", "--settle", "0.5", *train("TRAIN_GPU_MIB=2048"))
    assert rc == 0, doc
    job = doc["result"]["pid"]
    other = CLI(tmp_path / "home-b", gcli.cwd)
    other.env = dict(gcli.env, RUNWARD_HOME=str(tmp_path / "home-b"))
    rc, doc_b = other.json("start", "g", "--gpus", "1", "--settle", "0.5", *train("TRAIN_GPU_MIB=1024"))
    try:
        assert rc == 0, doc_b
        job_b = doc_b["result"]["pid"]
        wait_for(lambda: {job, job_b} <= {p["pid"] for p in fakegpu.read_state(gcli.state)["procs"]},
                 what="both jobs attached")
        for c, mine, theirs in ((gcli, job, job_b), (other, job_b, job)):
            rc, doc = c.json("gpus")
            assert rc == 0, doc
            procs = {p["pid"]: p for p in doc["result"]["gpus"][1]["processes"]}
            assert (procs[mine]["run"], procs[mine]["attempt"]) == ("g", 1)
            assert procs[theirs]["run"] is None and procs[theirs]["other_home_run"] == "g.1"
            assert "of another runward home" in c.run("gpus").stdout
    finally:  # gcli's job still holds GPU 1: the cleanup does not wait for its release
        other.run("stop", "g", "--grace", "5", "--gpu-release-timeout", "0")


def test_sentinels_become_none_with_the_raw_text_kept(gcli):
    set_state(gcli.state, gpu_fields={0: {"util": "[N/A]"}, 1: {"used": "[Insufficient Permissions]"},
                                      2: {"total": "[Not Supported]"}})
    rc, doc = gcli.json("gpus")
    assert rc == 0, doc
    g = doc["result"]["gpus"]
    assert g[0]["utilization_pct"] is None and g[0]["raw"] == {"utilization_pct": "[N/A]"}
    assert g[1]["used_mib"] is None and g[1]["raw"] == {"used_mib": "[Insufficient Permissions]"}
    assert g[2]["total_mib"] is None and g[2]["raw"] == {"total_mib": "[Not Supported]"}
    assert "[Insufficient Permissions] / 81,559 MiB" in gcli.run("gpus").stdout


def test_mig_processes_are_listed_under_the_parent_gpu(gcli, holders):
    def mig_on(s):
        s["gpus"][1].pop("util")   # with MIG on, the stand-in reads utilization as [N/A], as the capture
        s["gpus"][1]["mig_devices"] = [{"profile": "3g.40gb", "uuid": "MIG-a"}, {"profile": "3g.40gb", "uuid": "MIG-b"}]
    fakegpu.update(gcli.state, mig_on)
    p = holders(1, 7484, gcli.state)
    rc, doc = gcli.json("gpus")
    g1 = doc["result"]["gpus"][1]
    assert g1["utilization_pct"] is None and g1["raw"]["utilization_pct"] == "[N/A]"
    assert [x["pid"] for x in g1["processes"]] == [p.pid]


def test_real_mig_capture_replayed(gcli):
    set_state(gcli.state, fixture={
        "query-gpu": str(fakegpu.FIXTURES / "h100-mig__query-gpu__csv__projected.txt"),
        "query-compute-apps": str(fakegpu.FIXTURES / "h100-mig__query-compute-apps__csv.txt")})
    rc, doc = gcli.json("gpus")
    assert rc == 0, doc
    [g] = doc["result"]["gpus"]
    assert (g["index"], g["used_mib"], g["total_mib"], g["utilization_pct"]) == (0, 11125, 81559, None)
    assert [(p["pid"], p["used_mib"]) for p in g["processes"]] == [(21180, 2296), (21181, 1272), (21198, 7484)]


def test_insufficient_permissions_in_a_container_capture(gcli):
    uuid_ = "GPU-ae3738d5-9aa2-e1c9-53be-65b6d373d3d9"
    set_state(gcli.state, gpus=[{"index": 0, "uuid": uuid_, "name": "NVIDIA A100-SXM4-40GB", "total": 40960,
                                 "used": "[Insufficient Permissions]"}],
              fixture={"query-compute-apps": str(
                  fakegpu.FIXTURES / "mig-container__query-compute-apps__insufficient-permissions.txt")})
    rc, doc = gcli.json("gpus")
    assert rc == 0, doc
    [p] = doc["result"]["gpus"][0]["processes"]
    assert p["pid"] is None and p["raw"]["pid"] == "[Insufficient Permissions]"
    # memory that cannot be read is never taken for free
    rc, doc = gcli.json("start", "w", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "0", "--", "sleep", "30")
    assert rc == 1 and doc["error"]["type"] == "GpusBusy", doc
    assert "unreadable" in doc["error"]["message"]


def test_no_devices_is_an_empty_answer(gcli):
    set_state(gcli.state, scenario="no-devices")
    rc, doc = gcli.json("gpus")
    assert rc == 0, doc
    assert doc["result"]["gpus"] == [] and "No devices were found" in doc["result"]["note"]


@pytest.mark.parametrize("scenario,needle,hint", [
    ("driver-failure", "couldn't communicate with the NVIDIA driver", "driver is not loaded"),
    ("version-mismatch", "Driver/library version mismatch", "reboot"),
    ("nvml-unknown-error", "Failed to initialize NVML: Unknown Error", "NVML could not start"),
])
def test_driver_failures_are_clear_errors(gcli, scenario, needle, hint):
    set_state(gcli.state, scenario=scenario)
    rc, doc = gcli.json("gpus")
    assert rc == 1, doc
    assert doc["error"]["type"] == "GpuUnavailable" and needle in doc["error"]["message"]
    assert hint in doc["error"]["hint"]
    p = gcli.run("gpus")
    assert p.returncode == 1 and needle in p.stderr and "hint:" in p.stderr


def test_no_nvidia_smi_at_all(cli, tmp_path):
    path = "/usr/bin:/bin"
    if shutil.which("nvidia-smi", path=path):
        pytest.skip("this machine has a real nvidia-smi in /usr/bin or /bin")
    cli.env["PATH"] = path
    rc, doc = cli.json("gpus")
    assert rc == 0, doc
    assert doc["result"]["gpus"] == [] and doc["result"]["note"] == "no nvidia-smi on this target"
    assert "no nvidia-smi on this target" in cli.run("gpus").stdout
    # in a project naming targets, a `gpus` without --on says which target it asked
    (cli.cwd / "runward.toml").write_text('[targets.gpu1]\non = "ssh://rw1"\n')
    out = cli.run("gpus").stdout
    assert out.startswith("local (no --on; runward.toml's targets: gpu1") and "--all" in out, out
    assert "no nvidia-smi on this target" in out
    assert cli.json("gpus")[1]["target"] == "local"
    (cli.cwd / "runward.toml").write_text('[runs.t]\non = "ssh://rw1"\ncommand = ["true"]\n')  # no [targets]
    out = cli.run("gpus").stdout
    assert out.startswith("local (no --on; runward.toml's runs run on ssh://rw1: --on TARGET)"), out
    (cli.cwd / "runward.toml").unlink()
    # a run with GPUs stops fine there: the release is said to be unchecked, not failed
    rc, doc = cli.json("start", "ng", "--gpus", "0", "--settle", "0.2", "--", "sleep", "30")
    assert rc == 0, doc
    rc, doc = cli.json("stop", "ng")
    assert rc == 0, doc
    assert doc["result"]["gpu_release"] == {"checked": False, "verified": False,
                                            "note": "GPU release not checked: no nvidia-smi"}
    # --wait-gpus-free cannot be honoured: refused, nothing started
    rc, doc = cli.json("start", "ng2", "--gpus", "0", "--wait-gpus-free", "--", "sleep", "30")
    assert rc == 1 and doc["error"]["type"] == "GpuUnavailable" and "no nvidia-smi" in doc["error"]["message"]


def test_status_calls_nvidia_smi_only_for_runs_with_gpus(cli, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                   "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
    smi.chmod(0o755)
    cli.env["PATH"] = f"{bindir}:{cli.env['PATH']}"
    rc, doc = cli.json("start", "cpu", "--settle", "0.2", "--", "sleep", "30")
    assert rc == 0, doc
    st = cli.status("cpu")
    assert "gpu_usage" not in st and not calls.exists()
    rc, doc = cli.json("start", "gpu", "--gpus", "0", "--settle", "0.2", "--", "sleep", "30")
    assert rc == 0, doc
    assert not calls.exists(), "start without --wait-gpus-free does not need nvidia-smi"
    st = cli.status("gpu")
    assert st["gpu_usage"] == [] and "couldn't communicate" in st["gpu_note"]
    assert calls.exists()
    # stop: the tree is dead (verified) but the GPUs could not be checked: not verified, exit 5
    rc, doc = cli.json("stop", "gpu")
    assert rc == 5 and doc["result"]["verified_dead"] is True, doc
    assert "couldn't communicate" in doc["error"]["message"]
    cli.json("stop", "cpu")


# --------------------------------------------------------------------------- stop: release


def test_stop_waits_for_the_delayed_release(gcli):
    rc, doc = gcli.json("start", "rel", "--gpus", "1", "--settle", "0.5",
                        *train("TRAIN_GPU_MIB=30000", "TRAIN_GPU_RELEASE_SECONDS=1.5"))
    assert rc == 0, doc
    wait_for(lambda: fakegpu.query_gpus(gcli.state)[1]["used"] == "30000", what="memory attached")
    rc, doc = gcli.json("stop", "rel", "--grace", "10")
    assert rc == 0, doc
    rel = doc["result"]["gpu_release"]
    assert rel["verified"] is True and rel["method"] == "direct" and rel["checked"] is True
    assert rel["waited_s"] >= 1.2, rel   # the stand-in frees the memory 1.5 s after it sees the exit
    assert rel["gpus"][0]["index"] == 1 and rel["gpus"][0]["released"] and rel["gpus"][0]["holders"] == []
    assert "gpu_released" in doc["result"]["verified"]
    assert fakegpu.query_gpus(gcli.state)[1]["used"] == "0"


def test_gpu_still_held_after_stop_is_exit_5_naming_the_holder(gcli, holders):
    rc, doc = gcli.json("start", "held", "--gpus", "1", "--settle", "0.3", "--", "sleep", "300")
    assert rc == 0, doc
    job = doc["result"]["pid"]
    other = holders(1, 71302, gcli.state)
    t0 = time.monotonic()
    rc, doc = gcli.json("stop", "held", "--gpu-release-timeout", "2")
    took = time.monotonic() - t0
    assert rc == 5, doc
    assert doc["result"]["verified_dead"] is True and not alive(job)
    assert doc["error"]["type"] == "NotVerified"
    assert f"GPU 1 still holds 71,302 MiB (pid {other.pid}, state S)" in doc["error"]["message"]
    rel = doc["result"]["gpu_release"]
    assert rel["verified"] is False and rel["waited_s"] >= 2.0
    assert [h["pid"] for h in rel["gpus"][0]["holders"]] == [other.pid]
    assert took < 15, f"stop took {took:.1f}s with --gpu-release-timeout 2"
    p = gcli.run("stop", "held", "--gpu-release-timeout", "0")
    assert p.returncode == 5 and f"GPU 1 still holds 71,302 MiB (pid {other.pid}, state S)" in p.stderr
    # once the holder is gone, the next stop verifies the release
    other.kill()
    other.wait()
    rc, doc = gcli.json("stop", "held", "--gpu-release-timeout", "10")
    assert rc == 0 and doc["result"]["gpu_release"]["verified"], doc


def test_a_leaked_child_of_the_run_is_named_with_its_run(gcli):
    """The escapee outlives main and keeps its GPU memory: stop kills it (it carries the marker)
    and the release follows; the holder seen before the stop is the run's."""
    rc, doc = gcli.json("start", "leak", "--gpus", "0", "--settle", "0.5",
                        *train("TRAIN_ESCAPEE_GPU_MIB=70000", "TRAIN_ESCAPEE_LINGER=1"))
    assert rc == 0, doc
    main = doc["result"]["pid"]
    wait_for(lambda: fakegpu.query_gpus(gcli.state)[0]["used"] == "70000", what="escapee attached")
    rc, doc = gcli.json("gpus")
    [p] = doc["result"]["gpus"][0]["processes"]
    assert p["run"] == "leak" and p["attempt"] == 1 and p["pid"] != main
    rc, doc = gcli.json("stop", "leak", "--grace", "5")
    assert rc == 0 and doc["result"]["gpu_release"]["verified"], doc


# --------------------------------------------------------------------------- start --wait-gpus-free


def test_wait_gpus_free_refuses_naming_the_holder_and_makes_no_record(gcli):
    rc, doc = gcli.json("start", "hog", "--gpus", "1", "--settle", "0.5", *train("TRAIN_GPU_MIB=20000"))
    assert rc == 0, doc
    hog = doc["result"]["pid"]
    wait_for(lambda: fakegpu.query_gpus(gcli.state)[1]["used"] == "20000", what="hog attached")
    t0 = time.monotonic()
    rc, doc = gcli.json("start", "w", "--gpus", "0,1", "--wait-gpus-free", "--gpu-wait-timeout", "1", "--", "sleep", "30")
    assert rc == 1, doc
    assert time.monotonic() - t0 >= 1.0
    err = doc["error"]
    assert err["type"] == "GpusBusy"
    # the example job mostly sleeps between steps, but may be caught mid-step: S or R
    assert re.search(rf"GPU 1 holds 20,000 MiB \(pid {hog}, state [SR], run hog attempt 1\)", err["message"]), err
    assert "GPU 0" not in err["message"]
    assert "runward stop hog" in err["hint"]
    assert not (gcli.home / "runs" / "w").exists(), "a refused start must leave no record"
    rc, doc = gcli.json("status", "w")
    assert rc == 4
    p = gcli.run("start", "w", "--gpus", "1", "--wait-gpus-free", "--gpu-wait-timeout", "0", "--", "sleep", "30")
    assert p.returncode == 1 and f"pid {hog}" in p.stderr and "hint:" in p.stderr


def test_wait_gpus_free_succeeds_when_the_holder_exits_during_the_wait(gcli, holders):
    # the hold outlasts the CLI's own start-up even on a loaded machine (1.5 s did not in CI)
    h = holders(0, 50000, gcli.state, seconds=5, release_delay=0.5)
    rc, doc = gcli.json("start", "w", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "30", "--settle", "0.3",
                        "--", "sleep", "30")
    assert rc == 0, doc
    gw = doc["result"]["gpu_wait"]
    assert gw["waited_s"] >= 1.0 and gw["gpus"][0]["free"] and gw["polls"] >= 2, gw
    assert h.poll() is not None
    assert gcli.status("w")["state"] == "running"


def test_stop_cancels_a_start_waiting_for_gpus(gcli, holders):
    """A stop of a run whose (first) start still waits for its GPUs ends that wait at the
    start's next poll: the start says Cancelled (exit 1) and leaves nothing; the stop, which
    said whose lock it waited for, goes on."""
    holders(0, 50000, gcli.state)
    start = gcli.popen("start", "w", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "60", "--json",
                       "--", "sleep", "30")
    try:
        lock = gcli.home / "runs" / ".w.lock"
        wait_for(lambda: lock.exists() and b'"start"' in lock.read_bytes(), what="the start holding the lock")
        t0 = time.monotonic()
        stop = gcli.run("stop", "w", "--json", "--lock-timeout", "20")
        assert time.monotonic() - t0 < 10
        doc = json.loads(stop.stdout)
        assert stop.returncode == 0 and doc["result"]["verified_dead"], (doc, stop.stderr)
        assert "waiting for run w: locked by start" in stop.stderr, stop.stderr
        out, err = start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()
    doc = json.loads(out)
    assert start.returncode == 1 and doc["error"]["type"] == "Cancelled", doc
    assert "start of w cancelled by a stop while waiting for GPUs" in doc["error"]["message"]
    assert not (gcli.home / "runs" / "w").exists() and not marked("w.")
    assert not (gcli.home / "runs" / ".w.cancel").exists()


def test_restart_of_a_run_whose_next_start_waits_for_gpus_says_what_became_of_that_start(gcli, holders):
    """`runward restart w` while `start w --wait-gpus-free` (a later attempt) waits under the run's
    lock: the restart's stop step cancels that wait, and the start said "cancelled by a stop" (and
    "the stop goes on") although a restart took the run over and started it from attempt 1's spec,
    not from that start's command; the restart said nothing of the start it had cancelled. Now the
    start names the restart and what it starts, and the restart's stop says it cancelled the
    waiting start (which made no attempt), both checked against the records."""
    holders(0, 50000, gcli.state)
    rc, doc = gcli.json("start", "w", "--settle", "0.2", "--", "sleep", "0.5")
    assert rc == 0, doc
    wait_for(lambda: gcli.status("w")["state"] == "exited", what="attempt 1 ended")
    start = gcli.popen("start", "w", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "60", "--json",
                       "--", "sleep", "77")
    try:
        lock = gcli.home / "runs" / ".w.lock"
        wait_for(lambda: lock.exists() and b'"gpu_wait"' in lock.read_bytes(), what="the start waiting for GPUs")
        waiter = json.loads(lock.read_bytes())["pid"]
        restart = gcli.run("restart", "w", "--settle", "0.3")
        out, err = start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()
    assert restart.returncode == 0, (restart.stdout, restart.stderr)
    assert f"w: cancelled the start waiting for GPUs 0 (pid {waiter}): it made no attempt 2" in restart.stdout, restart.stdout
    doc = json.loads(out)
    assert start.returncode == 1 and doc["error"]["type"] == "Cancelled", doc
    msg = doc["error"]["message"]
    assert "cancelled by a stop" not in msg and "`runward restart w` took the run over" in msg, msg
    assert "this start made no attempt" in msg and "not from this start's command" in msg, msg
    # ground truth: the records. Attempt 2 is the restart's, with attempt 1's command, not `sleep 77`
    runs = gcli.home / "runs" / "w" / "attempts"
    assert sorted(f.name for f in runs.glob("*.json")) == ["1.json", "2.json"]
    a2 = json.loads((runs / "2.json").read_text())
    assert a2["argv"] == ["sleep", "0.5"] and not (gcli.home / "runs" / ".w.cancel").exists()
    gcli.run("stop", "w")


def test_a_plain_stop_says_too_that_it_cancelled_the_waiting_start(gcli, holders):
    holders(0, 50000, gcli.state)
    start = gcli.popen("start", "w2", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "60", "--json",
                       "--", "sleep", "30")
    try:
        lock = gcli.home / "runs" / ".w2.lock"
        wait_for(lambda: lock.exists() and b'"gpu_wait"' in lock.read_bytes(), what="the start waiting for GPUs")
        rc, doc = gcli.json("stop", "w2", "--lock-timeout", "20")
        start.communicate(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()
    assert rc == 0 and doc["result"]["cancelled_start"]["launched"] is False, doc
    assert doc["result"]["cancelled_start"]["attempt"] == 1 and doc["result"]["cancelled_start"]["gpus"] == [0], doc
    assert not (gcli.home / "runs" / "w2" / "attempts" / "1.json").exists()


def test_a_stale_cancel_request_is_ignored(gcli, holders):
    """A cancel request whose stop is gone (it timed out, or was killed) cancels nothing."""
    (gcli.home / "runs").mkdir(parents=True, exist_ok=True)
    (gcli.home / "runs" / ".w.cancel").write_text(json.dumps({"pid": 999999999, "start": 1}))
    holders(0, 50000, gcli.state, seconds=5, release_delay=0.2)  # outlasts the CLI's start-up under load
    rc, doc = gcli.json("start", "w", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "30", "--settle", "0.3",
                        "--", "sleep", "30")
    assert rc == 0 and doc["result"]["gpu_wait"]["polls"] >= 2, doc
    rc, doc = gcli.json("stop", "w", "--grace", "5")
    assert rc == 0, doc


def test_max_used_threshold_and_memory_without_a_process(gcli):
    set_state(gcli.state, gpu_fields={0: {"base_used": 800}})
    rc, doc = gcli.json("start", "a", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "0", "--settle", "0.2",
                        "--", "sleep", "30")
    assert rc == 0, doc   # 800 MiB <= the default 1024
    rc, doc = gcli.json("start", "b", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "0", "--max-used", "100",
                        "--", "sleep", "30")
    assert rc == 1, doc
    assert "GPU 0 holds 800 MiB (no process listed" in doc["error"]["message"]
    rc, doc = gcli.json("start", "c", "--gpus", "7", "--wait-gpus-free", "--", "sleep", "30")
    assert rc == 2 and "GPU 7 is not on this target" in doc["error"]["message"], doc
    rc, doc = gcli.json("start", "d", "--wait-gpus-free", "--", "sleep", "30")
    assert rc == 2 and "--wait-gpus-free needs --gpus" in doc["error"]["message"]


# --------------------------------------------------------------------------- --all


def test_gpus_all_fans_out_over_named_targets(gcli, tmp_path):
    (gcli.cwd / "runward.toml").write_text(
        f'[targets.a]\non = "local"\nhome = "{tmp_path}/ha"\n\n[targets.b]\non = "local"\nhome = "{tmp_path}/hb"\n')
    rc, doc = gcli.json("gpus", "--all")
    assert rc == 0, doc
    assert [r["ok"] for r in doc["targets"]] == [True, True]
    assert all(len(r["result"]["gpus"]) == 4 for r in doc["targets"])
    out = gcli.run("gpus", "--all").stdout
    assert out.count("== ") == 2 and out.count("GPU 3") == 2


# --------------------------------------------------------------------------- containers: NSpid (testbed)

STANDIN_DIR = "/usr/local/lib/rw-fake-smi"


@pytest.fixture
def ccli(tmp_path):
    tb = testbed.require("podman")
    testbed.require("ssh")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir(exist_ok=True)
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    c.tag = uuid.uuid4().hex[:8]
    home = f"/tmp/rw-gpu-{c.tag}"
    (tmp_path / "work" / "runward.toml").write_text(
        f'[targets.pod]\non = "podman:{tb["podman"]}"\nhome = "{home}/pod"\n\n'
        f'[targets.h1pod]\non = "ssh://rw1/podman:{tb["podman"]}"\nhome = "{home}/h1pod"\n')
    yield c


def nspid(pid: int) -> list[int]:
    """The NSpid line of /proc/PID/status: the pid in each namespace, the innermost last."""
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("NSpid:"))
    return [int(x) for x in line.split()[1:]]


def _in_container(c, on, *argv):
    rc, doc = c.json("exec", "--on", on, "--", *argv)
    assert "error" not in doc and rc == doc["result"]["exit"], doc  # it ran: its own code, passed through
    return doc["result"]


def _fake_smi_in(c, on, tmp_path, procs, gpus=2):
    """The nvidia-smi stand-in inside the container, with these GPUs and processes on them
    (pids the container's, reported as the host's, as the real tool does there)."""
    wrapper = tmp_path / "nvidia-smi"
    wrapper.write_text(f"#!/bin/sh\nRUNWARD_FAKE_SMI_STATE={STANDIN_DIR}/state.json "
                       f"exec python3 {STANDIN_DIR}/nvidia-smi \"$@\"\n")
    wrapper.chmod(0o755)
    state = fakegpu.create_state(tmp_path / "state.json", gpus=gpus)
    fakegpu.update(state, lambda s: s["procs"].extend(procs))
    rc, doc = c.json("push", "--on", on, f"{fakegpu.STANDIN}:{STANDIN_DIR}/nvidia-smi",
                     f"{state}:{STANDIN_DIR}/state.json", f"{wrapper}:/usr/bin/nvidia-smi")
    assert rc == 0, doc


def _clean_container(c, on, name):
    """Take the stand-in and the homes out of the container; kill what the run left."""
    c.run("exec", "--on", on, "--", "rm", "-rf", "/usr/bin/nvidia-smi", STANDIN_DIR)
    c.run("exec", "--on", on, "--", "rm", "-rf", f"/tmp/rw-gpu-{c.tag}")
    for pid, start in marked(name + ".").items():
        if alive(pid, start):
            os.kill(pid, 9)


@pytest.mark.parametrize("on", ["pod", "h1pod"])
def test_host_pids_in_a_container_are_mapped_through_nspid(ccli, tmp_path, on):
    name = f"gj{ccli.tag}"
    if _in_container(ccli, on, "sh", "-c", "test -e /usr/bin/nvidia-smi")["code"] == 0:
        pytest.skip("the container already has a /usr/bin/nvidia-smi")
    outside = subprocess.Popen(["sleep", "300"])   # a host process on GPU 1, not in the container
    try:
        rc, doc = ccli.json("start", name, "--on", on, "--gpus", "0", "--settle", "0.3", "--", "sleep", "300")
        assert rc == 0, doc
        cpid, cstart = doc["result"]["pid"], doc["result"]["start_time"]
        host = wait_for(lambda: [p for p in marked(name + ".")], what="the job in the host's /proc")
        [hpid] = [p for p in host if nspid(p)[-1] == cpid]
        assert hpid != cpid, "the container has a pid namespace of its own"
        _fake_smi_in(ccli, on, tmp_path, [
            {"gpu": 0, "pid": cpid, "starttime": cstart, "report_pid": hpid, "mib": 4096, "release_delay": 1.0},
            {"gpu": 1, "pid": 1, "report_pid": outside.pid, "mib": 1000}])

        rc, doc = ccli.json("gpus", "--on", on)
        assert rc == 0, doc
        res = doc["result"]
        assert res["pids_are_local"] is False and res["mapping"] == "nspid", res
        [p0] = res["gpus"][0]["processes"]
        assert (p0["pid"], p0["host_pid"], p0["run"], p0["attempt"], p0["mapped_by"]) == (cpid, hpid, name, 1, "nspid")
        [p1] = res["gpus"][1]["processes"]
        assert p1["pid"] is None and p1["host_pid"] == outside.pid and p1["outside_target"] and p1["run"] is None
        assert "mapping: nspid" in ccli.run("gpus", "--on", on).stdout

        # the fallback: no host lookup, attribution by the run recorded on the GPU
        rc, doc = ccli.json("gpus", "--on", on, "--map", "memory")
        res = doc["result"]
        assert res["mapping"] == "memory"
        [p0] = res["gpus"][0]["processes"]
        assert (p0["pid"], p0["run"], p0["mapped_by"], p0["pid_is_host_pid"]) == (hpid, name, "memory", True)
        [p1] = res["gpus"][1]["processes"]
        assert p1["run"] is None   # no run here records GPU 1

        rc, doc = ccli.json("status", name, "--on", on)
        [u] = doc["result"]["runs"][0]["gpu_usage"]
        assert (u["index"], u["used_mib"], u["run_mib"]) == (0, 4096, None)

        rc, doc = ccli.json("stop", name, "--on", on, "--gpu-release-timeout", "20")
        assert rc == 0, doc
        rel = doc["result"]["gpu_release"]
        assert rel["verified"] and rel["method"] == "memory" and rel["waited_s"] >= 0.5, rel
    finally:
        outside.kill()
        outside.wait()
        _clean_container(ccli, on, name)


def test_a_same_named_run_of_another_home_in_the_container_is_not_claimed(ccli, tmp_path):
    name = f"gk{ccli.tag}"
    cfg = ccli.cwd / "runward.toml"
    cfg.write_text(cfg.read_text() + f'\n[targets.pod2]\non = "podman:{testbed.require("podman")["podman"]}"\n'
                                     f'home = "/tmp/rw-gpu-{ccli.tag}/pod2"\n')
    if _in_container(ccli, "pod", "sh", "-c", "test -e /usr/bin/nvidia-smi")["code"] == 0:
        pytest.skip("the container already has a /usr/bin/nvidia-smi")
    try:
        jobs = {}
        for on in ("pod", "pod2"):
            rc, doc = ccli.json("start", name, "--on", on, "--gpus", "0", "--settle", "0.3", "--", "sleep", "300")
            assert rc == 0, doc
            jobs[on] = (doc["result"]["pid"], doc["result"]["start_time"])
        host = wait_for(lambda: (lambda m: m if len(m) == 2 else None)(marked(name + ".")), what="both jobs")
        hpid = {nspid(p)[-1]: p for p in host}
        _fake_smi_in(ccli, "pod", tmp_path, [
            {"gpu": 0, "pid": cpid, "starttime": cstart, "report_pid": hpid[cpid], "mib": 1000}
            for cpid, cstart in jobs.values()])
        rc, doc = ccli.json("gpus", "--on", "pod")
        assert rc == 0 and doc["result"]["mapping"] == "nspid", doc
        procs = {p["pid"]: p for p in doc["result"]["gpus"][0]["processes"]}
        mine, theirs = procs[jobs["pod"][0]], procs[jobs["pod2"][0]]
        assert (mine["run"], mine["attempt"]) == (name, 1)
        assert theirs["run"] is None and theirs["other_home_run"] == f"{name}.1"
    finally:
        for on in ("pod", "pod2"):
            ccli.run("stop", name, "--on", on, "--grace", "5", "--gpu-release-timeout", "0")
        _clean_container(ccli, "pod", name)


def test_holder_of_a_container_gpu_after_stop_is_named_through_the_host(ccli, tmp_path):
    on = "pod"
    name = f"gh{ccli.tag}"
    if _in_container(ccli, on, "sh", "-c", "test -e /usr/bin/nvidia-smi")["code"] == 0:
        pytest.skip("the container already has a /usr/bin/nvidia-smi")
    outside = subprocess.Popen(["sleep", "300"])
    try:
        rc, doc = ccli.json("start", name, "--on", on, "--gpus", "0", "--settle", "0.3", "--", "sleep", "300")
        assert rc == 0, doc
        _fake_smi_in(ccli, on, tmp_path, [{"gpu": 0, "pid": 1, "report_pid": outside.pid, "mib": 9000}], gpus=1)
        rc, doc = ccli.json("stop", name, "--on", on, "--gpu-release-timeout", "1")
        assert rc == 5, doc
        msg = doc["error"]["message"]
        assert f"GPU 0 still holds 9,000 MiB (host pid {outside.pid}, state S" in msg and "outside this target" in msg
    finally:
        outside.kill()
        outside.wait()
        _clean_container(ccli, on, name)


def test_status_of_all_runs_shows_a_first_start_waiting_for_gpus(gcli, holders):
    """A first start waiting for its GPUs has no run directory yet, only its lock: `status`
    NAME showed the wait while `status` of all runs said "no runs" (and the RunNotFound hint
    of logs/history/rm sends the user to that listing). Once the wait ends, it is gone."""
    holders(0, 50000, gcli.state)
    start = gcli.popen("start", "w", "--gpus", "0", "--wait-gpus-free", "--gpu-wait-timeout", "60", "--json",
                       "--", "sleep", "30")
    try:
        lock = gcli.home / "runs" / ".w.lock"
        wait_for(lambda: lock.exists() and b'"gpu_wait"' in lock.read_bytes(), what="the start waiting")
        holder_pid = json.loads(lock.read_bytes())["pid"]
        assert os.path.exists(f"/proc/{holder_pid}")  # ground truth: the waiting start is alive
        rc, doc = gcli.json("status")
        runs = {r["name"]: r for r in doc["result"]["runs"]}
        assert rc == 0 and "w" in runs, doc
        assert runs["w"]["gpu_wait"]["attempt"] == 1 and runs["w"]["attempt"] is None, runs["w"]
        assert "waiting" in gcli.run("status").stdout
        os.kill(holder_pid, signal.SIGKILL)  # the wait ends with its process: nothing is waiting
        wait_for(lambda: not os.path.exists(f"/proc/{holder_pid}"), what="the start gone")
        rc, doc = gcli.json("status")
        assert rc == 0 and doc["result"]["runs"] == [], doc
    finally:
        if start.poll() is None:
            start.kill()
        start.communicate(timeout=30)
