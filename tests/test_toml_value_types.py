"""runward.toml's gpus and env hold the values the library takes, or the start is refused: the
CLI reading a [runs.X] table refuses what `runward.start(gpus=..., env=...)` refuses (exit 2,
nothing started), so no job sees a GPU index or an environment value that no one wrote.
Checked against /proc (the job's CUDA_VISIBLE_DEVICES and environment) and the run's records.

Found by the review of issue 40's typed middle: the flag and the library check gpus and env's
shapes (spec/apivalues.py), runward.toml's table reaches the start without that check."""
from __future__ import annotations

import pytest

from conftest import fresh_name, marked, nothing_started

SLEEP = '["python3", "-c", "import time; time.sleep(600)"]'


def _environ(pid: int) -> dict:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [w.split(b"=", 1) for w in f.read().split(b"\0") if b"=" in w]
    return {k.decode(): v.decode() for k, v in pairs}


def _start_from_table(cli, name: str, line: str):
    (cli.cwd / "runward.toml").write_text(f"[runs.{name}]\ncommand = {SLEEP}\nsettle = 0.3\n{line}\n")
    return cli.json("start", name)


# (the table's line, the library's keyword it mirrors): the library refuses each
BAD_GPUS = [
    ("gpus = [true]", {"gpus": [True]}),
    ("gpus = [1.5]", {"gpus": [1.5]}),
]


@pytest.mark.parametrize("line,kw", BAD_GPUS, ids=[b[0] for b in BAD_GPUS])
def test_toml_gpus_that_the_library_refuses_are_refused_not_read_as_another_index(cli, lib, line, kw):
    name = fresh_name("tvg")
    res = lib.start(name, ["python3", "-c", "import time; time.sleep(600)"], settle=0.3, **kw)
    assert res.exit_code == 2, res.to_json()
    rc, doc = _start_from_table(cli, name, line)
    jobs = marked(name + ".")
    seen = [_environ(pid).get("CUDA_VISIBLE_DEVICES") for pid in jobs]
    assert rc == 2 and doc["error"]["type"] == "BadInput", (
        f"{line!r} started a job with CUDA_VISIBLE_DEVICES={seen} (exit {rc}); the library refuses {kw}")
    assert "gpus" in doc["error"]["message"], doc
    nothing_started(cli, name)


BAD_ENV = [
    ("env = { A = true }", {"env": {"A": True}}),
    ("env = { A = [1] }", {"env": {"A": [1]}}),
    ("env = { A = { B = \"1\" } }", {"env": {"A": {"B": "1"}}}),
]


@pytest.mark.parametrize("line,kw", BAD_ENV, ids=[b[0] for b in BAD_ENV])
def test_toml_env_values_that_are_not_text_are_refused_not_passed_as_python_words(cli, lib, line, kw):
    name = fresh_name("tve")
    res = lib.start(name, ["python3", "-c", "import time; time.sleep(600)"], settle=0.3, **kw)
    assert res.exit_code == 2, res.to_json()
    rc, doc = _start_from_table(cli, name, line)
    jobs = marked(name + ".")
    seen = [_environ(pid).get("A") for pid in jobs]
    assert rc == 2 and doc["error"]["type"] == "BadInput", (
        f"{line!r} started a job that sees A={seen} (exit {rc}); the library refuses {kw}")
    assert "env" in doc["error"]["message"] and "A" in doc["error"]["message"], doc
    nothing_started(cli, name)
