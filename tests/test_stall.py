"""Stall and straggler (agent/health/stall.py, docs/diagnosis.md "Stalls and stragglers"): real jobs,
real torchrun (gloo, CPU), judged by status, watch and the shim's health actions."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from conftest import marked, wait_for
from helpers_attribution import _torchrun
from helpers_stall import HANG_JOB

SLOW_JOB = """\
import os, time
rank = int(os.environ["RANK"])
for step in range(100000):
    print("step %d loss 1.0" % step, flush=True)
    time.sleep(0.8 if rank == 1 else 0.1)  # rank 1: 8 x slower, no collective holds it back
"""


QUIET_JOB = """\
import os, time
rank = int(os.environ["RANK"])
step, t = 0, time.monotonic()
while True:
    if rank == 1 and step == 3:
        time.sleep(3600)  # rank 1 stops: no step, no CPU
    if rank == 0:
        while time.monotonic() - t < 0.1:
            pass  # rank 0 computes: a core busy
        t = time.monotonic()
    else:
        time.sleep(0.1)
    print("step %d loss 1.0" % step, flush=True)
    step += 1
"""


STUCK_JOB = """\
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, t = dist.get_rank(), torch.ones(4)

def stuck_here():
    time.sleep(3600)  # the hung rank: not in any collective

for step in range(100000):
    if rank == 1 and step == 25:
        print("rank 1 step 25 entering stuck_here", flush=True)  # its log is a step ahead of rank 0's
        stuck_here()
    dist.all_reduce(t)  # rank 0 waits here for rank 1, its last line step 24
    print("step %d loss 1.0" % step, flush=True)
    time.sleep(0.05)
