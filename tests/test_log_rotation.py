"""Log rotation by size (log_max, log_keep): no line lost or doubled, the job never stopped,
and the parser, `logs` and `logs -f` following the log into its rotated files.

Real jobs writing fast through the real logger process; nothing mocked."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from conftest import alive, wait_for

SPAM = r'''
import os, sys, time
go, n = sys.argv[1], int(sys.argv[2])
while go != "-" and not os.path.exists(go):
    time.sleep(0.02)
for i in range(n):
    # a block buffer flushed every 64 lines: the logger reads chunks that end mid-line
    print("line %06d step %d loss %.4f" % (i, i, 2.5 - i * 1e-5), flush=(i % 64 == 0))
print("done", flush=True)
time.sleep(600)
'''
LINE = re.compile(r"^line (\d{6}) step")


def _files(log: Path) -> list[Path]:
    """log.N ... log.1, log: oldest first."""
    rotated = sorted(log.parent.glob(log.name + ".*"), key=lambda p: -int(p.suffix[1:]))
    return rotated + [log]


def _numbers(log: Path) -> list[int]:
    return [int(m.group(1)) for f in _files(log) for ln in f.read_text().splitlines() if (m := LINE.match(ln))]


def _done(log: Path) -> bool:
    try:  # the logger renames log to log.1 and then makes a new log: it may be absent a moment
        return log.read_text().rstrip().endswith("done")
    except FileNotFoundError:
        return False


def test_every_line_once_across_rotations_the_job_untouched_and_readers_follow(cli):
    (cli.cwd / "spam.py").write_text(SPAM)
    go = cli.cwd / "go"
    n = 20000
    rc, doc = cli.json("start", "spam", "--log-max", "64k", "--log-keep", "30", "--settle", "0.3",
                       "--cwd", str(cli.cwd), "--", "python3", "spam.py", str(go), str(n))
    assert rc == 0, doc
    pid, log = doc["result"]["pid"], Path(doc["result"]["log"])
    follower = cli.popen("logs", "spam", "-f", "-n", "0", "--for", "12")
    time.sleep(1.0)  # let the follower take its place at the end of the log before the lines come
    go.write_text("")
    wait_for(lambda: _done(log), timeout=60, what="the job's last line")

    nums = _numbers(log)
    assert nums == list(range(n)), "a line lost, doubled or out of order"
    files = _files(log)
    assert 2 <= len(files) - 1 <= 30, [f.name for f in files]
    for f in files[:-1]:
        data = f.read_bytes()
        assert data.endswith(b"\n") and len(data) <= 64 * 1024, (f.name, len(data))  # cut at a line's end
    assert alive(pid), "rotation must not stop the job"

    # the parser read the attempt from its first line, in the file it began in
    st = cli.status("spam")
    assert st["state"] == "running" and st["health"]["metrics"]["step"] == n - 1
    # `logs` across the rotated files: more lines than the current file holds
    rc, doc = cli.json("logs", "spam", "-n", "2000")
    got = [int(m.group(1)) for ln in doc["result"]["lines"] if (m := LINE.match(ln))]
    assert got == list(range(n - 1999, n)), (got[:3], got[-3:])
    # `logs -f` followed the log through every rotation: each line once, in order
    out, _ = follower.communicate(timeout=60)
    followed = [int(m.group(1)) for ln in out.splitlines() if (m := LINE.match(ln))]
    assert followed == list(range(n)), (len(followed), followed[:3])

    att = json.loads((cli.home / "runs" / "spam" / "attempts" / "1.json").read_text())
    logger = att["logger"]
    assert alive(logger["pid"], logger["start"])
    rc, doc = cli.json("stop", "spam")
    assert rc == 0 and doc["result"]["verified_dead"]
    wait_for(lambda: not alive(logger["pid"], logger["start"]), timeout=10,
             what="the logger to end once the job is gone")


def test_log_keep_drops_the_oldest_and_runward_toml_sets_rotation(cli, tmp_path):
    (cli.cwd / "spam.py").write_text(SPAM)
    (tmp_path / "runward.toml").write_text(
        f'[runs.keep2]\ncommand = ["python3", "spam.py", "-", "30000"]\ncwd = "{cli.cwd}"\nsettle = 0.3\n'
        'log_max = "16k"\nlog_keep = 2\n')
    rc, doc = cli.json("start", "keep2")
    assert rc == 0, doc
    log = Path(doc["result"]["log"])
    wait_for(lambda: _done(log), timeout=60, what="the job's last line")
    assert [f.name for f in _files(log)] == ["log.2", "log.1", "log"]
    nums = _numbers(log)
    assert nums == list(range(30000 - len(nums), 30000)), "the kept files hold the newest lines, none missing"
    rc, doc = cli.json("restart", "keep2", "--settle", "0.3")
    assert rc == 0, doc
    att = json.loads((cli.home / "runs" / "keep2" / "attempts" / "2.json").read_text())
    assert (att["log_max"], att["log_keep"]) == (16 * 1024, 2)  # restart keeps the rotation
    assert alive(att["logger"]["pid"], att["logger"]["start"])
    rc, _ = cli.json("stop", "keep2")
    assert rc == 0


def test_health_reads_the_attempt_from_its_first_line_across_rotations(cli):
    """The attempt began in a file rotated twelve times since: the parser's first scan
    starts there (the record keeps that file's identity), not in the middle of the newest."""
    (cli.cwd / "spam.py").write_text(SPAM)
    rc, doc = cli.json("start", "h", "--log-max", "4k", "--log-keep", "30", "--settle", "0.3", "--cwd", str(cli.cwd),
                       "--", "python3", "spam.py", "-", "1500")
    assert rc == 0, doc
    log = Path(doc["result"]["log"])
    wait_for(lambda: _done(log), timeout=60, what="the job's last line")
    assert len(_files(log)) > 10
    health = cli.status("h")["health"]
    assert health["points"] == 1500 and health["metrics"]["step"] == 1499, health
    rc, doc = cli.json("watch", "h", "--for", "1")  # watch reads on from there: healthy, nothing re-read
    assert rc == 0 and doc["result"]["healthy"] and doc["result"]["metrics"]["step"] == 1499, doc
    rc, _ = cli.json("stop", "h")
    assert rc == 0


def test_rotation_bad_input_is_exit_2(cli):
    for args, needle in ((["--log-max", "10"], "below 1K"), (["--log-max", "2X"], "invalid log_max"),
                         (["--log-keep", "2"], "--log-keep without --log-max")):
        rc, doc = cli.json("start", "bad", *args, "--", "sleep", "5")
        assert rc == 2 and needle in doc["error"]["message"], doc
    assert not (cli.home / "runs" / "bad").exists()


def test_a_rotation_while_the_rotated_names_are_opened_misses_no_file(tmp_path, monkeypatch):
    """chain() opens PATH, then PATH.1, PATH.2, ... by name. A rotation in between shifts
    every name by one (PATH.1 becomes PATH.2, ...): the file the reader was in must still be
    found, with every newer one after it. Seen in the full suite: `logs -f` under load skipped
    one whole file (about 3,850 lines)."""
    import os

    from runward.agent.logmetrics import reader
    log = tmp_path / "log"
    names = {}
    for i, tag in ((3, b"C"), (2, b"B"), (1, b"A")):
        p = tmp_path / f"log.{i}"
        p.write_bytes(tag * 10)
        names[tag] = p.stat().st_ino
    log.write_bytes(b"X" * 10)
    real_open, rotated_once = reader._open, []

    def open_and_rotate(p):
        f = real_open(p)
        if str(p).endswith("log.1") and not rotated_once:  # the logger rotates right now
            rotated_once.append(1)
            for i in (3, 2, 1):
                os.rename(tmp_path / f"log.{i}", tmp_path / f"log.{i + 1}")
            os.rename(log, tmp_path / "log.1")
            log.write_bytes(b"Y" * 10)
        return f

    class Cursor:
        ident = (names[b"C"], os.stat(tmp_path / "log.3").st_dev)

    monkeypatch.setattr(reader, "_open", open_and_rotate)
    files = reader.chain(str(log), Cursor(), from_oldest=True)
    try:
        got = [f.read(1) for f in files]
    finally:
        for f in files:
            f.close()
    assert rotated_once and got == [b"C", b"B", b"A", b"X", b"Y"], got


def test_a_rotation_at_every_try_reads_nothing_and_skips_nothing(tmp_path, monkeypatch):
    """A job filling log_max faster than chain() opens the names: every try sees a rotation.
    Then nothing is read this time and the reader stays where it was; never a closed file
    handed back (seen in CI: "ValueError: I/O operation on closed file", exit 3), never the
    files of a try the rotation disturbed (seen in CI: `logs -f` jumped from line 1,955 to
    13,417)."""
    from runward.agent.supervise import logfiles
    from runward.agent.logmetrics import reader, scan
    log = tmp_path / "log"
    (tmp_path / "log.1").write_bytes(b"A\n" * 10)
    log.write_bytes(b"X\n" * 10)
    real_open, opened = reader._open, []

    def open_and_rotate(p):
        f = real_open(p)
        if f is not None:
            opened.append(f)
        if str(p) == str(log):  # the logger rotates right after each open of the log
            n = max(int(q.suffix[1:]) for q in tmp_path.glob("log.*"))
            for i in range(n, 0, -1):
                os.rename(tmp_path / f"log.{i}", tmp_path / f"log.{i + 1}")
            os.link(log, tmp_path / "log.1")
            (tmp_path / "fresh").write_bytes(b"Y\n")
            os.rename(tmp_path / "fresh", log)
        return f

    class Cursor:
        ident = (-1, -1)  # rotated out of reach: from the oldest
    monkeypatch.setattr(reader, "_open", open_and_rotate)
    assert reader.chain(str(log), Cursor(), from_oldest=True) is None
    assert len([f for f in opened if f.name == str(log)]) == reader.CHAIN_TRIES
    assert all(f.closed for f in opened)

    opened.clear()
    oldest = max(tmp_path.glob("log.*"), key=lambda q: int(q.suffix[1:]))
    assert oldest.read_bytes() == b"A\n" * 10
    st = oldest.stat()
    pos = (st.st_ino, st.st_dev, 2, b"A\n")  # a follower two bytes into the oldest file
    assert logfiles.read_on(str(log), pos) == (b"", pos)
    assert all(f.closed for f in opened)

    state = {"ino": st.st_ino, "dev": st.st_dev, "offset": 2, "sig": b"A\n".hex()}
    out = scan(str(log), state, {}, time.time())
    assert out["lines"] == 0 and out["exists"] and out["reset"] is None, out
    assert (out["state"]["ino"], out["state"]["offset"]) == (st.st_ino, 2), out["state"]
    monkeypatch.undo()  # the names stand still again: the follower reads on from where it was
    got, data = b"", b"-"
    while data:
        data, pos = logfiles.read_on(str(log), pos)
        got += data
    files = sorted(tmp_path.glob("log.*"), key=lambda q: -int(q.suffix[1:])) + [log]
    assert got == b"".join(f.read_bytes() for f in files)[2:] and got.startswith(b"A\n" * 9 + b"X\n")


def _mid_rotation(tmp_path):
    """The names as a rotation leaves them halfway: log.3 -> log.4 and log.2 -> log.3 done,
    log.1 -> log.2 not yet, so log.2 is free a moment. Oldest first the files are C (log.4),
    B (log.3), A (log.1), X (log)."""
    log = tmp_path / "log"
    for name, tag in (("log.4", b"C"), ("log.3", b"B"), ("log.1", b"A"), ("log", b"X")):
        (tmp_path / name).write_bytes(tag * 4 + b"\n")
    return log


def test_a_follower_in_a_file_moved_past_a_free_name_reads_it_on(tmp_path):
    """The name shift of a rotation in progress leaves one name free; the follower's file sits
    above it. Seen in CI: `logs -f` jumped from line 1,955 to 13,417 of a log rotating by
    64k with log_keep 30 (the names were read only up to the free one, the follower's file was
    taken for rotated out of reach, and the newest files were read instead)."""
    from runward.agent.supervise import logfiles
    from runward.agent.logmetrics import reader
    log = _mid_rotation(tmp_path)
    st = (tmp_path / "log.3").stat()

    class Cursor:
        ident = (st.st_ino, st.st_dev)
    files = reader.chain(str(log), Cursor(), from_oldest=True)
    try:
        assert [f.read(1) for f in files] == [b"B", b"A", b"X"]
    finally:
        for f in files:
            f.close()
    assert reader.rotated(str(log)) == [str(tmp_path / n) for n in ("log.4", "log.3", "log.1")]

    pos, got = (st.st_ino, st.st_dev, 2, b"BB"), b""
    for _ in range(4):
        data, pos = logfiles.read_on(str(log), pos)
        got += data
    assert got == b"BB\nAAAA\nXXXX\n"
    assert logfiles.tail(str(log), 3) == ["BBBB", "AAAA", "XXXX"]


def test_the_parser_in_a_file_moved_past_a_free_name_reads_it_on(tmp_path):
    from runward.agent.logmetrics import scan
    log = tmp_path / "log"
    for name, first in (("log.4", 0), ("log.3", 10), ("log.1", 20), ("log", 30)):
        (tmp_path / name).write_text("".join("step %d loss 1.0\n" % i for i in range(first, first + 10)))
    st = (tmp_path / "log.3").stat()
    sig = (tmp_path / "log.3").read_bytes()[:len("step 10 loss 1.0\n")]
    state = {"ino": st.st_ino, "dev": st.st_dev, "offset": len(sig), "sig": sig.hex()}
    out = scan(str(log), state, {}, time.time())
    assert [p["metrics"]["step"] for p in out["points"]] == list(range(11, 40)), out["points"]


def test_the_log_is_never_missing_during_a_rotation(tmp_path, monkeypatch):
    """A reader that opens PATH at any moment of a rotation (`logs`, the parser, a user's
    `tail -F`) finds a file there: the full one is linked as PATH.1 and a new one renamed over
    PATH, never PATH renamed away first. Checked at every file-system call the rotation makes."""
    from runward.agent.supervise.logfiles import RotatingLog

    log = tmp_path / "log"
    missing = []

    def checked(fn):
        def call(*a, **kw):
            if not log.exists():
                missing.append((fn.__name__, "before", a))
            r = fn(*a, **kw)
            if not log.exists():
                missing.append((fn.__name__, "after", a))
            return r
        return call

    rl = RotatingLog(str(log), 64, 2)
    rl.write(b"x" * 40 + b"\n")
    for name in ("rename", "link", "unlink", "open", "close"):
        monkeypatch.setattr(os, name, checked(getattr(os, name)))
    for i in range(5):
        rl.write(b"line %d " % i + b"y" * 40 + b"\n")
    monkeypatch.undo()
    rl.close()
    assert not missing, missing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "log.1", "log.2"]
    assert log.read_bytes().startswith(b"line 4") and (tmp_path / "log.1").read_bytes().startswith(b"line 3")


