"""A full disk (a small tmpfs home) never tears a record: what was there stays whole and the verb
says the disk is full."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from conftest import marked

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts a tmpfs)")


@ROOT_ONLY
def test_disk_full_keeps_the_old_record_whole(cli, tmp_path):
    """On ENOSPC a record is never torn: what was there stays whole, nothing half-made is
    left, and the verb says the disk is full (exit 1)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)])
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        cli.env["RUNWARD_HOME"] = str(mnt / "home")
        rc, doc = cli.json("start", "df", "--settle", "0.2", "--log", str(tmp_path / "df.log"), "--", "sleep", "600")
        assert rc == 0, doc
        run_json = mnt / "home" / "runs" / "df" / "run.json"
        before = {p: p.read_bytes() for p in (mnt / "home").rglob("*") if p.is_file()}
        # unbuffered: a buffered file still holds the bytes that did not fit, and its close
        # would raise ENOSPC again
        with open(mnt / "filler", "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        rc, doc = cli.json("start", "df2", "--settle", "0.2", "--log", str(tmp_path / "df2.log"), "--", "sleep", "600")
        assert rc == 1, doc
        assert "disk full" in doc["error"]["message"], doc
        after = {p: p.read_bytes() for p in (mnt / "home").rglob("*") if p.is_file() and ".lock" not in p.name}
        assert {p: b for p, b in before.items() if ".lock" not in p.name} == after
        json.loads(run_json.read_text())
        assert not marked("df2.")
        assert not (mnt / "home" / "runs" / "df2").exists()
        os.unlink(mnt / "filler")
        assert cli.status("df")["state"] == "running"
        rc, doc = cli.json("start", "df2", "--settle", "0.2", "--log", str(tmp_path / "df2.log"), "--", "sleep", "600")
        assert rc == 0, doc
        for n in ("df", "df2"):
            rc, doc = cli.json("stop", n, "--grace", "5")
            assert rc == 0, doc
    finally:
        for pref in ("df.", "df2."):
            for pid in marked(pref):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        subprocess.run(["umount", "-l", str(mnt)])
