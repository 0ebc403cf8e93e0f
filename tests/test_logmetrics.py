"""runward.agent.logmetrics: metrics and alerts read from real log shapes, incrementally.

Fixtures in tests/fixtures/logs/ are real training-log formats (SOURCES.md says where each is
from); every one is asserted here by value. The incremental tests append to real files
between scans; the 1 GiB test writes a real 1 GiB log (skip it with RUNWARD_SKIP_BIG=1).
"""

from __future__ import annotations

import ast
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from runward.agent import logmetrics as lm  # noqa: E402
from runward.agent.logmetrics import reader as lm_reader  # noqa: E402  (its CHUNK)

LOGS = ROOT / "tests" / "fixtures" / "logs"
NOW = 1_700_000_000.0


def scan(path, state=None, now=NOW, **rules):
    res = lm.scan(str(path), state or {}, rules, now)
    json.dumps(res, allow_nan=False)  # the agent sends this as JSON: it must be plain JSON
    return res


def by_line(res):
    return {p["line"]: p["metrics"] for p in res["points"]}


def kinds(res):
    return [(a["kind"], a["line_no"]) for a in res["alerts"]]


def approx(d):
    return {k: (pytest.approx(v) if isinstance(v, float) else v) for k, v in d.items()}


# --------------------------------------------------------------------------- real shapes

def test_every_fixture_is_documented_and_tested():
    files = sorted(p.name for p in LOGS.glob("*.log"))
    sources = (LOGS / "SOURCES.md").read_text()
    assert len(files) >= 20
    for name in files:
        assert "`%s`" % name in sources, name
        assert name in FIXTURES, "no test for " + name


def _hf_trainer(res):
    m = by_line(res)
    assert m[6] == {"progress": 3.0, "it_s": 2.21}
    assert m[7] == approx({"loss": 0.6931, "grad_norm": 2.4117, "learning_rate": 4.855e-05,
                           "epoch": 0.09})
    assert m[10]["eval_samples_per_second"] == pytest.approx(131.43)
    assert m[11] == approx({"train_runtime": 160.2271, "train_samples_per_second": 68.676,
                            "train_steps_per_second": 2.153, "train_loss": 0.4815, "epoch": 3.0})
    assert m[2] == {"num_examples": 3668.0}  # "Num examples = 3,668": thousands separator
    assert res["alerts"] == []


def _hf_trainer_tf(res):
    m = by_line(res)
    assert m[3] == approx({"loss": 0.6412, "learning_rate": 4.89e-05, "epoch": 0.087,
                           "step": 10.0})
    t = [p["t"] for p in res["points"] if p["line"] == 3][0]
    assert t == pytest.approx(time.mktime((2021, 1, 15, 10, 28, 50, 0, 0, -1)) + 0.371)


def _lightning(res):
    m = by_line(res)
    assert m[3] == approx({"epoch": 0.0, "progress": 6.0, "it_s": 1 / 8.14, "loss": 10.78,
                           "v_num": 7.0})
    assert m[5] == approx({"epoch": 1.0, "progress": 39.0, "it_s": 13.84, "loss": 0.0173,
                           "v_num": 1.0})


def _nemo(res):
    m = by_line(res)
    assert m[1] == approx({"epoch": 0.0, "progress": 6.0, "it_s": 1.74, "loss": 2.98, "v_num": 95.0,
                           "reduced_train_loss": 2.527, "global_step": 32000.0,
                           "consumed_samples": 2.93e7})
    # The watchdog message glued to the bar, then two more ranks: one alert, two repeats.
    assert kinds(res) == [("nccl", 1)]
    assert res["alerts"][0]["repeats"] == 2
    assert "Watchdog caught collective operation timeout" in res["alerts"][0]["line"]


def _deepspeed(res):
    m = by_line(res)
    assert m[1] == approx({"step": 40.0, "skipped": 2.0, "lr": 5e-05, "mom": 0.9})
    assert m[2] == approx({"samplespersec": 83.88, "memallocated": 0.63e9,
                           "maxmemallocated": 9.39e9})
    assert [p["t"] for p in res["points"]][0] == pytest.approx(
        time.mktime((2022, 3, 11, 2, 6, 58, 0, 0, -1)) + 0.985)
    assert lm.throughput_metric(m[2]) == "samplespersec"


def _deepspeed_megatron(res):
    m = by_line(res)
    assert m[1]["currsamplespersec"] == pytest.approx(8.046)
    assert m[1]["step"] == 34.0
    assert m[3] == approx({"samples_sec": 7.736, "iteration": 34.0,
                           "elapsed_time_per_iteration_ms": 4103.1, "learning_rate": 2.148e-06,
                           "approx_flops_per_gpu": 112.9, "lm_loss": 11.18602,
                           "number_of_skipped_iterations": 0.0, "number_of_nan_iterations": 0.0})
    # Current samples/s beats the running average as the main throughput.
    assert lm.throughput_metric(m[1]) == "currsamplespersec"


def _megatron(res):
    m = by_line(res)
    assert m[2] == approx({"iteration": 123.0, "consumed_samples": 125952.0,
                           "elapsed_time_per_iteration_ms": 87871.6, "learning_rate": 9.262e-06,
                           "global_batch_size": 1024.0, "lm_loss": 2.49308, "loss_scale": 1.0,
                           "grad_norm": 0.273, "number_of_skipped_iterations": 0.0,
                           "number_of_nan_iterations": 0.0})
    assert res["alerts"] == []


def _megatron_ds_nan(res):
    m = by_line(res)
    assert m[1]["grad_norm"] == "nan"  # NaN travels as a string: JSON has no NaN
    assert m[1]["samples_per_second"] == pytest.approx(1.82)
    assert m[2]["number_of_nan_iterations"] == 1.0
    # grad norm nan is routine with fp16 and not loss-like: no alert for it; the framework's
    # own count of NaN iterations is one, once (line 3 is the same state, not a new alert).
    assert kinds(res) == [("nan", 2)]
    assert res["alerts"][0]["metric"] == "number_of_nan_iterations"


def _vllm_v0(res):
    m = by_line(res)
    assert m[1] == approx({"avg_prompt_throughput": 0.0, "avg_generation_throughput": 41.7,
                           "running": 1.0, "swapped": 0.0, "pending": 0.0,
                           "gpu_kv_cache_usage": 2.0, "cpu_kv_cache_usage": 0.0})
    # "INFO 01-22 18:27:20" has no year: this year (NOW's), local time.
    year = time.localtime(NOW).tm_year
    t = [p["t"] for p in res["points"]]
    assert t[0] == pytest.approx(time.mktime((year, 1, 22, 18, 27, 20, 0, 0, -1)))
    assert lm.throughput_metric(m[1]) == "avg_generation_throughput"