STORM = r'''
import sys, time
from runward.agent.supervise.logfiles import RotatingLog
log = RotatingLog(sys.argv[1], 2048, 100)
for i in range(int(sys.argv[2])):
    log.write(b"line %06d step %d loss 0.5\n" % (i, i))
    if i % 64 == 0:
        time.sleep(0.001)  # a rotation about every 73 lines: the names move while readers read
log.write(b"done\n")
log.close()
'''


def test_a_follower_and_the_parser_under_a_rotation_storm_read_every_line_once(tmp_path):
    """The real logger rotating every 2 KiB through 100 names (a long rename sequence each
    time), a follower (read_on) and the parser (scan) reading on beside it: each sees every
    line once, in order. The keep is large enough that no file is rotated out of reach."""
    import subprocess
    import sys

    from runward.agent.supervise import logfiles
    from runward.agent.logmetrics import scan
    log = tmp_path / "log"
    log.write_bytes(b"")
    n = 6000  # about 85 files of 2 KiB: none rotated out of reach however far behind a reader is
    writer = subprocess.Popen([sys.executable, "-c", STORM, str(log), str(n)])
    pos, got = logfiles.end_of(str(log)), b""
    state, steps = {"ino": pos[0], "dev": pos[1], "offset": 0, "sig": ""}, []
    # the readers start 30 files behind: each call finds its file under a rotated name
    wait_for(lambda: (tmp_path / "log.30").exists() or writer.poll() is not None, timeout=60, what="log.30")
    deadline = time.monotonic() + 120
    try:
        while not got.endswith(b"done\n") or (steps[-1:] != [n - 1] and len(steps) < n):
            data, pos = logfiles.read_on(str(log), pos)
            got += data
            out = scan(str(log), state, {"max_points": n}, time.time())
            state = out["state"]
            assert out["points_dropped"] == 0
            steps += [int(p["metrics"]["step"]) for p in out["points"]]
            assert writer.poll() in (None, 0) and time.monotonic() < deadline, (len(got), len(steps))
    finally:
        writer.wait(timeout=60)
    nums = [int(x.split()[1]) for x in got.decode().splitlines()[:-1]]
    assert nums == list(range(n)), [(a, b) for a, b in zip(nums, range(n)) if a != b][:3]
    assert steps == list(range(n)), [(a, b) for a, b in zip(steps, range(n)) if a != b][:3]
    assert 50 < len(list(tmp_path.glob("log.*"))) < 100
