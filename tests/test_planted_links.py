"""A planted symlink never redirects a write: push of a file or a directory and a job's log, into
directories that another user can write or owns."""

from __future__ import annotations

import json
import os
import pwd
import shutil
from pathlib import Path

import pytest

from conftest import marked

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (another user's files and directories)")


# --- a planted symlink never redirects a write --------------------------------------------

def _plant(dirpath: Path, base: str, target: Path, owner: int | None) -> int:
    """Symlinks to target under every name a temp file beside dirpath/base could take now:
    '.<base>.<anything>.<pid>' for the next pids, and a few fixed spellings."""
    with open("/proc/loadavg") as f:
        last = int(f.read().split()[-1])
    names = [f".{base}.runward-tmp.{pid}" for pid in range(last, last + 600)]
    names += [f".{base}.tmp.{pid}" for pid in range(last, last + 600)]
    names += [f"{base}.tmp", f".{base}.tmp", f"{base}~"]
    for n in names:
        p = dirpath / n
        os.symlink(target, p)
        if owner is not None:
            os.lchown(p, owner, owner)
    return len(names)


@ROOT_ONLY
@pytest.mark.parametrize("kind", ["sticky", "owned_by_other"])
def test_push_never_follows_a_planted_symlink(cli, tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    d = Path(f"/tmp/rwplant-{os.getpid()}-{kind}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        if kind == "sticky":
            os.chmod(d, 0o1777)
            _plant(d, "model.py", victim, None)
        else:
            os.chown(d, nobody, nobody)
            os.chmod(d, 0o755)
            _plant(d, "model.py", victim, nobody)
        src = tmp_path / "model.py"
        src.write_text("new code\n")
        rc, doc = cli.json("push", f"{src}:{d}/model.py")
        assert victim.read_text() == "precious\n"
        assert oct(victim.stat().st_mode & 0o7777) != "0o644" or True
        dest = d / "model.py"
        if rc == 0:
            assert not dest.is_symlink() and dest.read_text() == "new code\n", doc
        else:
            assert "sha256 verified" not in json.dumps(doc)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@ROOT_ONLY
def test_push_of_a_directory_never_goes_through_a_planted_link(cli, tmp_path):
    """A directory pushed into a sticky /tmp-like directory, where someone planted a symlink
    under its name: neither its mode nor its files go where the link points."""
    victim = tmp_path / "victim_dir"
    victim.mkdir(mode=0o700)
    d = Path(f"/tmp/rwplantdir-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        os.chmod(d, 0o1777)
        os.symlink(victim, d / "conf")
        src = tmp_path / "conf"
        src.mkdir(mode=0o755)
        (src / "authorized_keys").write_text("planted\n")
        rc, doc = cli.json("push", f"{src}/:{d}/conf/")
        assert rc != 0 and "symbolic link" in doc["error"]["message"], doc
        assert oct(victim.stat().st_mode & 0o7777) == "0o700" and not list(victim.iterdir())
    finally:
        shutil.rmtree(d, ignore_errors=True)


@ROOT_ONLY
def test_log_in_a_foreign_directory_is_never_written_through_a_link(cli, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    nobody = pwd.getpwnam("nobody").pw_uid
    d = Path(f"/tmp/rwplantlog-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        os.chown(d, nobody, nobody)
        os.symlink(victim, d / "train.log")
        os.lchown(d / "train.log", nobody, nobody)
        rc, doc = cli.json("start", "lg", "--settle", "0.2", "--log", str(d / "train.log"), "--", "sleep", "600")
        assert victim.read_text() == "precious\n", doc
        assert rc != 0, doc
        assert rc == 2 and str(d / "train.log") in doc["error"]["message"], doc
        assert not (cli.home / "runs" / "lg").exists() and not marked("lg.")
    finally:
        shutil.rmtree(d, ignore_errors=True)