"""


def _alerts(st: dict, kind: str) -> list[dict]:
    return [a for a in (st.get("health") or {}).get("alerts") or [] if a["kind"] == kind]


def _need_torchrun() -> str:
    torchrun = _torchrun()
    if torchrun is None:
        pytest.skip("torch is not installed (pip install -e '.[torch]')")
    return torchrun


def test_torchrun_rank_sleeping_while_the_other_waits_in_all_reduce_is_a_stall_naming_it(cli, tmp_path):
    torchrun = _need_torchrun()
    script = tmp_path / "hang.py"
    script.write_text(HANG_JOB)
    name = f"hang{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "5", "--settle", "0.2", "--", torchrun, "--tee", "3",
                       "--standalone", "--nproc_per_node=2", str(script), timeout=120)
    assert rc == 0, doc
    wait_for(lambda: cli.status(name)["stall"].get("step") == 8, 120, "rank 0 to reach step 8")
    st = wait_for(lambda: (lambda s: s if _alerts(s, "stall") else None)(cli.status(name)), 30, "the stall")
    a = _alerts(st, "stall")[0]
    found = a["t"] - a["since"]  # since: the read that saw step 8, the last step
    assert found <= 5 + 5, a  # within stall_after + a few seconds
    assert a["basis"] == "step" and a["rank"] == 1 and a["stall_after"] == 5, a
    if a["stacks"]["ok"]:  # the stacks name the cause; the log's steps are the fallback only
        assert "by the stacks, local rank 1 is the cause" in a["detail"] and a["rank_basis"] == "stacks", a
    else:
        assert "local rank 1 stopped first (its last step 7, the others reached 8)" in a["detail"], a
    assert st["stall"]["stall_after"] == 5 and st["stall"]["stall_after_from"] == "set", st["stall"]
    stacks = a["stacks"]  # taken once for the episode (agent/health/stacks.py), kept beside the records
    assert os.path.exists(stacks["path"]), stacks
    if stacks["ok"]:  # py-spy on this machine: rank 0 waits in the collective
        assert "rank 0 in all_reduce" in stacks["summary"], stacks
    else:
        assert "py-spy missing" in stacks["note"], stacks  # said, not a traceback
    assert cli.status(name)["stall"]["alerts"][0]["stacks"]["path"] == stacks["path"]  # once per episode
    human = cli.run("status", name).stdout
    assert "stall_after 5s (set)" in human and "alert: " in human and "stall: step 8 has not advanced" in human, human
    # watch as a gate: exit 1 on the stall, as on every alert
    rc, w = cli.json("watch", name, "--for", "20", "--stall-after", "5")
    assert rc == 1 and w["result"]["alert"]["kind"] == "stall", w
    assert cli.run("stop", name).returncode == 0


def test_the_rank_a_stall_names_is_the_one_its_stacks_show_outside_the_collective(cli, tmp_path):
    """The stuck rank logged `rank 1 step 25 entering stuck_here` before it hung, a step ahead of
    rank 0 waiting in all_reduce: the log-step rule named local rank 0 while the same alert's
    stacks showed rank 1 in stuck_here. Where stacks read the ranks, they name the cause."""
    torchrun = _need_torchrun()
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_JOB)
    name = f"stuck{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "4", "--settle", "0.2", "--", torchrun, "--tee", "3",
                       "--standalone", "--nproc_per_node=2", str(script), timeout=120)
    assert rc == 0, doc
    wait_for(lambda: cli.status(name)["stall"]["ranks"].get("local rank 1", {}).get("step") == 25, 120,
             "local rank 1 to log step 25")
    st = wait_for(lambda: (lambda s: s if _alerts(s, "stall") else None)(cli.status(name)), 60, "the stall")
    a = _alerts(st, "stall")[0]
    if not a["stacks"]["ok"]:
        cli.run("stop", name)
        pytest.skip(f"stacks not read here: {a['stacks'].get('note')}")
    ranks = st["stall"]["ranks"]  # the log's rule alone would name local rank 0: its step is behind
    assert ranks["local rank 0"]["step"] == 24 and ranks["local rank 1"]["step"] == 25, ranks
    doc = json.loads(open(a["stacks"]["path"]).read())  # the kept capture: py-spy's frames of each rank
    frames = {p["rank"]: [f["name"] for t in p["threads"] if t["name"] == "MainThread" for f in t["frames"]]
              for p in doc["procs"] if p.get("rank") is not None and p.get("threads")}
    assert "stuck_here" in frames[1] and "stuck_here" not in frames[0] and "all_reduce" in frames[0], frames
    assert a["rank"] == 1 and a["ranks"] == ["local rank 1"] and a["rank_basis"] == "stacks", a
    assert "by the stacks, local rank 1 is the cause: local rank 1 in stuck_here" in a["detail"], a
    assert "while local rank 0 in all_reduce" in a["detail"] and "local rank 0 stopped first" not in a["detail"], a
    assert "local rank 1 is the cause" in cli.run("status", name).stdout
    assert cli.run("stop", name).returncode == 0


NATIVE_JOB = STUCK_JOB.replace("import time,", "import os, time,").replace(
    "        stuck_here()\n",
    "        os.execvp('sleep', ['sleep', '3600'])  # still rank 1 (its env), no Python frame\n")


def test_a_rank_whose_stack_is_not_read_is_never_said_to_wait_in_a_collective(cli, tmp_path):
    """Rank 1 hung in a native tool (it exec'd `sleep`, RANK=1 in its env) while rank 0 waited in
    all_reduce: py-spy read rank 0 alone, and the alert said "by the stacks, every rank waits in
    a collective: none is elsewhere", naming no rank. Ranks not read are now said not read,
    and where every rank read waits in a collective, they are the ones named."""
    torchrun = _need_torchrun()
    script = tmp_path / "native.py"
    script.write_text(NATIVE_JOB)
    name = f"native{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "4", "--settle", "0.2", "--", torchrun, "--tee", "3",
                       "--standalone", "--nproc_per_node=2", str(script), timeout=120)
    assert rc == 0, doc
    st = wait_for(lambda: (lambda s: s if _alerts(s, "stall") else None)(cli.status(name)), 120, "the stall")
    a = _alerts(st, "stall")[0]
    if not a["stacks"]["ok"]:
        cli.run("stop", name)
        pytest.skip(f"stacks not read here: {a['stacks'].get('note')}")
    doc = json.loads(open(a["stacks"]["path"]).read())
    ranks = {p["rank"]: p for p in doc["procs"] if p.get("rank") is not None}
    assert ranks[1]["comm"] == "sleep" and not ranks[1].get("frame") and ranks[0].get("frame"), ranks
    # /proc: rank 1 is `sleep`, never inside a collective
    assert open(f"/proc/{ranks[1]['pid']}/comm").read().strip() == "sleep"
    assert "every rank waits in a collective" not in a["detail"], a
    assert a["ranks"] == ["local rank 1"] and a["rank_basis"] == "stacks", a
    assert "local rank 1's stack was not read (not a Python process" in a["detail"], a
    assert cli.run("stop", name).returncode == 0


def test_a_rank_8_times_slower_than_the_other_is_a_straggler(cli, tmp_path):
    torchrun = _need_torchrun()
    script = tmp_path / "slow.py"
    script.write_text(SLOW_JOB)
    name = f"slow{os.getpid()}"
    rc, doc = cli.json("start", name, "--settle", "0.2", "--", torchrun, "--tee", "3", "--standalone",
                       "--nproc_per_node=2", str(script), timeout=120)
    assert rc == 0, doc

    def slow():
        st = cli.status(name)
        return [a for a in _alerts(st, "straggler") if a["basis"] == "step_time"]
    found = wait_for(slow, 60, "the slow rank's straggler alert")
    assert [(a["rank"], a["rank_kind"]) for a in found] == [(1, "local rank")], found
    assert "x slower than the other ranks' median" in found[0]["detail"] and found[0]["ratio"] > 3, found
    st = cli.status(name)
    assert st["stall"]["stall_after_from"] == "derived" and st["stall"]["stall_after"] == 120, st["stall"]
    assert not _alerts(st, "stall"), st  # slow is not stalled
    assert cli.run("stop", name).returncode == 0


def test_a_job_that_prints_no_steps_is_judged_by_its_log_silence_and_says_so(cli):
    name = f"quiet{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "2", "--settle", "0.2", "--", "python3", "-c",
                       "import time; print('loading', flush=True); time.sleep(3600)")
    assert rc == 0, doc
    st = wait_for(lambda: (lambda s: s if _alerts(s, "stall") else None)(cli.status(name)), 20, "the stall")
    a = _alerts(st, "stall")[0]
    assert a["basis"] == "log" and "the log shows no steps: judged by its silence" in a["detail"], a
    assert "0.0% of a core, 0 B/s of reads and writes" in a["detail"], a  # the tree is still: its basis
    assert st["stall"]["no_step_yet"]["verdict"] == "still" and _proc_use(doc["result"]["pid"])[0] < 0.5
    assert "the log shows no steps" in cli.run("status", name).stdout
    assert cli.run("stop", name).returncode == 0


# silent "model loads" (no output) until the test has looked at them (it writes WEIGHTS.loaded;
# at most 60 s), then steps every 0.2 s. WEIGHTS.loading says the load began: the interpreter's
# own start (its imports: ~1.5 MB read) is over, and is not counted as the load's reads.
LOADING = ("def LOADING():\n"
           "    os.path.exists(sys.argv[1] + '.loading') or open(sys.argv[1] + '.loading', 'w').close()\n"
           "    return not os.path.exists(sys.argv[1] + '.loaded') and time.monotonic() - t < 60\n")
LOADER = {
    "cpu": "t = time.monotonic()\nwhile LOADING(): sum(range(10000))\n",
    "io": "t = time.monotonic()\nf = open(sys.argv[1], 'rb')\nwhile LOADING():\n"
          "    f.seek(0); f.read(4 << 20); time.sleep(0.02)\n",
    # the work in short-lived children (forked, no reads), each reaped 20 ms later: the
    # parent's cutime is where /proc keeps their CPU
    "children": "import os\nt = time.monotonic()\nwhile LOADING():\n    p = os.fork()\n"
                "    if p == 0:\n        u = time.monotonic()\n"
                "        while time.monotonic() - u < 0.02: sum(range(1000))\n        os._exit(0)\n"
                "    os.waitpid(p, 0)\n",
    # safetensors' way: the weights mmapped, read by page faults from storage (evicted after
    # each pass, as a file larger than the page cache is): read_bytes counts them, rchar not
    # the work in a daemonized server (double fork: the shim's child, no longer the job's),
    # the job waiting for its flag, as a driver waits on ray.get
    "daemon": "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork(): os._exit(0)\n"
              "    t = time.monotonic()\n    while LOADING(): sum(range(10000))\n"
              "    open(sys.argv[1] + '.done', 'w').close()\n    os._exit(0)\n"
              "os.wait()\nwhile not os.path.exists(sys.argv[1] + '.done'): time.sleep(0.2)\n",
    "mmap": "import mmap, os\nt = time.monotonic()\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "while LOADING():\n    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)\n"
            "    for off in range(0, len(m), 4096): m[off]\n    m.close()\n"
            "    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n    time.sleep(0.2)\n",
}


def _proc_use(pid: int) -> tuple[float, int]:
    """(CPU seconds, its reaped children's included; rchar + wchar; read_bytes + write_bytes:
    storage's, page faults of a mapped file included) of PID from /proc: the ground truth of
    the loader's work."""
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    io = dict(x.split(": ") for x in open(f"/proc/{pid}/io").read().splitlines())
    return (sum(map(int, stat[11:15])) / os.sysconf("SC_CLK_TCK"), int(io["rchar"]) + int(io["wchar"]),
            int(io["read_bytes"]) + int(io["write_bytes"]))


def _ppid(pid: int) -> int | None:
    """PID's parent, None once it is gone: the daemon's middle fork exits at any moment."""
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


@pytest.mark.parametrize("load", ["cpu", "io", "children", "mmap", "daemon"])
def test_a_silent_load_before_the_first_step_is_starting_not_a_stall(cli, tmp_path, load):
    """A job silent while it loads (then stepping normally) got a stall at stall_after; now a
    tree that computes or reads before its first step is starting, said "no step yet, loading?"."""
    blob = tmp_path / "weights.bin"
    blob.write_bytes(os.urandom(4 << 20))
    name = f"load{load}{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "2", "--settle", "0.2", "--", "python3", "-c",
                       "import os, sys, time\n" + LOADING + LOADER[load]
                       + "for i in range(100000): print('step %d loss 1.0' % i, flush=True); time.sleep(0.2)",
                       str(blob))
    assert rc == 0, doc
    pid = doc["result"]["pid"]
    if load == "daemon":  # its ground truth: the member the shim adopted (its parent), with the marker
        job = pid
        pid = wait_for(lambda: next((p for p in marked(f"{name}.") if p != job and _ppid(p) not in (job, None)), None),
                       10, "the daemon adopted by the shim")
    wait_for(lambda: os.path.exists(f"{blob}.loading"), 30, "the load to begin")
    before = _proc_use(pid)
    rc, w = cli.json("watch", name, "--for", "5")  # silent 5 s, past stall_after 2 s: still healthy
    assert rc == 0 and w["result"]["healthy"], w
    st, text = cli.status(name), cli.run("status", name).stdout
    used = _proc_use(pid)
    assert st["stall"]["step"] is None and not _alerts(st, "stall"), st  # still loading: no step, no stall
    n = st["stall"]["no_step_yet"]
    assert n["verdict"] == "starting" and n["cpu_cores"] + n["io_bytes_s"] > 0, n
    if load == "mmap":  # /proc: storage read, no read() and hardly any CPU
        assert used[2] - before[2] > 20 << 20 and n["io_bytes_s"] > 1 << 20, (before, used, n)
        assert used[1] - before[1] < 1 << 20 and used[0] - before[0] < 1.0, (before, used, n)
    elif load != "io":  # /proc agrees: the tree computed, or read, over the window
        assert used[0] - before[0] > 1.0 and n["cpu_cores"] > 0.05, (before, used, n)  # 2 shared cores
    else:
        assert used[1] - before[1] > 20 << 20 and n["io_bytes_s"] > 1 << 20, (before, used, n)
    assert "; no step yet, " in text and ", loading? (the process tree: " in text, text
    (tmp_path / "weights.bin.loaded").touch()  # the load ends: steps follow
    wait_for(lambda: cli.status(name)["stall"].get("step"), 30, "the first step after the load")
    rc, w = cli.json("watch", name, "--for", "3")
    assert rc == 0 and w["result"]["healthy"], w  # stepping now: no stall either
    assert cli.run("stop", name).returncode == 0


def test_the_status_text_states_the_rule_that_gave_stall_after():
    """status said "stall_after 271.674s (derived: max(10 x median step 0.5s, 120s))": the
    number came from 3 x the time between the log's writes, which the text did not name."""
    from runward.agent.health.stall import stall_after, stall_rule
    from runward.views.stallview import stall_line
    st = {"iv": [0.5, 0.5], "li": [0.5], "wi": [90.558], "step": 100, "step_t": 5.0}
    after, src, med = stall_after({}, st, 0.0)
    rule = stall_rule({}, st, 0.0)
    line = stall_line({"stall_after": after, "stall_after_from": src, "median_step_s": med,
                       "stall_after_rule": rule, "step": 100})
    assert after == pytest.approx(271.674) and "stall_after 271.674s (derived: 3 x median time between the " \
        "log's writes 90.6s = 271.674s, over 10 x median step 0.5s = 5s; the floor = 120s)" in line, line
    st = {"iv": [0.5, 0.5], "step": 100, "step_t": 5.0}
    assert stall_after({}, st, 0.0)[0] == 120 and stall_rule({}, st, 0.0) == \
        "derived: the floor = 120s, over 10 x median step 0.5s = 5s"


def test_stall_action_takes_stacks_then_stops_once_per_episode(cli, tmp_path):
    (cli.cwd / "runward.toml").write_text(
        "[runs.act]\ncommand = [\"python3\", \"-c\", \"import time\\nfor i in range(5): print('step %d' % i, "
        "flush=True); time.sleep(0.1)\\ntime.sleep(3600)\"]\n"
        "[runs.act.health]\nstall_after = \"2s\"\ninterval = 0.5\nactions = { stall = \"stacks,stop\" }\n")
    rc, doc = cli.json("start", "act", "--settle", "0.2")
    assert rc == 0, doc
    st = wait_for(lambda: (lambda s: s if s["state"] != "running" else None)(cli.status("act")), 30,
                  "the stall action to stop the run")
    acts = [a for a in st.get("actions") or [] if a["kind"] == "stall"]
    assert len(acts) == 1 and acts[0]["action"] == "stacks,stop", st
    assert acts[0]["stacks"]["path"] and (acts[0]["stacks"]["ok"] or "py-spy missing" in acts[0]["stacks"]["note"]), acts[0]


def test_old_spellings_are_read_as_stall_after_and_bad_values_are_refused(cli):
    (cli.cwd / "runward.toml").write_text("[runs.both.health]\nstall = 5\nstall_after = 5\n")
    p = cli.run("start", "both", "--", "true")
    assert p.returncode == 2 and "keep stall_after (stall is its old name)" in p.stderr, p.stderr
    p = cli.run("start", "x", "--stall-after", "0", "--", "true")
    assert p.returncode == 2 and "--stall-after" in p.stderr, p.stderr
    p = cli.run("start", "x", "--straggler-ratio", "0.5", "--", "true")
    assert p.returncode == 2 and "--straggler-ratio" in p.stderr, p.stderr
    (cli.cwd / "runward.toml").write_text("[runs.bad.health]\nactions = { stall = \"stacks,dance\" }\n")
    p = cli.run("start", "bad", "--", "true")
    assert p.returncode == 2 and "stacks,restart" in p.stderr, p.stderr
    name = f"old{os.getpid()}"
    rc, doc = cli.json("start", name, "--settle", "0.2", "--", "python3", "-c", "import time; time.sleep(3600)")
    assert rc == 0, doc
    t0 = time.monotonic()
    rc, w = cli.json("watch", name, "--for", "20", "--stall", "1")  # the old flag: stall_after 1 s
    assert rc == 1 and w["result"]["alert"]["kind"] == "stall" and w["result"]["alert"]["basis"] == "log", w
    assert time.monotonic() - t0 < 15
    assert cli.run("stop", name).returncode == 0


def test_a_rank_that_stops_while_the_other_computes_on_is_a_straggler_by_its_log_and_its_cpu(cli, tmp_path):
    torchrun = _need_torchrun()
    script = tmp_path / "quiet.py"
    script.write_text(QUIET_JOB)
    name = f"qr{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "3", "--settle", "0.2", "--", torchrun, "--tee", "3",
                       "--standalone", "--nproc_per_node=2", str(script), timeout=120)
    assert rc == 0, doc
    seen: dict = {}

    def both():
        for a in _alerts(cli.status(name), "straggler"):
            seen.setdefault(a["basis"], a)
        return seen if {"log", "cpu"} <= set(seen) else None
    wait_for(both, 60, "the quiet rank's straggler alerts by its log and its CPU")
    assert seen["log"]["rank"] == 1 and seen["log"]["rank_kind"] == "local rank", seen
    assert "while local rank 0 went on to step" in seen["log"]["detail"], seen
    assert seen["cpu"]["rank"] == 1 and seen["cpu"]["rank_kind"] == "rank" and seen["cpu"]["value"] < 0.02, seen
    assert "used no CPU" in seen["cpu"]["detail"] and "while rank 0 kept a core busy" in seen["cpu"]["detail"], seen
    assert not _alerts(cli.status(name), "stall")  # the run's step goes on: no stall
    assert cli.run("stop", name).returncode == 0