def _vllm_v1(res):
    m = by_line(res)
    assert m[2]["avg_prompt_throughput"] == pytest.approx(12068.8)
    assert m[2]["avg_generation_throughput"] == pytest.approx(734.9)
    assert m[2]["waiting"] == 33.0 and m[2]["gpu_kv_cache_usage"] == pytest.approx(87.7)
    assert "pid" not in m[1]  # "(APIServer pid=3646)" is a header, not a metric
    assert m[3]["mean_acceptance_length"] == pytest.approx(2.0)
    assert m[3]["accepted_throughput"] == pytest.approx(76.17)
    assert m[3]["avg_draft_acceptance_rate"] == pytest.approx(32.6)


def _nanogpt(res):
    m = by_line(res)
    assert m[2] == approx({"iter": 10.0, "loss": 3.2239, "time": 893.13, "mfu": 16.05})
    assert m[1]["mfu"] == pytest.approx(-100.37)
    assert m[4] == approx({"step": 250.0, "train_loss": 1.5477, "val_loss": 1.7257})
    assert 5 not in m  # "saving checkpoint to out-shakespeare-char"


def _nanogpt_nan(res):
    m = by_line(res)
    assert m[4]["loss"] == pytest.approx(4.2427)
    assert m[5]["loss"] == "nan" and m[6]["loss"] == "nan"
    assert kinds(res) == [("nan", 5)]  # once: line 6 is still the same NaN run
    a = res["alerts"][0]
    assert a["metric"] == "loss" and a["value"] == "nan"
    assert a["t"] == pytest.approx(time.mktime((2023, 3, 22, 9, 32, 52, 0, 0, -1)))
    assert a["line"].startswith("2023-03-22 09:32:52 iter 3010: loss nan")


def _fairseq_legacy(res):
    m = by_line(res)
    assert m[1] == approx({"epoch": 1.0, "loss": 11.558, "nll_loss": 10.818, "ppl": 1886.42,
                           "wps": 52922.0, "ups": 0.5, "wpb": 104928.0, "bsz": 5325.0,
                           "num_updates": 445.0, "lr": 8.90826e-05, "gnorm": 1.58, "clip": 0.0,
                           "oom": 0.0, "loss_scale": 2.037, "wall": 882.0, "train_wall": 756.0})
    assert m[2] == approx({"epoch": 1.0, "valid_loss": 8.11462, "valid_nll_loss": 6.8871,
                           "valid_ppl": 118.43, "num_updates": 600.0})
    assert m[3]["wps"] == 12876.0 and m[3]["loss"] == pytest.approx(6.363)
    assert lm.throughput_metric(m[1]) == "wps"


def _fairseq_hydra(res):
    m = by_line(res)
    assert m[3] == approx({"epoch": 1.0, "loss": 4.655, "nll_loss": 3.912, "ppl": 15.05,
                           "wps": 11873.2, "ups": 3.41, "wpb": 3481.5, "bsz": 128.0,
                           "num_updates": 100.0, "lr": 1.25e-05, "gnorm": 1.802,
                           "train_wall": 29.0, "gb_free": 10.1, "wall": 40.0})
    assert m[5] == approx({"epoch": 1.0, "loss": 2.001, "nll_loss": 1.103, "ppl": 4.0,
                           "wps": 38112.0, "num_updates": 487.0})
    assert m[2] == {"setting_loss_scale_to": 64.0}  # a loss *scale* is not a loss...
    assert res["alerts"] == []
    assert res["points"][2]["t"] == pytest.approx(time.mktime((2020, 4, 5, 18, 52, 1, 0, 0, -1)))


def _fairseq_json(res):
    m = by_line(res)
    assert m[2] == approx({"epoch": 25.0, "loss": 3.034, "nll_loss": 1.365, "ppl": 2.88,
                           "wps": 1667443.0, "ups": 2.7, "wpb": 617156.0, "bsz": 16626.0,
                           "num_updates": 53749.0, "lr": 0.00019096019143386803,
                           "gnorm": 0.131, "clip": 100.0, "oom": 0.063, "loss_scale": 4.037,
                           "wall": 20721.0})
    assert m[1]["valid_ppl"] == pytest.approx(2.87)


def _timm(res):
    m = by_line(res)
    assert m[2] == approx({"train": 0.0, "loss": 6.9304, "time": 0.392, "rate": 2612.24,
                           "lr": 1e-06, "data": 0.012})
    assert m[3] == approx({"test": 0.0, "time": 2.245, "loss": 6.877})
    assert lm.throughput_metric(m[2]) == "rate"


def _accelerate(res):
    m = by_line(res)
    assert m[1] == approx({"epoch": 0.0, "accuracy": 0.6838235294117647,
                           "f1": 0.8122270742358079})
    assert m[2]["epoch"] == 1.0


def _graphsage(res):
    m = by_line(res)
    assert m[1]["speed_samples_sec"] == "nan"
    assert m[2] == approx({"epoch": 0.0, "step": 20.0, "loss": 2.6687, "train_acc": 0.3437,
                           "speed_samples_sec": 43672.9695, "gpu": 401.2})
    assert m[3] == approx({"epoch_time_s": 8.7009})
    assert res["alerts"] == []  # a NaN *speed* on the first step is no loss going NaN


def _dreamer(res):
    m = by_line(res)
    assert m[1] == approx({"episode_score": 0.1, "episode_length": 34.0,
                           "train_loss_con": 0.41, "train_loss_dyn": 5.78,
                           "train_loss_image": 61.45, "train_loss_policy": 0.0093,
                           "replay_replay_ratio": 32.76, "fps_policy": 39.68, "fps_train": 1253.7})
    assert 2 not in m  # a path with a date in it is no metric
    assert kinds(res) == [("oom_killed", 3)]


def _torchrun(res):
    assert kinds(res) == [("oom_killed", 3), ("traceback", 11)]
    killed, tb = res["alerts"]
    assert killed["repeats"] == 2  # "exitcode  : -9" and "Signal 9 (SIGKILL)" below
    assert tb["line"] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    assert tb["traceback_line_no"] == 4


