"""history and compare of an attempt whose log section is longer than the 16 MiB parsed
(agent/health/attempts.py SECTION_MAX): the last step and loss are the log's own last ones,
and the partial parse is said, in text and JSON. Ground truth: the job's log file."""

from __future__ import annotations

import re
import uuid

from conftest import CLI, wait_for

JOB = """import os
import sys
n = int(os.environ["LINES"])
chunk = []
for i in range(n):
    chunk.append("step %d loss %.6g tok_s %d\\n" % (i, 1.0 / (i + 1), 1000 + i % 7))
    if len(chunk) == 100000:
        sys.stdout.write("".join(chunk))
        chunk = []
sys.stdout.write("".join(chunk))
"""


def _last_line(path) -> str:
    with open(path, "rb") as f:
        f.seek(-200, 2)
        return f.read().decode().rstrip("\n").rsplit("\n", 1)[-1]


def test_history_of_a_log_past_16_mib_gives_its_last_step_and_loss(cli: CLI):
    """600K lines (~23 MiB): history said the step and loss of the line at 16 MiB (step 4xxxxx)
    while the log ends at step 599999; nothing said only part of it was read. A second, small
    attempt (LINES=50) is parsed whole and says nothing partial."""
    name = f"big{uuid.uuid4().hex[:6]}"
    (cli.cwd / "big.py").write_text(JOB)
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "big.py"]\ncwd = "{cli.cwd}"\nsettle = 0\n'
        'env = { LINES = "600000" }\n')
    assert cli.run("start", name).returncode == 0
    wait_for(lambda: cli.status(name)["state"] == "exited", timeout=120, what="the job's exit")
    last = re.fullmatch(r"step (\d+) loss (\S+) tok_s \d+", _last_line(cli.status(name)["log"]["path"]))
    assert last and last.group(1) == "599999", last
    assert cli.run("restart", name, "--env", "LINES=50").returncode == 0
    wait_for(lambda: cli.status(name)["state"] == "exited", timeout=60, what="attempt 2's exit")
    rc, doc = cli.json("history", name)
    assert rc == 0, doc
    big, small = doc["result"]["attempts"]
    assert big["steps"] == int(last.group(1)), big
    assert big["loss"]["last"] == float(last.group(2)), big
    assert big["throughput"]["metric"] == "tok_s" and big["throughput"]["median"] is not None, big
    assert big["log_partial"] == 16 << 20 and big["log_bytes"] > 16 << 20, big
    assert small["steps"] == 49 and "log_partial" not in small and "log_bytes" not in small, small
    lines = cli.run("history", name).stdout.splitlines()
    assert f"step {last.group(1)}" in lines[0] and f"loss {last.group(2)}" in lines[0], lines
    assert "log partial" in lines[0] and "log partial" not in lines[1], lines
    rc, cmp = cli.json("compare", name)
    assert rc == 0, cmp
    a, b = cmp["result"]["attempts"]
    assert a["steps"] == int(last.group(1)) and a["log_partial"] and "log_partial" not in b, cmp["result"]
