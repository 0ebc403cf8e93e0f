"""Health you can gate on: `watch` judges its window and its own rules (never stored, never
replayed); the attempt's facts (NaN, OOM, traceback, NCCL, the OOM killer, the exit) are kept
with the attempt and shown alike by `status` and `watch`, the first read of a big log finding
them anywhere (the skim); every metric's last value in `status --json`; a tree's PSS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import EXAMPLE, wait_for
from helpers_skim import EVENTS
from runward.agent import logmetrics as lm
from runward.agent.logmetrics import skim as lm_skim

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
PY = sys.executable
FACTS = ("nan", "inf", "cuda_oom", "traceback", "nccl", "oom_killed")


def evidence(alerts):
    return [(a["kind"], a["line_no"], a["line"], a.get("repeats", 0)) for a in alerts]


def filler(step0, n):
    """Training lines of the shapes a long log is made of (no event, no NaN), including the
    near misses the skim's needles must pass over: Megatron's zero NaN count, INFO, memory."""
    out = []
    for s in range(step0, step0 + n):
        out.append("step %d loss %.4f tok/s %.1f lr 3.0e-04 memory: 31.7GiB" % (s, 2.0 + (s % 7) / 10, 14600.0 + s % 13))
        out.append(" iteration %8d/  500000 | elapsed time per iteration (ms): 812.3 | lm loss: 2.345678E+00 | "
                   "number of skipped iterations:   0 | number of nan iterations:   0 |" % s)
        out.append("INFO 05-01 12:00:00 metrics.py:449] Avg generation throughput: 1456.1 tokens/s, informative")
    return "\n".join(out) + "\n"


def events_log(path: Path, blocks: int = 40, block_lines: int = 400) -> None:
    """Filler with every fixture's events, and NaN runs, scattered through it."""
    events = [LOGS / n for n in ("cuda_oom.log", "cuda_error_oom.log", "cublas_alloc.log", "nccl_watchdog.log",
                                 "nccl_internal.log", "nccl_warn_ib.log", "killed.log", "killed_shell.log",
                                 "torchrun_sigkill.log", "nanogpt_nan.log", "megatron_ds_nan.log",
                                 "nemo_nccl_timeout.log", "dreamer_killed.log", "cuda_oom_legacy.log")]
    with open(path, "w") as f:
        step = 0
        for b in range(blocks):
            f.write(filler(step, block_lines // 3))
            step += block_lines // 3
            ev = events[b % len(events)]
            f.write(ev.read_text(errors="replace"))
            if b % 5 == 2:
                f.write("step %d loss nan tok/s 14000.0\nstep %d loss nan tok/s 14000.0\n" % (step, step + 1))
                f.write("Epoch 3: val_loss=inf, NaN seen\n")


def test_the_skim_finds_what_the_full_parse_finds(tmp_path):
    """The same alerts, lines and repeats, whether a log is parsed in full or mostly skimmed;
    and the skim also finds them when its chunks cut the log anywhere."""
    log = tmp_path / "train.log"
    events_log(log)
    size = log.stat().st_size
    now = time.time()
    full = lm.scan(str(log), {}, {"max_bytes": size + 1, "drop_fraction": 0}, now)
    facts = [a for a in full["alerts"] if a["kind"] in FACTS]
    assert {a["kind"] for a in facts} >= {"cuda_oom", "nccl", "oom_killed", "traceback", "nan"}
    old_chunk = lm_skim.CHUNK
    try:
        for chunk in (old_chunk, 4099, 65536):
            lm_skim.CHUNK = chunk
            sk = lm.scan(str(log), {}, {"max_bytes": 20000, "drop_fraction": 0, "skim": True}, now)
            assert sk["bytes_skimmed"] > size - 30000 and sk["more"] is False
            assert sk["lines"] == full["lines"] and sk["bytes"] == size
            assert evidence(sk["alerts"]) == evidence(facts), chunk
    finally:
        lm_skim.CHUNK = old_chunk


def test_every_event_pattern_has_a_needle():
    """Each line the parser calls an event, or a NaN/Inf loss, is hit by the skim's needles."""
    lines = [ln.encode() for n in sorted(os.listdir(LOGS)) if n.endswith(".log")
             for ln in (LOGS / n).read_text(errors="replace").splitlines()]
    lines += [b"loss: NaN", b"loss=nan,", b"lm loss: NAN |", b"loss inf", b"loss -Infinity", b"loss: INF",
              b"number of nan iterations:   3 |", "\u5df2\u6740\u6b7b".encode()]
    for ln in lines:
        if lm.EVENT_RE.search(ln) or (lm.parse_line(ln.decode("utf-8", "replace"))
                                       and any(v != v or v in (float("inf"), float("-inf"))
                                               for v in lm.parse_line(ln.decode("utf-8", "replace")).values())):
            assert lm_skim.hits(ln + b"\n"), ln
    for ln in (b"number of nan iterations:   0 |", b"INFO 05-01 memory: 31.7GiB informative", b"nanotron"):
        assert not lm_skim.hits(ln + b"\n"), ln


def test_every_event_alternative_and_nan_spelling_has_a_needle():
    """Each alternative of EVENT_RE on a line of its own, and NaN/Inf in every case."""
    events = EVENTS + ["x.sh: line 3:  1234 Killed  python"]
    lines = ["at %s here" % e for e in events] + ["Killed", "  Killed \r", "\u5df2\u6740\u6b7b"]
    for ln in lines:
        b = ln.encode() + b"\n"
        assert lm.EVENT_RE.search(b), ln
        assert lm_skim.hits(b), ln
    for word in ("nan", "inf", "infinity"):
        for bits in range(8):
            tok = "".join(c.upper() if bits >> i & 1 else c for i, c in enumerate(word[:3])) + word[3:]
            for ln in ("loss: %s" % tok, "loss=-%s," % tok, "{'loss': %s}" % tok):
                assert lm_skim.hits(ln.encode() + b"\n"), ln


# --- through the CLI, with real runs of the example job

def start(cli, name, *env, settle="0.3", step="0.05"):
    args = ["start", name, "--settle", settle, "--env", f"TRAIN_STEP_SECONDS={step}", "--env", "TRAIN_WORKERS=0",
            "--env", "TRAIN_ESCAPEE=0"]
    for e in env:
        args += ["--env", e]
    rc, doc = cli.json(*args, "--", PY, str(EXAMPLE))
    assert rc == 0, doc
    return doc["result"]


def watch(cli, name, *flags, window="2"):
    return cli.json("watch", name, "--for", window, *flags, timeout=120)


def test_repeated_watches_with_changing_rules(cli):
    """A floor alert in the first watch is that call's: the next watch without --min, and one
    with a floor the run meets, are healthy; nothing of it is kept with the attempt."""
    start(cli, "rep", "TRAIN_TOKS=14000")
    rc, doc = watch(cli, "rep", "--min", "tok_s=20000", window="20")
    assert rc == 1 and doc["result"]["alert"]["kind"] == "below_min", doc
    a = doc["result"]["alert"]
    assert a["line"].startswith("step ") and a["line_no"] >= 1 and a["t"] and a["limit"] == 20000
    rc, doc = watch(cli, "rep")
    assert rc == 0 and doc["result"]["healthy"] is True, doc
    rc, doc = watch(cli, "rep", "--min", "tok_s=1")
    assert rc == 0 and doc["result"]["healthy"] is True, doc
    rc, doc = watch(cli, "rep", "--min", "tok_s=20000", window="20")  # judged again, afresh
    assert rc == 1 and doc["result"]["alert"]["kind"] == "below_min"
    saved = json.loads((cli.home / "runs" / "rep" / "health.json").read_text())
    assert not [x for x in saved["alerts"] if x["kind"] not in FACTS + ("exited",)]
    assert [x["kind"] for x in cli.status("rep")["health"]["alerts"]] == []
    assert cli.json("stop", "rep")[0] == 0


FLOOR_JOB = r"""
import sys, time
old = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - 3600))
for i in range(30):
    print(old + " step %d loss 2.0 tok/s 10.0" % i, flush=True)
i = 30
while True:
    print(time.strftime("%Y-%m-%d %H:%M:%S") + " step %d loss 2.0 tok/s 14500.0" % i, flush=True)
    i += 1
    time.sleep(0.05)
"""


def test_a_floor_met_now_but_missed_an_hour_ago(cli):
    """Lines stamped an hour ago under the floor are no alert now: not with a look-back of 60 s
    (their timestamps are before it), nor without one (they were written before the window)."""
    rc, doc = cli.json("start", "fl", "--settle", "0.5", "--", PY, "-c", FLOOR_JOB)
    assert rc == 0, doc
    for flags in (["--since", "60s"], []):
        rc, doc = watch(cli, "fl", "--min", "tok_s=1000", *flags, window="1.5")
        assert rc == 0 and doc["result"]["healthy"] is True, (flags, doc)
    # the same old lines inside a look-back that reaches them do alert: the rule is live
    rc, doc = watch(cli, "fl", "--min", "tok_s=1000", "--since", "2h", window="1.5")
    assert rc == 1 and doc["result"]["alert"]["kind"] == "below_min" and doc["result"]["alert"]["line_no"] <= 31
    assert cli.json("stop", "fl")[0] == 0


def test_facts_reported_once_by_watch_and_kept_for_status(cli):
    """A NaN is a fact of the attempt: the first watch reports it, the next does not replay it;
    status shows it, with the same evidence, and --since skips it once it is old."""
    start(cli, "nf", "TRAIN_NAN_AT=5")
    rc, doc = watch(cli, "nf", window="20")
    assert rc == 1 and doc["result"]["alert"]["kind"] == "nan", doc
    nan = doc["result"]["alert"]
    rc, doc = watch(cli, "nf", window="1")
    assert rc == 0 and doc["result"]["healthy"] is True, doc
    st = cli.status("nf")["health"]["alerts"]
    assert [(a["kind"], a["line_no"], a["line"]) for a in st] == [("nan", nan["line_no"], nan["line"])]
    rc, doc = cli.json("status", "nf", "--since", "10m")
    assert [a["kind"] for a in doc["result"]["runs"][0]["health"]["alerts"]] == ["nan"]
    time.sleep(1.1)
    rc, doc = cli.json("status", "nf", "--since", "1s")
    assert rc == 0 and doc["result"]["runs"][0]["health"]["alerts"] == []
    rc, doc = cli.json("status", "nf", "--since", "soon")
    assert rc == 2 and "--since" in doc["error"]["message"]
    assert cli.json("stop", "nf")[0] == 0


def test_a_watch_of_an_ended_job_says_so(cli):
    start(cli, "end", "TRAIN_STEPS=3", settle="0.1")
    wait_for(lambda: cli.status("end")["state"] == "exited", what="the job's exit")
    rc, doc = watch(cli, "end", window="20")
    assert rc == 1 and doc["result"]["alert"]["kind"] == "exited"
    rc, doc = watch(cli, "end", window="20")  # once reported, still the answer: it has ended
    assert rc == 1 and doc["result"]["ended"] is True and doc["result"]["watched_s"] < 10


def test_status_json_has_every_metric_and_names_the_main_ones(cli):
    start(cli, "allm", "TRAIN_PROFILE_INTERVAL=2")
    wait_for(lambda: "fwd_ms" in (cli.status("allm").get("health") or {}).get("metrics", {}), what="profile lines")
    h = cli.status("allm")["health"]
    assert {"step", "loss", "tok_s", "lr", "fwd_ms", "bwd_ms"} <= set(h["metrics"])
    assert set(h["main_metrics"]) == {"step", "loss", "tok_s"}
    p = cli.run("status", "allm")
    shown = next(ln for ln in p.stdout.splitlines() if ln.startswith("  metrics: "))
    assert "tok_s=" in shown and "fwd_ms" not in shown
    assert cli.json("stop", "allm")[0] == 0


def test_status_and_watch_agree_on_a_big_log(cli):
    """An OOM and a NaN far back in a big log (beyond what one call parses line by line) are
    found by the first status, and a watch reports the same alerts with the same evidence."""
    from runward.agent.health import facts as ops_health
    src = cli.cwd / "big.src"
    events_log(src, blocks=14, block_lines=300)
    oom_text = src.read_text()
    with open(src, "a") as f:
        while f.tell() < 3 * ops_health.FULL_BYTES:
            f.write(filler(100000, 3000))
        f.write("ALL WRITTEN\n")
    rc, doc = cli.json("start", "big", "--settle", "0.3", "--ready", "ALL WRITTEN", "--sh",
                       f"cat {src}; exec sleep 300")
    assert rc == 0, doc
    st = cli.status("big")["health"]["alerts"]
    kinds = {a["kind"] for a in st}
    assert {"cuda_oom", "nan", "nccl", "traceback", "oom_killed"} <= kinds, kinds
    assert all(a["line_no"] <= oom_text.count("\n") + 3 for a in st)
    rc, doc = watch(cli, "big", window="1")
    assert rc == 1
    key = lambda a: (a["kind"], a["line_no"], a["line"])  # noqa: E731
    assert [key(a) for a in doc["result"]["alerts"]] == [key(a) for a in st]
    assert cli.json("stop", "big")[0] == 0


PSS_JOB = r"""
import os, time
block = bytearray(os.urandom(1 << 20)) * 64   # 64 MiB, written: resident
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        time.sleep(300)
        os._exit(0)
    kids.append(pid)
print("forked", kids, flush=True)
time.sleep(300)
"""


def test_pss_beside_rss_for_forked_children(cli):
    """Four forked children share their parent's 64 MiB: the RSS sum counts it five times, the
    PSS sum about once."""
    rc, doc = cli.json("start", "pss", "--settle", "1", "--ready", "forked", "--", PY, "-c", PSS_JOB)
    assert rc == 0, doc
    t = cli.status("pss")["tree"]
    assert t["processes"] == 5
    assert t["rss_bytes"] > 5 * 60 * 2**20
    assert t["pss_bytes"] is not None and t["pss_bytes"] < t["rss_bytes"] / 3, t
    assert t["pss_bytes"] > 60 * 2**20
    p = cli.run("status", "pss")
    assert " pss " in p.stdout
    assert cli.json("stop", "pss")[0] == 0


def test_pss_unreadable_is_null_not_a_guess():
    """Another user's process (pid 1, read as nobody): its smaps_rollup is unreadable, and the
    sum is null with the reason, never the sum of the rest."""
    code = ("import json, os; from runward.agent.core import procfs; from runward.agent.proc import runs; "
            "print(json.dumps(runs.tree_pss({1: procfs.read_proc(1), os.getpid(): procfs.read_proc(os.getpid())})))")
    from conftest import world_readable_src
    src = world_readable_src()  # nobody may not read the checkout
    drop = (lambda: (os.setgid(65534), os.setuid(65534))) if os.geteuid() == 0 else None
    py = "/usr/bin/python3" if drop and os.path.exists("/usr/bin/python3") else PY  # nobody may not reach a venv
    p = subprocess.run([py, "-c", code], env=dict(os.environ, PYTHONPATH=src), capture_output=True, text=True,
                       preexec_fn=drop, cwd="/", timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["pss_bytes"] is None and "unreadable for 1 of 2" in out["pss_note"], out
