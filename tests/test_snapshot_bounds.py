"""The bounds of the text runward keeps per attempt for compare's diffs (issue 30), set in
runward.toml: snapshots = { file_max, attempt_max, keep_attempts }. Ground truth: the files
under the run's snapshots/ directory on the target (by sha256 of the bytes written), and
the attempt record's reasons; bad values are exit 2 naming the key, before anything starts."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from conftest import CLI, wait_for


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _setup(cli: CLI, name: str, bounds: str, files: dict[str, bytes]) -> None:
    for fn, data in files.items():
        (cli.cwd / fn).write_bytes(data)
    deployed = ", ".join(f'"{fn}:{cli.cwd / fn}"' for fn in sorted(files))
    (cli.cwd / "runward.toml").write_text(
        f'[runs.{name}]\ncommand = ["python3", "-c", "pass"]\ncwd = "{cli.cwd}"\nsettle = 0\n'
        f'files = [{deployed}]\nsnapshots = {bounds}\n')


def _start(cli: CLI, name: str, n: int) -> dict:
    rc, doc = cli.json("restart" if n > 1 else "start", name)
    assert rc == 0, doc
    wait_for(lambda: (lambda s: s["attempt"] == n and s["state"] == "exited")(cli.status(name)),
             timeout=60, what=f"attempt {n} of {name} to end")
    rec = cli.home / "runs" / name / "attempts" / f"{n}.json"
    import json
    return json.loads(rec.read_text())["snapshots"]


def _kept(cli: CLI, name: str) -> set[str]:
    d = cli.home / "runs" / name / "snapshots"
    return {p.name for p in d.iterdir() if not p.name.startswith(".")} if d.exists() else set()


def test_file_max_skips_a_larger_file_and_keeps_a_smaller_one(cli):
    name = f"sf{uuid.uuid4().hex[:6]}"
    small, big = b"x = 1\n" * 100, b"y = 2\n" * 400  # 600 B and 2400 B
    _setup(cli, name, '{ file_max = "1K" }', {"small.py": small, "big.py": big})
    snap = _start(cli, name, 1)
    assert _kept(cli, name) == {_sha(small)}, snap
    assert "file_max" in snap["skipped"][str(cli.cwd / "big.py")] and snap["bounds"]["file_max"] == 1024, snap


def test_attempt_max_stops_keeping_once_the_attempts_total_is_reached(cli):
    name = f"sa{uuid.uuid4().hex[:6]}"
    a, b = b"a = 1\n" * 150, b"b = 2\n" * 150  # 900 B each: one fits in 1.5K, not both
    _setup(cli, name, '{ attempt_max = "1.5K" }', {"a.py": a, "b.py": b})
    snap = _start(cli, name, 1)
    assert _kept(cli, name) == {_sha(a)}, snap  # sorted by path: a.py first
    assert "attempt_max" in snap["skipped"][str(cli.cwd / "b.py")], snap


def test_keep_attempts_removes_the_text_of_older_attempts(cli):
    name = f"sk{uuid.uuid4().hex[:6]}"
    versions = [b"v = %d\n" % i for i in range(1, 4)]
    _setup(cli, name, "{ keep_attempts = 2 }", {"t.py": versions[0]})
    for n, data in enumerate(versions, 1):
        (cli.cwd / "t.py").write_bytes(data)
        _start(cli, name, n)
    assert _kept(cli, name) == {_sha(versions[1]), _sha(versions[2])}  # attempt 1's text is gone
    rc, doc = cli.json("compare", name, "1", "3")
    assert rc == 0 and "why" in doc["result"]["diffs"][str(cli.cwd / "t.py")], doc  # said, not a wrong diff
    rc, doc = cli.json("rm", name)
    assert rc == 0 and not (cli.home / "runs" / name).exists(), doc


@pytest.mark.parametrize("bounds, key", [
    ('{ file_max = "huge" }', "snapshots.file_max"),
    ('{ attempt_max = 10 }', "snapshots.attempt_max"),
    ('{ keep_attempts = 0 }', "snapshots.keep_attempts"),
    ('{ keep = 3 }', "keep"),
])
def test_a_bad_bound_is_exit_2_naming_the_key(cli, bounds, key):
    name = f"sb{uuid.uuid4().hex[:6]}"
    _setup(cli, name, bounds, {"t.py": b"pass\n"})
    rc, doc = cli.json("start", name)
    assert rc == 2 and key in doc["error"]["message"] and f"[runs.{name}]" in doc["error"]["message"], doc
    assert doc["error"]["hint"], doc
    assert not (cli.home / "runs" / name).exists()
