"""Ctrl-C while `runward status --json` writes its document (a reader slower than the writer:
the pipe is full and the write blocks): stdout must still hold exactly one JSON document. The
interrupt cut the document at the pipe's 64 KiB and the Interrupted error document was written
right after it on the same line: a torn {"ok": true ... followed by {"ok": false ...}."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path


def _blocked_on_write(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip() in ("pipe_write", "anon_pipe_write")
    except OSError:
        return False


def test_ctrl_c_while_the_document_is_written_leaves_one_document(cli):
    rc, doc = cli.json("start", "intr-0", "--settle", "0", "--", "true")
    assert rc in (0, 1), doc
    runs = cli.home / "runs"
    for i in range(1, 250):  # ~250 runs: a document of several pipe buffers
        shutil.copytree(runs / "intr-0", runs / f"intr-{i}")
    p = subprocess.Popen(cli.argv("status", "--json"), cwd=cli.cwd, env=cli.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _blocked_on_write(p.pid):
            assert p.poll() is None and time.monotonic() < deadline, "never blocked writing its document"
            time.sleep(0.01)
        os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert out.count(b'{"ok": ') == 1, out[:200] + b"..." + out[-300:]
    doc = json.loads(out)  # one whole document, not a torn one with another glued on
    assert len(doc["result"]["runs"]) == 250
    assert p.returncode == 130, (p.returncode, err)