def test_mcp_status_and_watch_tools_say_the_stall(cli):
    pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
    import anyio
    from helpers_mcp import _call, _session
    name = f"mcpq{os.getpid()}"
    rc, doc = cli.json("start", name, "--stall-after", "1", "--settle", "0.2", "--", "python3", "-c",
                       "import time; print('step 1', flush=True); time.sleep(3600)")
    assert rc == 0, doc

    async def go():
        async with _session(cli.env, cli.cwd) as s:
            err, w = await _call(s, "watch", {"name": name, "for_s": 20, "stall": 1})
            _, st = await _call(s, "status", {"name": name})
            return err, w, st
    err, w, st = anyio.run(go)
    assert err and w["result"]["alert"]["kind"] == "stall" and w["result"]["alert"]["basis"] == "step", w
    run = st["result"]["runs"][0]
    assert run["stall"]["stall_after"] == 1 and run["stall"]["stall_after_from"] == "set", run["stall"]
    assert [a["kind"] for a in run["health"]["alerts"]] == ["stall"], run["health"]
    assert cli.run("stop", name).returncode == 0


def test_before_two_reads_saw_the_step_advance_its_time_is_bounded_from_the_attempts_start():
    """A 72 s step must not look stalled at 120 s because no two reads saw it advance yet."""
    from runward.agent.health.stall import stall_after
    st = {"iv": [], "step": 105, "step_t": 1000.0 + 360, "min_step": 100}  # resumed at 100: 5 steps in 6 min
    assert stall_after({}, st, 1000.0) == (720.0, "derived", 72.0)
    assert stall_after({}, dict(st, iv=[50.0, 70.0, 60.0]), 1000.0) == (600.0, "derived", 60.0)  # two reads: theirs
    assert stall_after({"after": 5}, st, 1000.0)[:2] == (5.0, "set")
    assert stall_after({}, {"iv": [], "step": None}, 1000.0) == (120.0, "default", None)


