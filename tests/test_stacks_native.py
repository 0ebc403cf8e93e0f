"""`runward stacks --native`: py-spy's native (C/C++) frames are added to a process's stack,
but the grouping and the summary stay on its innermost Python frame (two ranks both waiting in
libc's futex or nanosleep are not "in the same place"); the native frame it is in is given
beside it, for a rank stuck in C++. A real job, real py-spy."""

from __future__ import annotations

import os
import sys

from helpers_stacks import BLOCKED, _start, needs_spy


@needs_spy
def test_native_frames_keep_the_python_frame_as_the_place_and_name_the_native_one(cli, tmp_path):
    (tmp_path / "blocked.py").write_text(BLOCKED)
    name = f"stknat{os.getpid()}"
    _start(cli, tmp_path, name, sys.executable, str(tmp_path / "blocked.py"))
    try:
        rc, doc = cli.json("stacks", name, "--native")
        assert rc == 0, doc
        res = doc["result"]
        assert res["native"] is True, res
        assert "in wait_for_the_lock_forever (blocked.py:5)" in res["summary"], res["summary"]
        [p] = res["procs"]
        frames = p["threads"][0]["frames"]
        assert any(f.get("native") for f in frames), frames  # py-spy did give native frames
        nf = p["native_frame"]
        assert nf["native"] and not nf["file"].endswith(".py"), nf  # e.g. clock_nanosleep (libc.so.6)
        assert nf == next(f for f in frames if f.get("native")), (nf, frames)
        human = cli.run("stacks", name, "--native").stdout
        assert f"native: {nf['name']} ({nf['file']})" in human, human
    finally:
        cli.run("stop", name, "--grace", "2")
