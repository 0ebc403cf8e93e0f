#!/usr/bin/env python3
"""Parsing throughput of runward's log scanner against `grep -c` on the same file.

    PYTHONPATH=src python bench/parse_bench.py [--lines 2000000] [--repeat 3] [--keep]
    PYTHONPATH=src python bench/parse_bench.py --status-gib 1 [--repeat 3]

Writes a synthetic training log of mixed real shapes (plain `step N loss X tok/s Y`, Hugging
Face Trainer dicts and tqdm bars, DeepSpeed, Megatron-LM, vLLM, nanoGPT, fairseq, timm, JSON
lines, chatter without numbers) into a temporary directory, then times, best of --repeat:
  - logmetrics.scan over the whole file in one call (max_bytes above the file size), and
  - `grep -c step FILE`, the floor any line-oriented reader is compared with.
Prints lines/s and MB/s for both and the ratio. Nothing leaves the temporary directory.

--status-gib N times instead the first `status` of an N GiB log: the agent's own scan of the
attempt's facts (health/facts.fact_rules: the newest FULL_BYTES parsed line by line, the rest
skimmed for events and NaN), with a CUDA OOM written 100 MB from the end, which it must find.
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

try:
    from runward.agent import logmetrics as _lm  # the parser the agent runs
except ImportError:  # run from a checkout without PYTHONPATH=src
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    from runward.agent import logmetrics as _lm


def shapes(rng, step):
    """One block of lines, in the proportions a mixed real log has."""
    loss = 2.0 + rng.random()
    tok = 14600 + rng.random() * 800
    pct = step % 100
    return [
        "step %d loss %.4f tok/s %.1f lr %.1e" % (step, loss, tok, 3e-4),
        "step %d | loss %.3f | tok/s %s | grad_norm %.3f" % (step, loss, format(int(tok), ","), rng.random()),
        "{'loss': %.4f, 'grad_norm': %.4f, 'learning_rate': %.3e, 'epoch': %.2f}"
        % (loss, rng.random() * 3, 4.9e-5, step / 1000.0),
        " %2d%%|%-10s| %d/10000 [01:23<01:40,  %.2fit/s]" % (pct, "#" * (pct // 10), step, 5 + rng.random()),
        "[2024-05-01 12:%02d:%02d,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=%d, skipped=0, "
        "lr=[0.0003], mom=[[0.9, 0.95]]" % (step // 60 % 60, step % 60, step),
        " iteration %8d/  500000 | consumed samples: %12d | elapsed time per iteration (ms): %.1f | "
        "learning rate: 1.500E-04 | global batch size:  1024 | lm loss: %.6E | loss scale: 1.0 | "
        "grad norm: %.3f | number of skipped iterations:   0 | number of nan iterations:   0 |"
        % (step, step * 1024, 1200 + rng.random() * 100, loss, rng.random()),
        "INFO 05-01 12:00:%02d metrics.py:449] Avg prompt throughput: %.1f tokens/s, Avg generation "
        "throughput: %.1f tokens/s, Running: 5 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache "
        "usage: 2.0%%, CPU KV cache usage: 0.0%%." % (step % 60, rng.random() * 100, tok / 10),
        "iter %d: loss %.4f, time %.2fms, mfu %.2f%%" % (step, loss, 120 + rng.random(), 35 + rng.random()),
        "2024-05-01 12:00:00 | INFO | train_inner | epoch 001:    %d / 487 loss=%.3f, nll_loss=%.3f, "
        "ppl=15.05, wps=%.1f, ups=3.41, wpb=3481.5, bsz=128, num_updates=%d, lr=1.25e-05, gnorm=1.802, "
        "train_wall=29, gb_free=10.1, wall=40" % (step % 487, loss, loss - 0.7, tok, step),
        "Train: 1 [%4d/1251 ( %2d%%)]  Loss: %.4f (%.3f)  Time: 0.392s, 2612.24/s  (0.470s, 2178.72/s)  "
        "LR: 1.000e-04  Data: 0.012 (0.072)" % (step % 1251, pct, loss, loss),
        '{"epoch": 3, "loss": "%.3f", "nll_loss": "1.328", "ppl": "2.51", "wps": %d, "num_updates": %d}'
        % (loss, int(tok), step),
        "Saving model checkpoint to output/checkpoint",
        "Evaluating on the validation set, please wait",
    ]


def write_log(path, nlines, seed=0):
    rng = random.Random(seed)
    written = 0
    step = 0
    with open(path, "w") as f:
        while written < nlines:
            block = shapes(rng, step)
            block = block[: nlines - written]
            f.write("\n".join(block) + "\n")
            written += len(block)
            step += 1
    return written


def best_of(repeat, fn):
    best = None
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2000000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the temporary log and print its path")
    ap.add_argument("--status-gib", type=float, metavar="N", help="time the first status of an N GiB log")
    args = ap.parse_args(argv)
    if args.status_gib:
        return status_bench(args)
    tmp = tempfile.mkdtemp(prefix="runward-parse-bench-")
    try:
        path = os.path.join(tmp, "train.log")
        n = write_log(path, args.lines)
        size = os.path.getsize(path)
        rules = {"max_bytes": size + 1, "min": {"tok_s": 14500}, "max_points": 2000}

        def scan():
            return _lm.scan(path, {}, rules, time.time())

        t_scan, res = best_of(args.repeat, scan)
        if res["lines"] != n or res["more"]:
            sys.exit("error: scanned %d of %d lines" % (res["lines"], n))
        grep = shutil.which("grep")

        def run_grep():
            return subprocess.run([grep, "-c", "step", path], stdout=subprocess.PIPE, check=True)

        t_grep, _ = best_of(args.repeat, run_grep)
        mb = size / 1e6
        print("log: %d lines, %.1f MB, %d points parsed (%d kept), %d alerts"
              % (n, mb, res["points_dropped"] + len(res["points"]), len(res["points"]),
                 len(res["alerts"])))
        print("lm_scan:  %8.3f s  %12.0f lines/s  %8.1f MB/s" % (t_scan, n / t_scan, mb / t_scan))
        print("grep -c:  %8.3f s  %12.0f lines/s  %8.1f MB/s" % (t_grep, n / t_grep, mb / t_grep))
        print("ratio:    lm_scan takes %.1fx the time of grep -c (best of %d each)"
              % (t_scan / t_grep, args.repeat))
        if args.keep:
            print("kept:", path)
            tmp = None
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def write_big(path, size, oom_back):
    """SIZE bytes of mixed shapes, with a torch CUDA OOM traceback OOM_BACK bytes before the end."""
    rng = random.Random(0)
    block = ("\n".join(line for s in range(64) for line in shapes(rng, s)) + "\n").encode()
    oom = (b"Traceback (most recent call last):\n  File \"train.py\", line 7, in <module>\n"
           b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    with open(path, "wb") as f:
        while f.tell() + len(block) < size - oom_back:
            f.write(block)
        f.write(oom)
        while f.tell() + len(block) < size:
            f.write(block)


def status_bench(args):
    from runward.agent.health import facts as _health
    tmp = tempfile.mkdtemp(prefix="runward-parse-bench-")
    try:
        path = os.path.join(tmp, "train.log")
        write_big(path, int(args.status_gib * (1 << 30)), 100 * 10**6)
        size = os.path.getsize(path)
        rules = dict(_health.fact_rules({}), alive=True)

        def first_status():
            return _lm.scan(path, {}, rules, time.time())

        t_scan, res = best_of(args.repeat, first_status)
        kinds = sorted(set(a["kind"] for a in res["alerts"] if a["kind"] in _health.FACT_KINDS))
        if "cuda_oom" not in kinds or res["more"]:
            sys.exit("error: the first status missed the OOM 100 MB back (%s)" % kinds)
        grep = shutil.which("grep")
        t_grep, _ = best_of(args.repeat, lambda: subprocess.run([grep, "-c", "step", path],
                                                                stdout=subprocess.PIPE, check=True))
        print("log: %.2f GiB, %d lines; the first status found %s (%.0f MB skimmed, %.0f MB parsed)"
              % (size / float(1 << 30), res["lines"], ", ".join(kinds), res["bytes_skimmed"] / 1e6,
                 res["bytes_read"] / 1e6))
        print("status:   %8.3f s  %8.1f MB/s" % (t_scan, size / 1e6 / t_scan))
        print("grep -c:  %8.3f s  %8.1f MB/s" % (t_grep, size / 1e6 / t_grep))
        print("ratio:    the first status takes %.1fx the time of grep -c (best of %d each; goal <= 5x)"
              % (t_scan / t_grep, args.repeat))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