def _cuda_oom(res):
    assert by_line(res)[1] == approx({"step": 118.0, "loss": 2.3447, "tok_s": 14488.0,
                                      "lr": 3e-04})
    # One alert for the whole traceback, of the specific kind, carrying the exception line.
    assert kinds(res) == [("cuda_oom", 10)]
    a = res["alerts"][0]
    assert a["line"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert a["traceback_line_no"] == 2
    assert len(a["line"]) <= 500


def _cuda_oom_legacy(res):
    assert kinds(res) == [("cuda_oom", 6)]
    assert res["alerts"][0]["line"].startswith("RuntimeError: CUDA out of memory.")
    assert by_line(res) == {1: {"epoch": 3.0}}


def _cuda_error_oom(res):
    assert kinds(res) == [("cuda_oom", 1)]


def _cublas(res):
    assert kinds(res) == [("cuda_oom", 8)]
    assert "CUBLAS_STATUS_ALLOC_FAILED" in res["alerts"][0]["line"]


def _nccl_watchdog(res):
    assert kinds(res) == [("nccl", 1)]
    assert res["alerts"][0]["repeats"] == 1
    assert "WorkNCCL(SeqNum=1580, OpType=ALLREDUCE" in res["alerts"][0]["line"]


def _nccl_internal(res):
    # Two ranks' tracebacks interleave; rank 1's ends in the NCCL error (one alert, with the
    # ncclInternalError line after it as a repeat); rank 2's never ends in this file.
    assert kinds(res) == [("nccl", 9), ("traceback", 3)]
    nccl, tb = res["alerts"]
    assert nccl["line"].startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert nccl["traceback_line_no"] == 1 and nccl["repeats"] == 1
    assert "has not appeared" in tb["detail"]


def _nccl_warn_ib(res):
    assert kinds(res) == [("nccl", 2)]
    assert res["points"] == []  # NCCL INFO chatter carries no training metric


def _killed(res):
    assert by_line(res)[2] == approx({"progress": 100.0, "it_s": 181.95})
    assert kinds(res) == [("oom_killed", 3)]
    assert res["alerts"][0]["evidence"] == "log line: Killed"


def _killed_shell(res):
    assert kinds(res) == [("oom_killed", 2)]


def _triton(res):
    assert res["alerts"] == []  # Triton's "out of resource: shared memory" is no CUDA OOM


def _torchrun_gloo_oom(res):
    # rank 1's OOM ends its traceback; rank 0's "Connection closed by peer" is a traceback too:
    # the health facts say both (tests/test_attribution.py says which was the cause)
    assert kinds(res) == [("cuda_oom", 14), ("traceback", 23)]
    assert by_line(res)[9] == {"step": 2.0, "loss": 1.0}


def _torchrun_tee_gloo(res):
    assert kinds(res) == [("traceback", 14)] and res["alerts"][0]["repeats"] == 2
    assert by_line(res)[10] == {"step": 2.0, "loss": 1.0}  # "[default1]:step 2 loss 1.0"


def _nccl_oom_cascade(res):
    assert [k for k, _ in kinds(res)] == ["cuda_oom", "nccl", "traceback"]
    assert kinds(res)[0] == ("cuda_oom", 10)


FIXTURES = {
    "torchrun_gloo_oom.log": _torchrun_gloo_oom, "torchrun_tee_gloo.log": _torchrun_tee_gloo,
    "nccl_oom_cascade.log": _nccl_oom_cascade,
    "hf_trainer.log": _hf_trainer, "hf_trainer_tf.log": _hf_trainer_tf,
    "lightning_progress.log": _lightning, "nemo_nccl_timeout.log": _nemo,
    "deepspeed.log": _deepspeed, "deepspeed_megatron.log": _deepspeed_megatron,
    "megatron.log": _megatron, "megatron_ds_nan.log": _megatron_ds_nan,
    "vllm_v0.log": _vllm_v0, "vllm_v1.log": _vllm_v1, "nanogpt.log": _nanogpt,
    "nanogpt_nan.log": _nanogpt_nan, "fairseq_legacy.log": _fairseq_legacy,
    "fairseq_hydra.log": _fairseq_hydra, "fairseq_json.log": _fairseq_json, "timm.log": _timm,
    "accelerate.log": _accelerate, "graphsage.log": _graphsage,
    "dreamer_killed.log": _dreamer, "torchrun_sigkill.log": _torchrun,
    "cuda_oom.log": _cuda_oom, "cuda_oom_legacy.log": _cuda_oom_legacy,
    "cuda_error_oom.log": _cuda_error_oom, "cublas_alloc.log": _cublas,
    "nccl_watchdog.log": _nccl_watchdog, "nccl_internal.log": _nccl_internal,
    "nccl_warn_ib.log": _nccl_warn_ib, "killed.log": _killed, "killed_shell.log": _killed_shell,
    "triton_autotune.log": _triton,
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture(name):
    path = LOGS / name
    res = scan(path)
    assert res["lines"] == path.read_bytes().count(b"\n")
    assert res["bytes"] == path.stat().st_size and res["more"] is False
    FIXTURES[name](res)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_same_answer_in_small_chunks_and_one_line_at_a_time(name, tmp_path,
                                                                   monkeypatch):
    """Chunk boundaries and scan boundaries change nothing: the same points and alerts
    whether the file is read at once, 7 bytes per read, or grown line by line."""
    path = LOGS / name
    whole = scan(path)
    monkeypatch.setattr(lm_reader, "CHUNK", 7)
    assert scan(path)["points"] == whole["points"]
    assert kinds(scan(path)) == kinds(whole)
    monkeypatch.undo()
    grown = tmp_path / name
    grown.write_bytes(b"")
    state, points, alerts = {}, [], []
    for line in path.read_bytes().splitlines(keepends=True):
        with open(grown, "ab") as f:
            f.write(line)
        res = scan(grown, state, alive=True)  # alive: a traceback may still get its end
        state = res["state"]
        points += res["points"]
        alerts += res["alerts"]
    alerts += scan(grown, state)["alerts"]  # the job is gone: whatever was pending
    assert [(p["line"], p["metrics"]) for p in points] == \
        [(p["line"], p["metrics"]) for p in whole["points"]]
    assert [a["kind"] for a in alerts] == [a["kind"] for a in whole["alerts"]]


def test_templates_agree_with_the_reference_parser():
    """scan's per-skeleton templates extract what parse_line, the slow reference,
    extracts from every fixture line."""
    for path in sorted(LOGS.glob("*.log")):
        res = scan(path)
        got = by_line(res)
        for n, raw in enumerate(path.read_text().splitlines(), 1):
            if n not in got or "\r" in raw or lm.EVENT_RE.search(raw.encode()):
                continue  # an event line's metrics are those before the event
            ref = lm.parse_line(raw[lm.TS_RE.match(raw).end():]
                                if lm.TS_RE.match(raw) else raw)
            ref = {k: lm.json_value(v) for k, v in ref.items()}
            assert got[n] == ref, (path.name, n)


# --------------------------------------------------------------------------- line shapes

@pytest.mark.parametrize("line, want", [
    ("loss=2.31 lr=3e-4", {"loss": 2.31, "lr": 3e-4}),
    ("loss: 2.31, acc: 91.5%", {"loss": 2.31, "acc": 91.5}),
    ("step 120 | loss 2.31 | tok/s 14,512", {"step": 120, "loss": 2.31, "tok_s": 14512}),
    ("step 120 loss 2.31 tok/s 14512", {"step": 120, "loss": 2.31, "tok_s": 14512}),
    ("tok/s: 14.5K  mem: 1.2M  flops: 3.4G  params 2T", {"tok_s": 14500, "mem": 1.2e6,
                                                          "flops": 3.4e9, "params": 2e12}),
    ("throughput 14.5k tokens/s", {"throughput": 14500}),
    ("{'loss': 2.1, 'grad_norm': 0.8, 'learning_rate': 4.9e-05, 'epoch': 0.01}",
     {"loss": 2.1, "grad_norm": 0.8, "learning_rate": 4.9e-05, "epoch": 0.01}),
    ("{'loss': nan, 'epoch': 0.5}", {"loss": math.nan, "epoch": 0.5}),  # literal_eval can't
    ('{"loss": 2.5, "tokens_per_sec": 1200}', {"loss": 2.5, "tokens_per_sec": 1200}),
    ("Epoch 1: 45%|████▌     | 450/1000 [01:23<01:40, 5.42it/s, loss=2.31, v_num=0]",
     {"epoch": 1, "progress": 45, "it_s": 5.42, "loss": 2.31, "v_num": 0}),
    ("  8%|▊         | 1999/24128 [1:52:09<20:27:23,  3.33s/it]",
     {"progress": 8, "it_s": 1 / 3.33}),
    ("[2024-05-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, "
     "skipped=0, lr=[0.0003], mom=[[0.9, 0.95]]", {"step": 100, "skipped": 0, "lr": 3e-4,
                                                    "mom": 0.9}),
    (" iteration      100/  500000 | consumed samples:       102400 | elapsed time per "
     "iteration (ms): 1234.5 | learning rate: 1.500E-04 | global batch size:  1024 | lm loss: "
     "7.123E+00 | loss scale: 1.0 | grad norm: 2.3 | number of skipped iterations:   0 | "
     "number of nan iterations:   0 |",
     {"iteration": 100, "consumed_samples": 102400, "elapsed_time_per_iteration_ms": 1234.5,
      "learning_rate": 1.5e-4, "global_batch_size": 1024, "lm_loss": 7.123, "loss_scale": 1.0,
      "grad_norm": 2.3, "number_of_skipped_iterations": 0, "number_of_nan_iterations": 0}),
    ("Avg prompt throughput: 120.3 tokens/s, Avg generation throughput: 2345.6 tokens/s, "
     "Running: 5 reqs", {"avg_prompt_throughput": 120.3, "avg_generation_throughput": 2345.6,
                         "running": 5}),
    ("iter 100: loss 4.2345, time 123.45ms, mfu 35.12%",
     {"iter": 100, "loss": 4.2345, "time": 123.45, "mfu": 35.12}),
    ("loss NaN, loss_2 -inf, grad Inf, x Infinity", {"loss": math.nan, "loss_2": -math.inf,
                                                     "grad": math.inf, "x": math.inf}),
    ("train/loss 1.5 / train/acc 0.5", {"train_loss": 1.5, "train_acc": 0.5}),
    ("Saving model checkpoint to out/checkpoint-500", {}),
    ("fp16 acc1 E0321 v1.2", {}),  # digits glued to words are not numbers
    ("samples/sec=12.5 TFLOPs: 78.3", {"samples_sec": 12.5, "tflops": 78.3}),
])
def test_line_shapes(line, want):
    got = lm.parse_line(line)
    assert set(got) == set(want), got
    for k, v in want.items():
        if isinstance(v, float) and math.isnan(v):
            assert math.isnan(got[k])
        else:
            assert got[k] == pytest.approx(v), k


def test_names_are_normalised():
    assert lm.norm_name("tok/s") == "tok_s"
    assert lm.norm_name("lm loss") == "lm_loss"
    assert lm.norm_name("tokens/s") == "tokens_s"
    assert lm.norm_name("Elapsed time per iteration (ms)") == "elapsed_time_per_iteration_ms"


def test_throughput_metric_choice():
    f = lm.throughput_metric
    assert f(["loss", "step"]) is None
    assert f(["loss", "tok_s", "it_s"]) == "tok_s"
    assert f(["tokens_s", "samples_sec"]) == "tokens_s"
    assert f(["samplespersec", "it_s"]) == "samplespersec"
    assert f(["runningavgsamplespersec", "currsamplespersec"]) == "currsamplespersec"
    assert f(["avg_prompt_throughput", "avg_generation_throughput"]) == \
        "avg_generation_throughput"
    assert f(["wps", "ups"]) == "wps"
    assert f(["it_s", "progress"]) == "it_s"
    assert f(["throughput"]) == "throughput"
    assert f(["consumed_samples", "consumed_tokens", "samples_per_second"]) == \
        "samples_per_second"  # a count of samples is no rate
    assert not lm.is_throughput("loss_scale") and lm.is_loss("lm_loss")
    assert not lm.is_loss("loss_scale")


def test_timestamps(tmp_path):
    log = tmp_path / "ts.log"
    log.write_text(
        "2024-05-01T12:00:00Z loss 1\n"
        "2024-05-01T12:00:00.5+02:00 loss 2\n"
        "[2024-05-01 12:00:00,123] loss 3\n"
        "2024-05-01 12:00:00 loss 4\n"
        "loss 5\n"
        "INFO 05-01 12:00:00 metrics.py:449] Avg generation throughput: 5.0 tokens/s\n")
    t = [p["t"] for p in scan(log)["points"]]
    local = time.mktime((2024, 5, 1, 12, 0, 0, 0, 0, -1))
    assert t[0] == 1714564800.0
    assert t[1] == 1714564800.0 - 7200 + 0.5
    assert t[2] == pytest.approx(local + 0.123)
    assert t[3] == local
    assert t[4] == NOW  # no timestamp: the time the line was seen
    assert t[5] == time.mktime((time.localtime(NOW).tm_year, 5, 1, 12, 0, 0, 0, 0, -1))


def test_user_regexes(tmp_path):
    log = tmp_path / "u.log"
    log.write_text("drafter acc@3 = 0.71 (k=4)\nthroughput report: 14.5K tok per second\n")
    res = scan(log, metrics={"acc3": r"acc@3 = (\S+)",
                             "ignored": r"(?P<tps>[\d.]+K) tok per second"})
    m = by_line(res)
    assert m[1]["acc3"] == pytest.approx(0.71) and m[1]["k"] == 4
    assert m[2]["tps"] == 14500.0


def test_example_job_lines(tmp_path):
    """The shape examples/train.py prints (runward's own demo job)."""
    log = tmp_path / "train.log"
    log.write_text("init pid=4242 workers=2\nready\nstep 1 loss 2.3026 tok/s 14512.3 lr 3.0e-04\n"
                   "profile: step 1 fwd_ms 12.5 bwd_ms 25.0\ndone step=1\n")
    m = by_line(scan(log))
    assert m[3] == approx({"step": 1.0, "loss": 2.3026, "tok_s": 14512.3, "lr": 3e-4})
    assert m[4] == approx({"step": 1.0, "fwd_ms": 12.5, "bwd_ms": 25.0})


# --------------------------------------------------------------------------- incremental

def test_appends_read_only_new_bytes_and_carry_partial_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1 loss 2.5 tok/s 14000\nstep 2 loss 2.4 tok")
    r1 = scan(log)
    assert r1["lines"] == 1 and [p["line"] for p in r1["points"]] == [1]
    assert r1["bytes"] == log.stat().st_size  # the partial line is read and carried
    assert r1["state"]["carry"] == "step 2 loss 2.4 tok"
    with open(log, "ab") as f:
        f.write(b"/s 14100\nstep 3 loss 2.3 tok/s 14200\n")
    r2 = scan(log, r1["state"])
    assert r2["bytes_read"] == len(b"/s 14100\nstep 3 loss 2.3 tok/s 14200\n")
    assert by_line(r2) == {2: {"step": 2.0, "loss": 2.4, "tok_s": 14100.0},
                           3: {"step": 3.0, "loss": 2.3, "tok_s": 14200.0}}
    assert r2["lines"] == 3 and r2["last_line"] == "step 3 loss 2.3 tok/s 14200"
    r3 = scan(log, r2["state"])
    assert r3["bytes_read"] == 0 and r3["points"] == [] and r3["alerts"] == []
    assert r3["lines"] == 3 and r3["reset"] is None


def test_state_survives_json(tmp_path):
    """The caller keeps the state as JSON between calls (the agent is a new process each
    time): a round trip through json changes nothing."""
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n")
    r1 = scan(log, alive=True)
    state = json.loads(json.dumps(r1["state"]))
    with open(log, "a") as f:
        f.write("ValueError: bad\n")
    r2 = scan(log, state, alive=True)
    assert kinds(r2) == [("traceback", 3)] and r2["alerts"][0]["line"] == "ValueError: bad"


def test_truncation_is_detected_and_read_from_the_start(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.5\nstep 2 loss 2.4\n")
    r1 = scan(log)
    log.write_text("step 1 loss 9.9\n")  # `> train.log` and a new run writing
    r2 = scan(log, r1["state"])
    assert r2["reset"] == "truncated" and r2["lines"] == 1
    assert by_line(r2) == {1: {"step": 1.0, "loss": 9.9}}


def test_rotation_is_detected(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.5\n" * 3)
    r1 = scan(log)
    log.rename(tmp_path / "train.log.1")  # logrotate: rename, then a new file
    log.write_text("step 1 loss 2.5\n" * 5)
    r2 = scan(log, r1["state"])
    assert r2["reset"] == "rotated" and r2["lines"] == 5 and len(r2["points"]) == 5


def test_rotation_reads_the_rest_of_the_rotated_file_first(tmp_path):
    """Lines written after the last scan and before the rename are read from LOG.1, then the
    new log: a rotation between two scans skips no line (rotated twice: LOG.2, LOG.1, LOG)."""
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.5\n")
    r1 = scan(log)
    with open(log, "a") as f:
        f.write("step 2 loss 2.4\nstep 3 loss 2.3\n")
    log.rename(tmp_path / "train.log.2")
    (tmp_path / "train.log.1").write_text("step 4 loss 2.2\n")
    log.write_text("step 5 loss 2.1\nstep 6 loss 2.0\n")
    r2 = scan(log, r1["state"])
    assert [p["metrics"]["step"] for p in r2["points"]] == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert r2["reset"] == "rotated" and r2["exists"]
    with open(log, "a") as f:
        f.write("step 7 loss 1.9\n")
    r3 = scan(log, r2["state"])  # on in the new log, from where it stopped
    assert [p["metrics"]["step"] for p in r3["points"]] == [7.0] and r3["reset"] is None


def test_rewrite_in_place_is_detected(tmp_path):
    """copytruncate, then the job writes more than before: size alone would not tell."""
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.5\n")
    r1 = scan(log)
    with open(log, "r+") as f:  # same inode
        f.truncate(0)
        f.write("step 7 loss 1.0\nstep 8 loss 0.9\n")
    r2 = scan(log, r1["state"])
    assert r2["reset"] == "rewritten"
    assert by_line(r2) == {1: {"step": 7.0, "loss": 1.0}, 2: {"step": 8.0, "loss": 0.9}}


def test_missing_log(tmp_path):
    res = scan(tmp_path / "nope.log", alive=True, stall_seconds=10)
    assert res["exists"] is False and res["points"] == [] and res["lines"] == 0
    assert res["alerts"] == []


def test_max_bytes_caps_a_call_and_says_more(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join("step %d loss 2.0\n" % i for i in range(1000)))
    size = log.stat().st_size
    state, lines, calls = {}, 0, 0
    while True:
        res = scan(log, state, max_bytes=1000)
        calls += 1
        assert res["bytes_read"] <= 1000
        lines = res["lines"]
        state = res["state"]
        if not res["more"]:
            break
    assert calls == -(-size // 1000) and lines == 1000 and state["offset"] == size


def test_points_are_bounded_and_drops_counted(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join("step %d loss 2.0\n" % i for i in range(50)))
    res = scan(log, max_points=10)
    assert [p["line"] for p in res["points"]] == list(range(41, 51))
    assert res["points_dropped"] == 40


def test_an_overlong_line_is_cut_and_the_rest_skipped(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"loss 1.0 " + b"x" * (200 << 10) + b" loss 9.0\nstep 2 loss 2.0\n")
    res = scan(log)
    assert res["lines"] == 2
    assert by_line(res) == {1: {"loss": 1.0}, 2: {"step": 2.0, "loss": 2.0}}
    assert len(res["state"]["carry"]) == 0


def test_tail_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join("line %d\n" % i for i in range(20)))
    assert scan(log, tail_lines=3)["tail"] == ["line 17", "line 18", "line 19"]
    assert "tail" not in scan(log)


def test_invalid_utf8_and_crlf(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1 loss 2.0 \xff\xfe\r\nstep 2 loss 1.9\r\n")
    m = by_line(scan(log))
    assert m[1] == {"step": 1.0, "loss": 2.0} and m[2] == {"step": 2.0, "loss": 1.9}


def big_log_block(size=1 << 20):
    """SIZE bytes of whole lines of the kind of run whose log reaches a GiB: Megatron-LM
    iteration lines (~330 bytes each), Trainer-style dicts, a progress line, warnings."""
    out, n, step = [], 0, 0
    while True:
        step += 1
        lines = [
            " iteration %8d/  500000 | consumed samples: %12d | elapsed time per iteration "
            "(ms): %.1f | learning rate: 1.500E-04 | global batch size:  1024 | lm loss: "
            "%.6E | loss scale: 1.0 | grad norm: %.3f | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |\n"
            % (step, step * 1024, 1200 + step % 90, 2 + (step % 97) / 100, (step % 13) / 10),
            "[2024-05-01 12:%02d:%02d,%03d] [INFO] step %d | loss %.4f | tok/s %s | lr 3.0e-04\n"
            % (step // 60 % 60, step % 60, step % 1000, step, 2 + (step % 89) / 100,
               format(14500 + step % 500, ",")),
        ]
        if step % 4 == 0:
            lines.append("{'loss': %.4f, 'grad_norm': 0.8, 'learning_rate': 3e-04, "
                         "'epoch': 0.%02d}\n" % (2 + (step % 83) / 100, step % 100))
        if step % 25 == 0:
            lines.append("/usr/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: "
                         "UserWarning: None of the inputs have requires_grad=True. Gradients "
                         "will be None\n")
        for line in lines:
            b = line.encode()
            if n + len(b) > size - 1:
                out.append(b" " * (size - n - 1) + b"\n")
                return b"".join(out)
            out.append(b)
            n += len(b)


@pytest.mark.skipif(os.environ.get("RUNWARD_SKIP_BIG") == "1", reason="RUNWARD_SKIP_BIG=1")
def test_one_gib_log_second_scan_reads_only_the_appended_bytes(tmp_path):
    """A 1 GiB log is scanned once (four capped calls of 256 MiB); after 3 lines are
    appended the next scan reads exactly those bytes and finds exactly those lines."""
    log = tmp_path / "big.log"
    data = big_log_block()
    assert len(data) == 1 << 20 and data.endswith(b"\n")
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(1024):
            os.write(fd, data)
    finally:
        os.close(fd)
    size = log.stat().st_size
    assert size == 1 << 30
    rules = {"max_bytes": 256 << 20, "min": {"tok_s": 14000}}
    state, calls = {}, 0
    t0 = time.monotonic()
    while True:
        res = lm.scan(str(log), state, rules, time.time())
        state = res["state"]
        calls += 1
        assert res["bytes_read"] == min(256 << 20, size - (calls - 1) * (256 << 20))
        if not res["more"]:
            break
    first = time.monotonic() - t0
    assert calls == 4 and state["offset"] == size
    assert res["lines"] == 1024 * data.count(b"\n")
    assert res["alerts"] == [] and len(res["points"]) == 2000
    new = (b"step 999001 | loss 2.0000 | tok/s 14,600 | lr 3.0e-04\n"
           b"step 999002 | loss nan | tok/s 14,650 | lr 3.0e-04\n"
           b"step 999003 | loss 1.9000 | tok/s 9,000 | lr 3.0e-04\n")
    with open(log, "ab") as f:
        f.write(new)
    t0 = time.monotonic()
    res = lm.scan(str(log), state, rules, time.time())
    second = time.monotonic() - t0
    assert res["bytes_read"] == len(new) and res["bytes"] == size + len(new)
    assert res["lines"] == 1024 * data.count(b"\n") + 3
    assert [p["line"] for p in res["points"]] == [res["lines"] - 2, res["lines"] - 1,
                                                  res["lines"]]
    assert [a["kind"] for a in res["alerts"]] == ["nan", "below_min"]
    print("1 GiB: first scan %.1f s in %d calls, second scan %.4f s" % (first, calls, second))


# --------------------------------------------------------------------------- alerts

def test_nan_and_inf_alert_once_per_run_of_bad_values(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("loss 2.0\nloss nan\nloss nan\nloss 1.9\nloss NaN\nloss inf\nloss -inf\n"
                   "loss: nan\n")
    res = scan(log)
    assert kinds(res) == [("nan", 2), ("nan", 5)]  # a NaN run; back to finite; a new run
    # inf after NaN is still the same bad run; "loss: nan" (no digit on the line) is seen too.
    log.write_text("loss 2.0\nloss inf\nloss 1.0\nloss: nan\n")
    assert kinds(scan(log)) == [("inf", 2), ("nan", 4)]


def test_nan_alerts_are_not_repeated_on_the_next_scan(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss nan\n")
    r1 = scan(log)
    with open(log, "a") as f:
        f.write("step 2 loss nan\n")
    r2 = scan(log, r1["state"])
    assert kinds(r1) == [("nan", 1)] and r2["alerts"] == []


def test_traceback_across_scans_and_chunks(tmp_path, monkeypatch):
    log = tmp_path / "train.log"
    head = "step 5 loss 2.0\nTraceback (most recent call last):\n" + \
        "".join('  File "train.py", line %d, in f%d\n    f%d()\n' % (i, i, i + 1)
                for i in range(200))
    log.write_text(head)
    monkeypatch.setattr(lm_reader, "CHUNK", 64)  # the traceback spans ~200 reads
    r1 = scan(log, alive=True)
    assert r1["alerts"] == []  # the exception line has not come: wait for it
    assert r1["state"]["tbs"]
    with open(log, "a") as f:
        f.write("KeyError: 'labels'\nstep 6 loss 2.0\n")
    r2 = scan(log, r1["state"], alive=True)
    assert kinds(r2) == [("traceback", 403)]
    a = r2["alerts"][0]
    assert a["line"] == "KeyError: 'labels'" and a["traceback_line_no"] == 2
    assert "KeyError: 'labels'" in a["detail"]
    assert by_line(r2) == {404: {"step": 6.0, "loss": 2.0}}


def test_traceback_without_its_end_is_reported_when_the_job_is_gone(tmp_path):
    log = tmp_path / "train.log"
    log.write_text('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n')
    assert scan(log, alive=True)["alerts"] == []
    res = scan(log, alive=False)
    assert kinds(res) == [("traceback", 1)] and "has not appeared" in res["alerts"][0]["detail"]


def test_chained_traceback_reports_the_last_exception(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        'Traceback (most recent call last):\n  File "a.py", line 3, in load\n    open(p)\n'
        "FileNotFoundError: [Errno 2] No such file or directory: 'ckpt.pt'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        'Traceback (most recent call last):\n  File "a.py", line 9, in main\n    load()\n'
        "RuntimeError: no checkpoint to resume from\n")
    res = scan(log)
    assert kinds(res) == [("traceback", 11)]
    assert res["alerts"][0]["line"] == "RuntimeError: no checkpoint to resume from"


def test_cuda_oom_during_autotuning_in_a_logged_traceback(tmp_path):
    """FLA/Triton autotuning raising a real CUDA OOM (the design's failure 6), logged by a
    logger that prefixes every line: the prefix with its changing timestamp still ties the
    frames to their traceback."""
    log = tmp_path / "train.log"
    log.write_text(
        "[rank3]: 2024-05-01 12:00:01 Traceback (most recent call last):\n"
        '[rank3]: 2024-05-01 12:00:01   File "fla/ops/utils.py", line 88, in bench\n'
        "[rank0]: 2024-05-01 12:00:01 step 10 loss 2.1 tok/s 14600\n"
        "[rank3]: 2024-05-01 12:00:02     return triton.testing.do_bench(kernel_call)\n"
        "[rank3]: 2024-05-01 12:00:02 torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB. GPU 3 has a total capacity of 79.10 GiB of which 1.02 GiB is free.\n")
    res = scan(log)
    assert kinds(res) == [("cuda_oom", 5)]
    assert res["alerts"][0]["traceback_line_no"] == 1
    assert by_line(res) == {3: {"step": 10.0, "loss": 2.1, "tok_s": 14600.0}}


def test_oom_killer_from_the_exit_status(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.0\n")
    res = scan(log, alive=False, exit={"code": None, "signal": "SIGKILL"})
    assert [a["kind"] for a in res["alerts"]] == ["exited", "oom_killed"]
    assert res["alerts"][1]["evidence"] == "exit by SIGKILL"
    assert "SIGKILL" in res["alerts"][0]["detail"]
    again = scan(log, res["state"], alive=False, exit={"code": None, "signal": "SIGKILL"})
    assert again["alerts"] == []  # once per occurrence


def test_exited_with_a_code(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("done\n")
    res = scan(log, exit={"code": 1, "signal": None})
    assert [(a["kind"], a["code"]) for a in res["alerts"]] == [("exited", 1)]
    assert "code 1" in res["alerts"][0]["detail"]
    res = scan(log, exit={"code": 137, "signal": None})  # 128 + 9, as a shell reports it
    assert [a["kind"] for a in res["alerts"]] == ["exited", "oom_killed"]


def test_stall_alerts_every_call_while_alive(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.0\n")
    old = NOW - 1000
    os.utime(log, (old, old))
    r1 = scan(log, alive=True, stall_seconds=300)
    assert kinds(r1) == [("stall", None)]
    assert r1["alerts"][0]["value"] == pytest.approx(1000, abs=1)
    r2 = scan(log, r1["state"], now=NOW + 10, alive=True, stall_seconds=300)
    assert kinds(r2) == [("stall", None)]  # still stalled: say it again
    assert scan(log, r2["state"], alive=False, stall_seconds=300)["alerts"] == []  # not alive
    with open(log, "a") as f:
        f.write("step 2 loss 1.9\n")
    os.utime(log, (NOW + 19, NOW + 19))
    r3 = scan(log, r2["state"], now=NOW + 20, alive=True, stall_seconds=300)
    assert r3["alerts"] == []
    assert scan(log, alive=True, stall_seconds=None)["alerts"] == []


def test_below_min_and_above_max_alert_on_crossing(tmp_path):
    log = tmp_path / "train.log"
    toks = [15000, 14000, 13900, 14000, 15000, 15000, 15000, 13000]
    log.write_text("".join("step %d loss %.1f tok/s %d\n" % (i, 2 + (i == 3) * 9, t)
                           for i, t in enumerate(toks)))
    res = scan(log, min={"tok_s": 14500}, max={"loss": 10})
    assert kinds(res) == [("below_min", 2), ("above_max", 4), ("below_min", 8)]
    a = res["alerts"][0]
    assert a["metric"] == "tok_s" and a["value"] == 14000.0 and a["limit"] == 14500.0
    # The "throughput" alias means the main throughput metric, whatever the log calls it.
    assert kinds(scan(log, min={"throughput": 14500})) == [("below_min", 2), ("below_min", 8)]
    # Names are normalised like metrics: tok/s is tok_s.
    assert kinds(scan(log, min={"tok/s": 14500}))[0] == ("below_min", 2)


def test_drop_below_a_fraction_of_the_early_median(tmp_path):
    log = tmp_path / "train.log"
    toks = [14000, 14600, 14500, 14400, 14550] + [14500, 7000, 7100, 14500, 7000, 6900, 6800,
                                                  6000, 14400, 7000, 7000, 7000]
    log.write_text("".join("step %d loss 2.0 tok/s %d\n" % (i, t) for i, t in enumerate(toks)))
    res = scan(log, drop_fraction=0.5, drop_points=3, early_points=5)
    # Median of the first 5 is 14500; 7000 < 7250. Two low points then a recovery: nothing.
    # Three in a row (lines 10-12): one alert, not again at line 13; recovery re-arms.
    assert kinds(res) == [("drop", 12), ("drop", 17)]
    a = res["alerts"][0]
    assert a["metric"] == "tok_s" and a["median"] == 14500 and a["value"] == 6800.0
    assert kinds(scan(log, drop_fraction=0, early_points=5)) == []
    # Loss falling to half is training working, not a drop: only the throughput is watched
    # unless drop_metrics says otherwise.
    log.write_text("".join("step %d loss %.2f\n" % (i, 4.0 - i * 0.3) for i in range(12)))
    assert scan(log, early_points=3)["alerts"] == []
    assert kinds(scan(log, early_points=3, drop_metrics=["loss"])) == [("drop", 11)]


def test_drop_state_carries_across_scans(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join("tok/s %d\n" % 1000 for _ in range(4)))
    r1 = scan(log, early_points=4)
    assert r1["state"]["tracked"]["tok_s"]["med"] == 1000
    with open(log, "a") as f:
        f.write("tok/s 100\ntok/s 100\n")
    r2 = scan(log, r1["state"], early_points=4)
    assert r2["alerts"] == []
    with open(log, "a") as f:
        f.write("tok/s 100\n")
    assert kinds(scan(log, r2["state"], early_points=4)) == [("drop", 7)]


def test_drop_median_only_learns_the_median_and_changes_nothing_else(tmp_path):
    # The attempt's own scan (ops/health.py) runs the drop rule for its early median alone:
    # once it is known the values are no longer checked for drops, and every other answer
    # (points, NaN alerts after the median, events, the median itself) is the full rule's.
    log = tmp_path / "train.log"
    lines = []
    for i in range(40):
        tok = 14000 + i if i < 20 else 5000
        loss = "nan" if i in (25, 26) else "%.2f" % (3 - i * 0.01)
        lines.append("step %d loss %s tok/s %d iter_ms %d\n" % (i, loss, tok, 300 + i))
        if i == 30:
            lines.append("RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n")
    log.write_text("".join(lines))
    for extra in ({}, {"drop_metrics": ["tok_s", "iter_ms"]}):
        full = scan(log, early_points=5, **extra)
        only = scan(log, early_points=5, drop_median_only=True, **extra)
        assert ("drop", 23) in kinds(full)
        assert kinds(only) == [k for k in kinds(full) if k[0] != "drop"]
        assert ("nan", 26) in kinds(only) and ("cuda_oom", 32) in kinds(only)
        assert only["points"] == full["points"] and only["units"] == full["units"]
        assert {k: v["med"] for k, v in only["state"]["tracked"].items()} == \
            {k: v["med"] for k, v in full["state"]["tracked"].items()}
        assert only["state"]["tracked"]["tok_s"]["med"] == 14002
    # Across calls: a median learnt in one call is kept; the next call checks nothing more.
    r1 = scan(log, early_points=5, drop_median_only=True, max_bytes=120)
    state = r1["state"]
    while True:
        r = scan(log, state, early_points=5, drop_median_only=True, max_bytes=120)
        state = r["state"]
        if not r["more"]:
            break
    assert state["tracked"]["tok_s"]["med"] == 14002


def test_event_bursts_coalesce_until_training_goes_on(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("NCCL WARN a\nNCCL WARN b\nstep 1 loss 2.0\nNCCL WARN c\n")
    res = scan(log)
    assert kinds(res) == [("nccl", 1), ("nccl", 4)]
    assert res["alerts"][0]["repeats"] == 1


# --------------------------------------------------------------------------- agent fit

PKG = Path(lm.__file__).resolve().parent
PUBLIC = {"scan", "is_loss", "is_throughput", "throughput_metric", "norm_name", "parse_line",
          "json_value", "EVENT_RE", "TS_RE", "is_inverse", "inverse_rate"}


def _package_files():
    files = sorted(PKG.glob("*.py"))
    assert PKG.name == "logmetrics" and len(files) > 1 and PKG / "__init__.py" in files
    return files


def test_package_fits_the_agent():
    """The parser ships inside the agent: stdlib only, Python 3.8 syntax, relative imports
    only of its own modules (it runs as runward.agent.logmetrics here and as
    runward_agent.logmetrics on targets, and needs nothing else of the agent); its names
    carry no lm_ prefix any more, none is defined twice in a module, and __init__ only
    re-exports the public API."""
    own = {p.stem for p in _package_files()}
    stdlib = set(getattr(sys, "stdlib_module_names", ())) or {
        "calendar", "collections", "math", "os", "re", "time"}
    for path in _package_files():
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in own, (path.name, node.module)
            elif isinstance(node, ast.ImportFrom):
                assert node.module.split(".")[0] in stdlib, (path.name, node.module)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name.split(".")[0] in stdlib, (path.name, a.name)
        defined = set()
        for node in tree.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name not in defined, f"{path.name}: {node.name} defined twice"
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            for name in names:
                assert not name.startswith(("lm_", "Lm", "LM_")), f"{path.name}: {name}"
                defined.add(name)
    init = ast.parse((PKG / "__init__.py").read_text())
    for node in init.body:
        assert isinstance(node, (ast.Expr, ast.ImportFrom, ast.Assign)), ast.dump(node)
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 and {a.name for a in node.names} <= PUBLIC
    assert set(lm.__all__) == PUBLIC and all(hasattr(lm, name) for name in PUBLIC)


def _python38():
    for cand in (shutil.which("python3.8"),
                 os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python")):
        if cand and os.path.exists(cand):
            try:
                out = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            if out.strip() == "(3, 8)":
                return cand
    return None


PY38 = _python38()


@pytest.mark.skipif(PY38 is None, reason="no Python 3.8 on this machine")
def test_runs_on_python_38(tmp_path):
    """The agent's floor is Python 3.8: the package runs there, not only parses, under the
    name it has on targets and with nothing of runward beside it."""
    shutil.copytree(PKG, tmp_path / "runward_agent" / "logmetrics",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "runward_agent" / "__init__.py").write_text("")
    code = ("import json, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "before = set(sys.modules)\n"
            "from runward_agent import logmetrics as m\n"
            "r = m.scan(sys.argv[2], {}, {'min': {'tok_s': 1}}, 1.7e9)\n"
            "new = sorted(set(k.split('.')[0] for k in set(sys.modules) - before))\n"
            "print(json.dumps([len(r['points']), [a['kind'] for a in r['alerts']], new]))\n")
    out = subprocess.run([PY38, "-I", "-c", code, str(tmp_path), str(LOGS / "cuda_oom.log")],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    points, kinds_, imported = json.loads(out)
    assert [points, kinds_] == [1, ["cuda_oom"]]
    stdlib = set(getattr(sys, "stdlib_module_names", ())) or set(imported) - {"runward_agent"}
    assert "runward_agent" in imported and not set(imported) - stdlib - {"runward_agent"}


def test_progress_bar_redrawn_in_place_is_read_as_it_goes(tmp_path):
    """Lightning/tqdm to a file: one "line" per epoch, redrawn with carriage returns. Its
    finished redraws are read at once, past 64 KiB too, and only once."""
    log = tmp_path / "train.log"
    bar = "\rEpoch 0:  %2d%%|###       | %d/5000 [00:%02d<01:40, 5.42it/s, loss=%s, v_num=0]"
    text = "".join(bar % (i // 50, i, i % 60, "2.31" if i < 1900 else "nan")
                   for i in range(2000))
    assert len(text) > 128 << 10 and "\n" not in text
    log.write_text(text)
    r1 = scan(log, alive=True)
    assert r1["lines"] == 0 and len(r1["state"]["carry"]) < 200  # only the last redraw
    assert kinds(r1) == [("nan", 1)]
    assert r1["points"][-1]["metrics"]["loss"] == "nan"
    assert r1["points"][-1]["metrics"]["progress"] == 39.0  # redraw 1999 is unfinished
    assert r1["last_line"].startswith("Epoch 0:  39%")
    with open(log, "a") as f:
        f.write(bar % (40, 2000, 0, "1.50") + "\n")
    r2 = scan(log, r1["state"], alive=True)
    assert r2["lines"] == 1 and r2["alerts"] == []
    assert [p["line"] for p in r2["points"]] == [1, 1]  # the last two redraws of line 1
    assert r2["points"][-1]["metrics"]["loss"] == 1.5


def test_a_setting_named_like_nan_is_no_nan(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("init pid=1 switches=TRAIN_NAN_AT=10,TRAIN_STEP_SECONDS=0.05\n"
                   "step 1 loss 2.5 tok/s 14000\n"
                   " iteration 10/ 100 | lm loss: 7.1E+00 | number of nan iterations:   2 |\n")
    res = lm.scan(str(log), {}, {}, 1.7e9)
    assert [(a["kind"], a["line_no"]) for a in res["alerts"]] == [("nan", 3)]
