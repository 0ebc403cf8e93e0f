#!/usr/bin/env python3
"""The first `runward status NAME --json` of a running run whose log is big, against
`grep -c` of the same file, in the same run: what the user waits for, the CLI's whole call.

    python bench/status_first.py [--mb 400] [--repeat 3] [--ranks 8] [--pyc] [--rt]

Writes a log of rank-prefixed training lines (`[rank3]: step 120 | loss 2.31 | tok/s 14,512
| ...`, torchrun's `[default3]:` prefix on some, chatter, a warning now and then) into a
temporary directory, then, --repeat times: starts a run on this machine whose job `cat`s
that file into its log and sleeps (running), waits until the whole file is in the log, and
times `runward status NAME --json` (its first status: nothing of the log read before; on more
than one core its skim forks, logmetrics/skimfork.py: `taskset -c 0` shows one core's);
and `grep -c step LOG` on the same log. Prints the best of each and the ratio (goal <= 3x).
Everything lives in the temporary directory (RUNWARD_HOME too); each run is stopped.

The CLI runs from this checkout's src/, as the environment has it: where
PYTHONDONTWRITEBYTECODE is set (this machine) every call compiles the ~80 modules a status
imports (~0.1 s of CPU). `pip install` writes the .pyc files whatever that variable says
(python -m compileall at install): --pyc runs the CLI from a copy of src/ compiled so, what
an installed runward costs. The output says which.

--rt (root): the two timed commands, and what they fork, run under SCHED_FIFO (`chrt -f
10`), ahead of every ordinary process: on a machine other work keeps busy, the wall of a
quiet one with the same cores (caches and memory bandwidth are still shared). The rest
(the log's writing, start, stop) runs as usual."""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_log(path, size, ranks, seed=0):
    rng = random.Random(seed)
    lines = []
    for step in range(256):
        for r in range(ranks):
            pre = "[rank%d]:" % r if step % 3 else "[default%d]:[rank%d]:" % (r, r)
            loss = 2.0 + rng.random()
            lines.append("%s step %d | loss %.4f | tok/s %s | lr 3.0e-04 | grad_norm %.3f | mem 31.72GiB"
                         % (pre, step, loss, format(int(14000 + rng.random() * 1000), ","), rng.random()))
            if rng.random() < 0.02:
                lines.append("%s [W reducer.cpp:1360] Warning: find_unused_parameters=True was specified" % pre)
    block = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as f:
        while f.tell() + len(block) <= size:
            f.write(block)
    return os.path.getsize(path)


def best_of(times):
    return min(times)


def _children_cpu():
    """User + system CPU seconds of this process's waited-for children so far."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _compiled_copy(src, dest):
    """A copy of SRC's runward package under DEST with each module's .pyc, as pip install
    compiles them (compileall, the interpreter's own cache tag)."""
    import compileall
    shutil.copytree(os.path.join(src, "runward"), os.path.join(dest, "runward"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    if not compileall.compile_dir(dest, quiet=1):
        sys.exit("error: compileall failed in %s" % dest)
    return dest


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--pyc", action="store_true",
                    help="the CLI from a copy of src/ with its .pyc files, as pip install leaves it")
    ap.add_argument("--rt", action="store_true",
                    help="time status and grep under SCHED_FIFO (chrt -f 10, root): a quiet machine's wall on a busy one")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="runward-status-bench-")
    code = os.path.join(ROOT, "src")
    if args.pyc:
        code = _compiled_copy(code, os.path.join(tmp, "site"))
    env = dict(os.environ, RUNWARD_HOME=os.path.join(tmp, "home"),
               PYTHONPATH=code + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("RUNWARD_CONFIG", None)
    cli = [sys.executable, "-m", "runward"]
    timed = ["chrt", "-f", "10"] if args.rt else []  # the timed commands only: see --rt
    try:
        src = os.path.join(tmp, "train.out")
        size = write_log(src, int(args.mb * 1e6), args.ranks)
        t_status, t_grep, c_status, c_grep = [], [], [], []
        for i in range(args.repeat):
            name = "big%d" % i
            p = subprocess.run(cli + ["start", name, "--settle", "0", "--json", "--sh",
                                      "cat %s; exec sleep 600" % src], env=env, cwd=tmp,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if p.returncode != 0:
                sys.exit("error: start failed: %s" % p.stdout + p.stderr)
            log = json.loads(p.stdout)["result"]["log"]
            deadline = time.time() + 120
            while os.path.getsize(log) < size:
                if time.time() > deadline:
                    sys.exit("error: the job did not write the whole file")
                time.sleep(0.05)
            t0, c0 = time.perf_counter(), _children_cpu()
            p = subprocess.run(timed + cli + ["status", name, "--json"], env=env, cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            t_status.append(time.perf_counter() - t0)
            c_status.append(_children_cpu() - c0)
            doc = json.loads(p.stdout)
            run = doc["result"]["runs"][0]
            if p.returncode != 0 or run["state"] != "running":
                sys.exit("error: status: %s" % p.stdout[:500])
            t0, c0 = time.perf_counter(), _children_cpu()
            subprocess.run(timed + ["grep", "-c", "step", log], stdout=subprocess.PIPE, check=True)
            t_grep.append(time.perf_counter() - t0)
            c_grep.append(_children_cpu() - c0)
            subprocess.run(cli + ["stop", name, "--grace", "1"], env=env, cwd=tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
            os.unlink(log)
        ts, tg = best_of(t_status), best_of(t_grep)
        print("log: %.0f MB of rank-prefixed lines (%d ranks); main metrics %s"
              % (size / 1e6, args.ranks, ", ".join((run.get("health") or {}).get("main_metrics") or [])))
        print("CLI: %s" % ("a copy of src/ with .pyc files, as pip install leaves it (--pyc)" if args.pyc else
                           "src/ as is, .pyc %s" % ("not written (PYTHONDONTWRITEBYTECODE set): each call compiles"
                                                    if os.environ.get("PYTHONDONTWRITEBYTECODE") else
                                                    "written to __pycache__ by the first call")))
        print("machine: %d cores this process may run on (the skim's search forks over up to 8 of them), "
              "load average %.1f %.1f %.1f%s" % ((len(os.sched_getaffinity(0)),) + os.getloadavg() + (
                  "; status and grep timed under SCHED_FIFO (--rt): a quiet machine's wall" if args.rt else "",)))
        print("status --json:  %7.3f s  (each: %s)" % (ts, ", ".join("%.3f" % t for t in t_status)))
        print("grep -c step:   %7.3f s  (each: %s)" % (tg, ", ".join("%.3f" % t for t in t_grep)))
        print("ratio:          the first status takes %.1fx the time of grep -c (best of %d each; goal <= 3x)"
              % (ts / tg, args.repeat))
        print("CPU (user+sys): status %.3f s, grep -c %.3f s: %.1fx (what a loaded machine's wall time blurs)"
              % (min(c_status), min(c_grep), min(c_status) / max(min(c_grep), 1e-3)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
