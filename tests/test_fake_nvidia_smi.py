"""The nvidia-smi stand-in (tests/bin/nvidia-smi) against real captures.

For each capture in tests/fixtures/nvidia-smi, the test builds a state that holds the same
GPUs and processes, runs the stand-in with the same arguments as a real process, and wants
the same bytes and exit code back. Then the memory-after-exit model is checked with real
`sleep` processes that are killed, waiting on the real condition (bounded)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

import fakegpu
from conftest import read_stat, wait_for

INDEX = json.loads((fakegpu.FIXTURES / "index.json").read_text())
AGENT_GPU_QUERY = ("--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu",
                   "--format=csv,noheader,nounits")
AGENT_APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")


def fixture_text(name):
    return (fakegpu.FIXTURES / name).read_text()


def cells(text):
    return [line.split(", ") for line in text.splitlines()]


def project(text, fields):
    """Columns FIELDS (by header name, units stripped) of a CSV with a header."""
    rows = cells(text)
    names = [h.split(" [")[0] for h in rows[0]]
    keep = [names.index(f) for f in fields]
    return "".join(", ".join(row[i] for i in keep) + "\n" for row in rows)


def assert_replays(state, name, args=None):
    """The stand-in, run with the capture's arguments, prints the capture's bytes."""
    args = INDEX[name]["argv"] if args is None else args
    got = fakegpu.run_smi(state, *args)
    assert (got.returncode, got.stdout, got.stderr) == (INDEX[name]["exit"], fixture_text(name), "")


@pytest.fixture
def sleeper():
    """Start real `sleep` processes; every one is killed and reaped at teardown."""
    procs = []

    def start():
        procs.append(subprocess.Popen(["sleep", "120"]))
        return procs[-1]

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


@pytest.fixture
def state_path(tmp_path):
    return tmp_path / "smi.json"


# --------------------------------------------------------------------------- real formats
def test_eight_gpus_noheader_nounits_as_captured(state_path):
    name = "titanx-x8__query-gpu__noheader-nounits.txt"
    gpus = [{"index": int(i), "uuid": u, "name": n, "temp": int(t), "util": int(ut),
             "base_used": int(used), "total": int(total)}
            for i, u, n, t, ut, used, total in cells(fixture_text(name))]
    assert_replays(fakegpu.create_state(state_path, gpus=gpus), name)


def test_eight_h100_with_header_and_units_as_captured(state_path):
    name = "h100-x8__query-gpu__csv.txt"
    gpus = [{"index": int(i), "uuid": fakegpu.gpu_uuid(int(i)), "name": n,
             "util": int(ut.split()[0]), "base_used": int(used.split()[0]),
             "total": int(total.split()[0])}
            for i, n, ut, used, total in cells(fixture_text(name))[1:]]
    assert_replays(fakegpu.create_state(state_path, gpus=gpus), name)


MASKED = "GPU-00000000-0000-0000-0000-000000000000"
MIG = [{"profile": p, "uuid": f"MIG-0000000{i}-0000-0000-0000-00000000000{i}"}
       for i, p in enumerate(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])]


def test_h100_agent_columns_as_captured(state_path):
    state = fakegpu.create_state(state_path, gpus=[
        {"index": 0, "uuid": MASKED, "name": fakegpu.H100, "base_used": 0, "util": 0}])
    assert_replays(state, "h100__query-gpu__csv__projected.txt")


def test_no_process_is_a_bare_header_or_nothing(state_path):
    state = fakegpu.create_state(state_path, gpus=1)
    fields = ["gpu_uuid", "pid", "process_name", "used_gpu_memory"]
    want = project(fixture_text("h100__query-compute-apps__csv__idle.txt"), fields)
    got = fakegpu.run_smi(state, "--query-compute-apps=" + ",".join(fields), "--format=csv")
    assert (got.returncode, got.stdout) == (0, want)
    got = fakegpu.run_smi(state, *AGENT_APPS_QUERY)
    assert (got.returncode, got.stdout) == (0, "")


def test_mig_list_query_and_parent_uuid_in_compute_apps(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=[
        {"index": 0, "uuid": MASKED, "name": fakegpu.H100, "base_used": 11125 - 2296 - 1272 - 7484,
         "mig_devices": MIG}])
    for pid, proc_name, mib in [(21180, "/root/tools/memhog", 2296),
                                (21181, "/root/tools/memhog", 1272), (21198, "./gpu_burn", 7484)]:
        fakegpu.attach(state, 0, sleeper().pid, mib)

        def rename(s, pid=pid, proc_name=proc_name):
            s["procs"][-1].update(report_pid=pid, name=proc_name)
        fakegpu.update(state, rename)
    assert_replays(state, "h100-mig__list-gpus.txt")
    assert_replays(state, "h100-mig__query-gpu__csv__projected.txt")
    fields = ["gpu_uuid", "pid", "process_name", "used_gpu_memory"]
    got = fakegpu.run_smi(state, "--query-compute-apps=" + ",".join(fields), "--format=csv")
    assert got.stdout == project(fixture_text("h100-mig__query-compute-apps__csv.txt"), fields)
    assert {a["gpu_uuid"] for a in fakegpu.query_apps(state)} == {MASKED}, "parent GPU uuid"


def test_a100_seven_way_mig_list_as_captured(state_path):
    rows = fixture_text("a100-mig7__list-gpus.txt").splitlines()
    uuid = rows[0].split("(UUID: ")[1].rstrip(")")
    migs = [{"profile": "1g.10gb", "uuid": r.split("(UUID: ")[1].rstrip(")")} for r in rows[1:]]
    state = fakegpu.create_state(state_path, gpus=[
        {"index": 0, "uuid": uuid, "name": "NVIDIA A100-SXM4-80GB", "mig_devices": migs}])
    assert_replays(state, "a100-mig7__list-gpus.txt")


@pytest.mark.parametrize("name, sentinel", [
    ("fan-na__query-gpu__noheader-nounits.txt", "[N/A]"),
    ("fan-not-supported__query-gpu__noheader-nounits.txt", "[Not Supported]")])
def test_unsupported_field_sentinels_as_captured(state_path, name, sentinel):
    state = fakegpu.create_state(state_path, gpus=[
        {"index": 0, "uuid": MASKED, "name": "GPU", "total": 2004, "base_used": 0, "temp": 44,
         "fan": sentinel, "util": 0, "mem_util": 0}])
    assert_replays(state, name)


def test_mig_container_insufficient_permissions_as_captured(state_path, sleeper):
    denied = "[Insufficient Permissions]"
    state = fakegpu.create_state(state_path, gpus=[
        {"index": 0, "uuid": "GPU-ae3738d5-9aa2-e1c9-53be-65b6d373d3d9", "name": fakegpu.H100,
         "util": "[N/A]", "mem_util": "[N/A]", "used": denied, "total": denied}])
    assert_replays(state, "mig-container__query-gpu__insufficient-permissions.txt")
    fakegpu.attach(state, 0, sleeper().pid, 1)
    fakegpu.update(state, lambda s: s["procs"][0].update(report_pid=denied, name=denied, mib=denied))
    assert_replays(state, "mig-container__query-compute-apps__insufficient-permissions.txt")


def test_wddm_used_memory_na_and_host_pid_as_captured(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=[{"index": 0, "uuid": MASKED, "name": "GPU"}])
    fakegpu.attach(state, 0, sleeper().pid, 1)
    fakegpu.update(state, lambda s: s["procs"][0].update(
        report_pid=2056, name="C:\\Windows\\System32\\dwm.exe", mib="[N/A]"))
    assert_replays(state, "wddm__query-compute-apps__used-memory-na.txt")


@pytest.mark.parametrize("scenario, name", [
    ("no-devices", "no-devices.txt"), ("driver-failure", "driver-failure.txt"),
    ("nvml-unknown-error", "nvml-unknown-error.txt"), ("version-mismatch", "version-mismatch.txt")])
def test_failure_scenarios_exit_codes_and_text(state_path, scenario, name):
    state = fakegpu.create_state(state_path, gpus=8, scenario=scenario)
    assert_replays(state, name)
    for args in (AGENT_GPU_QUERY, AGENT_APPS_QUERY, ("-L",)):  # whatever is asked
        assert_replays(state, name, args)


def test_bad_field_as_captured(state_path):
    assert_replays(fakegpu.create_state(state_path, gpus=2), "bad-field.txt")


def test_verbatim_fixture_replay(state_path):
    name = "h100-x8__query-gpu__csv.txt"
    state = fakegpu.create_state(state_path, gpus=1, fixture={"query-gpu": str(fakegpu.FIXTURES / name)},
                                 fixture_exit=0)
    assert_replays(state, name, AGENT_GPU_QUERY)
    assert fakegpu.run_smi(state, "-L").stdout.startswith("GPU 0: ")  # other verbs: modelled


def test_agent_forms_parse(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=8)
    proc = sleeper()
    fakegpu.attach(state, 5, proc.pid, 70000)
    out = fakegpu.run_smi(state, *AGENT_GPU_QUERY)
    rows = cells(out.stdout)
    assert out.returncode == 0 and len(rows) == 8 and all(len(r) == 6 for r in rows)
    assert [int(r[0]) for r in rows] == list(range(8))
    assert all(r[1].startswith("GPU-") and r[2] == fakegpu.H100 for r in rows)
    assert [int(r[3]) for r in rows] == [0] * 5 + [70000] + [0] * 2
    assert {int(r[4]) for r in rows} == {fakegpu.H100_MIB} and {r[5] for r in rows} == {"0"}
    out = fakegpu.run_smi(state, *AGENT_APPS_QUERY)
    assert cells(out.stdout) == [[fakegpu.gpu_uuid(5), str(proc.pid), "70000"]]
    header = fakegpu.run_smi(state, AGENT_APPS_QUERY[0], "--format=csv").stdout.splitlines()[0]
    assert header == "gpu_uuid, pid, used_gpu_memory [MiB]", "aliases print canonical names"


def test_without_state_it_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RUNWARD_FAKE_SMI_STATE"}
    got = subprocess.run([str(fakegpu.STANDIN), "-L"], env=env, capture_output=True, text=True)
    assert got.returncode == 2 and "RUNWARD_FAKE_SMI_STATE" in got.stderr


# --------------------------------------------------------------------------- memory after exit
def used_on(state, gpu):
    return int(fakegpu.query_gpus(state)[gpu]["used"])


def listed_pids(state):
    return [a["pid"] for a in fakegpu.query_apps(state)]


def test_memory_is_released_only_after_the_delay(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=2)
    proc = sleeper()
    fakegpu.attach(state, 1, proc.pid, 70000, release_delay=1.0)
    assert used_on(state, 1) == 70000 and listed_pids(state) == [str(proc.pid)]
    proc.kill()
    proc.wait()
    exited = time.monotonic()
    assert listed_pids(state) == [], "a dead process leaves compute-apps at once"
    assert used_on(state, 1) == 70000, "but the driver has not freed its memory yet"
    assert fakegpu.read_state(state)["procs"][0]["died_at"] is not None
    wait_for(lambda: used_on(state, 1) == 0, 10, "memory released")
    # died_at is taken at the first look after the exit, so release >= exit + delay
    assert time.monotonic() - exited >= 0.98  # 20 ms for mixing time.time and monotonic


def test_zombie_counts_as_exited(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=1)
    proc = sleeper()
    fakegpu.attach(state, 0, proc.pid, 500)
    os.kill(proc.pid, signal.SIGKILL)  # not reaped: a zombie until the fixture waits for it
    wait_for(lambda: read_stat(proc.pid)[0] == "Z", 10, "the sleep to be a zombie")
    assert used_on(state, 0) == 0 and listed_pids(state) == []


def test_reused_pid_is_not_the_attached_process(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=1)
    proc = sleeper()
    fakegpu.attach(state, 0, proc.pid, 500)
    fakegpu.update(state, lambda s: s["procs"][0].update(starttime=s["procs"][0]["starttime"] + 1))
    assert used_on(state, 0) == 0 and listed_pids(state) == [], "same pid, other start time"


def test_listed_after_exit_models_the_stale_pid_report(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=1)
    proc = sleeper()
    fakegpu.attach(state, 0, proc.pid, 500, release_delay=0.5)
    fakegpu.update(state, lambda s: s["procs"][0].update(listed_after_exit=True))
    proc.kill()
    proc.wait()
    assert listed_pids(state) == [str(proc.pid)] and used_on(state, 0) == 500
    wait_for(lambda: not listed_pids(state) and used_on(state, 0) == 0, 10, "both gone")


def test_attach_verb_and_concurrent_attaches(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=8)
    procs = [sleeper() for _ in range(16)]
    env = fakegpu.env_with_standin(state)
    attaching = [subprocess.Popen(["nvidia-smi", "--runward-fake-attach", str(i % 8), str(p.pid),
                                   "1000", "0.5"], env=env) for i, p in enumerate(procs)]
    assert [a.wait(timeout=30) for a in attaching] == [0] * 16
    recorded = fakegpu.read_state(state)["procs"]
    assert sorted(p["pid"] for p in recorded) == sorted(p.pid for p in procs), "no update lost"
    assert {p["release_delay"] for p in recorded} == {0.5}
    assert [g["used"] for g in fakegpu.query_gpus(state)] == ["2000"] * 8


def test_attach_refuses_unknown_pid_and_gpu(state_path, sleeper):
    state = fakegpu.create_state(state_path, gpus=1)
    with pytest.raises(ValueError):
        fakegpu.attach(state, 3, sleeper().pid, 1)
    gone = sleeper()
    gone.kill()
    gone.wait()
    with pytest.raises(ValueError):
        fakegpu.attach(state, 0, gone.pid, 1)
