"""Review s6 (hostile, black box): what changed on main since ac9e13a.

runward.toml with one run's table holding a bad declared value while that run runs: every verb
either works or refuses with exit 2 naming the file, table and key -- never a traceback -- and the
running job is untouched by each refusal (pid + start time from /proc).
"""
from __future__ import annotations

import uuid

import pytest

from conftest import alive, marked

JOB = 'command = ["python3", "-c", "import time\\nprint(1, flush=True)\\ntime.sleep(600)"]\nsettle = 0.3\n'
# review s6: runward.toml's log_keep = 0 (no log_max) made `start NAME` refuse with '--log-keep
# without --log-max' -- a flag the user never gave, naming neither runward.toml, the table nor the key
LOG_KEEP = "log_keep = 0"
# watch is left out (it supervises until stopped: on a good run it never returns), top has no --once, plot refuses a log with no metric (rightly)
BAD = ("settle = -1", 'grace = "abc"', 'stop_signal = "TERMM"', 'ready = "("', LOG_KEEP,
       "nproc_per_node = 0", "cwd = 5")


@pytest.mark.parametrize("bad", BAD)
def test_every_verb_on_a_file_with_one_bad_table_works_or_refuses_cleanly(cli, bad):
    name, other = f"rv6{uuid.uuid4().hex[:6]}", f"rv6o{uuid.uuid4().hex[:6]}"
    good = f"[runs.{name}]\n{JOB}\n[runs.{other}]\n{JOB}"
    (cli.cwd / "runward.toml").write_text(good)
    for n in (name, other):
        rc, doc = cli.json("start", n)
        assert rc == 0, doc
    job = next(iter(marked(f"{name}.1").items()))
    bad_table = f"[runs.{name}]\n" + JOB.replace("settle = 0.3\n", "") + f"{bad}\n"
    (cli.cwd / "runward.toml").write_text(good.replace(f"[runs.{name}]\n{JOB}", bad_table, 1))
    key = bad.split(" ")[0]
    try:
        for args in (("status", name), ("logs", name), ("history", name), ("status", other),
                     ("logs", other), ("history", other), ("compare", name, "1", "1"), ("compare", other, "1", "1"), ("stacks", other),
                     ("status",), ("rm", name), ("prune", "--older-than", "1s"), ("start", name), ("restart", name),
                     ("deploy", name)):
            p = cli.run(*args, "--json", timeout=60)
            assert "Traceback" not in p.stderr + p.stdout, (args, bad, p.stderr[-2000:])
            assert p.returncode in (0, 1, 2, 4, 5), (args, bad, p.returncode, p.stderr[-800:])
            if p.returncode == 2:
                assert key in p.stdout + p.stderr and "runward.toml" in p.stdout + p.stderr, (args, bad, p.stdout)
            assert alive(*job), f"{args} with {bad!r} touched the running job ({p.returncode})"
        rc, doc = cli.json("stop", "--all", "--grace", "2")
        assert rc == 0, (bad, doc)
        assert not alive(*job), f"stop --all with {bad!r} left {name} running"
    finally:
        (cli.cwd / "runward.toml").write_text(good)
        cli.json("stop", "--all", "--grace", "2")