def test_a_step_counter_that_starts_again_each_epoch_is_progress_not_a_stall(cli):
    name = f"epoch{os.getpid()}"
    rc, doc = cli.json("start", name, "--settle", "0.2", "--", "python3", "-c",
                       "import time\nfor e in range(10000):\n for s in range(3):\n"
                       "  print('epoch %d step %d loss 1.0' % (e, s), flush=True); time.sleep(0.3)")
    assert rc == 0, doc
    rc, w = cli.json("watch", name, "--for", "5", "--stall-after", "2")  # 5 s: step 2 seen for 2.5 s, twice over
    assert rc == 0 and w["result"]["healthy"], w
    assert cli.run("stop", name).returncode == 0


_HOLD = """import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def test_status_with_the_stall_state_locked_by_another_process_says_so_within_a_bound(cli):
    """A stuck holder of the run's stall lock (another status, a `flock`) made `runward status
    NAME` wait silently forever; now it waits store.SIDE_WAIT_S (5 s), then answers without
    the stall judgement and says who holds it (/proc/locks)."""
    import subprocess
    import sys
    name = f"stlk{os.getpid()}"
    rc, doc = cli.json("start", name, "--settle", "0.2", "--", "sleep", "300")
    assert rc == 0, doc
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(cli.home / "runs" / f".{name}.stall.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        for fmt in ("text", "json"):
            t0 = time.monotonic()
            if fmt == "json":
                rc, doc = cli.json("status", name, timeout=30)
                took = time.monotonic() - t0
                assert rc == 0, doc
                st = doc["result"]["runs"][0]
                assert st["state"] == "running" and st["stall"]["locked_by"]["pid"] == holder.pid, st
                assert "locked by pid %d" % holder.pid in st["stall"]["error"], st["stall"]
            else:
                p = cli.run("status", name, timeout=30)
                took = time.monotonic() - t0
                assert p.returncode == 0, p
                assert f"stall: the stall state of run {name} is locked by pid {holder.pid}" in p.stdout, p.stdout
                assert "still held after 5s" in p.stdout, p.stdout
            assert took < 20, f"status took {took:.1f}s with the stall lock held"
    finally:
        holder.kill()
        holder.wait()
    st = cli.status(name)  # the lock free again: judged as before
    assert "stall_after" in st["stall"] and "error" not in st["stall"], st["stall"]
    assert cli.run("stop", name).returncode == 0


def test_each_ranks_step_from_a_big_rank_prefixed_log_is_the_last_it_printed(cli):
    """A run whose 8 ranks print rank-prefixed step lines (torch's `[rank3]:`, torchrun's
    `[default3]:[rank3]:`), 6.6 MB of them: the first status's per-rank steps are the last
    step each rank printed, read from the log file by the test itself; and for every line of
    every fixture log the step the stall read takes is the general parser's (a line's step is
    learned once per shape of line, then read from its digits), and the rank and step that
    linesteps.line_facts reads from a whole block of lines (learned once per shape of whole
    line) are the ones each line read by itself gives."""
    import json
    import re
    from pathlib import Path
    from runward.agent.health import linesteps, stall
    job = ("import sys\n"
           "w = sys.stdout.write\n"
           "for step in range(12000):\n"
           "    for r in range(8):\n"
           "        pre = '[rank%d]:' % r if step % 3 else '[default%d]:[rank%d]:' % (r, r)\n"
           "        if r == 5 and step > 11000: continue  # rank 5 stops at 11000\n"
           "        w('%s step %d | loss %.4f | tok/s 14,512 | lr 3.0e-04 | mem 31.72GiB\\n' % (pre, step, 2 + step % 7 / 10.0))\n"
           "sys.stdout.flush()\n"
           "import time; time.sleep(600)\n")
    rc, doc = cli.json("start", "ranks", "--settle", "0.5", "--", sys.executable, "-c", job)
    assert rc == 0, doc
    log = Path(doc["result"]["log"])
    wait_for(lambda: log.stat().st_size > 6_000_000 and b"[rank7]: step 11999 " in log.read_bytes()[-200:],
             timeout=60, what="the job's 12000 steps in its log")
    truth = {}
    for m in re.finditer(rb"\[rank(\d)\]: step (\d+) ", log.read_bytes()[-(stall.READ_BYTES - 4096):]):
        truth["rank " + m.group(1).decode()] = int(m.group(2))
    assert truth["rank 5"] == 11000 and truth["rank 0"] == 11999
    rc, doc = cli.json("status", "ranks")
    assert rc == 0, doc
    st = json.loads((cli.home / "runs" / "ranks" / "stall.json").read_text())
    got = {k: r["step"] for k, r in st["ranks"].items() if k.startswith("rank ")}
    assert got == truth, (got, truth)
    fixtures = Path(__file__).resolve().parent / "fixtures" / "logs"
    for path in sorted(fixtures.glob("*.log")) + [log]:
        for line in path.read_text(errors="replace").split("\n")[-20000:]:
            rest = stall._rank_of(line)[1]
            fast = linesteps.step_of(rest)
            general = linesteps.parsed_step(rest) if any(w in rest for w in ("step", "iter", "update")) else None
            assert fast == general and type(fast) is type(general), (path.name, rest, fast, general)
        block = path.read_bytes().rstrip(b"\n") + b"\n\xe5 step 3\r\n[rank1]: [x9]: step 12"  # odd bytes too
        for _ in range(2):  # the first time learns each shape, the second reads by it
            facts = list(linesteps.line_facts(block, stall._rank_of))
            each = [stall._rank_of(line.decode("utf-8", "replace").replace("\r", "")) for line in block.split(b"\n")]
            want = [(key, linesteps.step_of(rest)) for key, rest in each]
            assert facts == want and [type(s) for _, s in facts] == [type(s) for _, s in want], path.name


MEGATRON = (" [2026-12-04 20:00:00] iteration {:>8d}/  500000 | consumed samples: {:>12d} | elapsed time per "
            "iteration (ms): 2000.0 | learning rate: 3.0E-04 | lm loss: 2.3E+00 |\n")


def test_a_step_printed_every_100_iterations_is_not_a_stall_between_two_prints(tmp_path):
    """Megatron's default --log-interval 100: one line per 100 iterations. At 2 s an
    iteration the log gains a line every 200 s, and the job is healthy throughout. The
    derived stall_after was 10 x the per-iteration time (20 s), floored at 120 s: a false
    `stall` 130 s after each print, before the next one is even due. A real log file, the
    agent's own store; time is the log's mtime, as the agent reads it."""
    from runward.agent.health import stall
    from runward.agent.core.store import Home, RunStore
    home = Home(str(tmp_path / "home"))
    store = RunStore(home, "mega")
    os.makedirs(store.dir, exist_ok=True)
    log = tmp_path / "train.log"
    t0 = 1_800_000_000.0
    att = {"attempt": 1, "log": str(log), "started_at": t0, "log_offset": 0}
    alerts = []
    with open(log, "a") as f:
        for k in range(1, 6):  # prints at t0+200, +400, ... each read when written
            f.write(MEGATRON.format(100 * k, 12800 * k))
            f.flush()
            os.utime(log, (t0 + 200 * k, t0 + 200 * k))
            res = stall.check(store, att, now=t0 + 200 * k, capture=False)
            alerts += res["alerts"]
            # halfway to the next print (100 s) and just before it (190 s): still healthy
            for dt in (100, 190):
                alerts += stall.check(store, att, now=t0 + 200 * k + dt, capture=False)["alerts"]
    assert not alerts, (f"a false stall on a healthy run printing every 200 s: stall_after "
                        f"{res['stall_after']} ({res['stall_after_from']}): {alerts[0]['detail']}")
    assert res["stall_after"] >= 1000, res  # >= 10 x the 200 s between its step lines
    # and a real stall is still found: no new line for 10 x the interval and more
    late = stall.check(store, att, now=t0 + 1000 + res["stall_after"] + 5, capture=False)
    assert [a["kind"] for a in late["alerts"]] == ["stall"], late


def test_a_block_buffered_log_is_not_a_stall_between_two_flushes(tmp_path):
    """print() to a file is block-buffered (8 KiB): at 2 s a step and ~80-byte lines the log
    gains 100 lines every 200 s. A watch reading every 10 s sees the step advance by 100 at
    each flush; 130 s after one the run was called stalled (stall_after 120 s derived from
    2 s a step), though the next flush was 70 s away and the job healthy."""
    from runward.agent.health import stall
    from runward.agent.core.store import Home, RunStore
    home = Home(str(tmp_path / "home"))
    store = RunStore(home, "buf")
    os.makedirs(store.dir, exist_ok=True)
    log = tmp_path / "train.log"
    t0 = 1_800_000_000.0
    att = {"attempt": 1, "log": str(log), "started_at": t0, "log_offset": 0}
    alerts, step = [], 0
    with open(log, "a") as f:
        for k in range(1, 6):
            f.write("".join(f"step {step + i} loss 2.{i:04d} tok/s 14500.0 lr 3.0e-04\n" for i in range(1, 101)))
            step += 100
            f.flush()
            os.utime(log, (t0 + 200 * k, t0 + 200 * k))
            for dt in range(0, 200, 10):  # a watch's reads
                alerts += stall.check(store, att, now=t0 + 200 * k + dt, capture=False)["alerts"]
    assert not alerts, alerts[0]["detail"]
