"""pull: files back through the hop chain, on this machine and from a podman container behind
ssh (the testbed's rwpod on rw1): streamed, sha256-checked here, atomic, trees with modes and
links, and a file that changes while it is read never replaces the local one."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from podjob import pod  # noqa: F401 (the fixture)


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _no_temp_files(d: Path) -> bool:
    return not [p for p in d.rglob(".*runward-*")]


def _tree(root: Path) -> None:
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.txt").write_text("A\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o750)
    (root / "sub" / "deep" / "w.bin").write_bytes(bytes(range(256)) * 4096)
    (root / "sub").chmod(0o710)
    os.symlink("../a.txt", root / "sub" / "to-a")
    os.symlink("/nonexistent/elsewhere", root / "dangling")


def _check_tree(src: Path, dst: Path) -> None:
    assert (dst / "a.txt").read_text() == "A\n"
    assert (dst / "run.sh").stat().st_mode & 0o777 == 0o750
    assert (dst / "sub").stat().st_mode & 0o777 == 0o710
    assert _sha(dst / "sub" / "deep" / "w.bin") == _sha(src / "sub" / "deep" / "w.bin")
    assert os.readlink(dst / "sub" / "to-a") == "../a.txt" and (dst / "sub" / "to-a").is_symlink()
    assert os.readlink(dst / "dangling") == "/nonexistent/elsewhere"
    assert _no_temp_files(dst)


# --------------------------------------------------------------------------- local

def test_pull_file_and_tree_locally(cli, tmp_path):
    src = tmp_path / "remote"
    _tree(src)
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("old\n")
    rc, doc = cli.json("pull", f"{src}:{out / 'tree'}", f"{src / 'a.txt'}:{out}", f"{src / 'run.sh'}:{out / 'r.sh'}")
    assert rc == 0, doc
    _check_tree(src, out / "tree")
    assert (out / "a.txt").read_text() == "A\n", "an existing file is replaced by the verified one"
    assert (out / "r.sh").stat().st_mode & 0o777 == 0o750
    files = {f["local"]: f for f in doc["result"]["files"]}
    assert files[str(out / "a.txt")]["sha256"] == _sha(src / "a.txt")
    rc, doc = cli.json("pull", f"{tmp_path / 'missing'}:{out / 'm'}")
    assert rc == 2 and doc["error"]["type"] == "BadInput" and not (out / "m").exists()


def test_pull_of_a_directory_nests_or_copies_its_contents_as_scp_r_and_rsync(cli, tmp_path):
    """`ckpt:./` into an existing directory makes ./ckpt; `ckpt/:./` copies what is in it; a
    LOCAL that does not exist becomes the copy (scp -r)."""
    src = tmp_path / "ckpt"
    _tree(src)
    nest, contents, fresh = (tmp_path / n for n in ("nest", "contents", "fresh"))
    nest.mkdir()
    contents.mkdir()
    rc, doc = cli.json("pull", f"{src}:{nest}", f"{src}/:{contents}/", f"{src}:{fresh}")
    assert rc == 0, doc
    _check_tree(src, nest / "ckpt")
    assert sorted(p.name for p in nest.iterdir()) == ["ckpt"]
    _check_tree(src, contents)
    assert not (contents / "ckpt").exists()
    _check_tree(src, fresh)
    assert {f["local"] for f in doc["result"]["files"]} >= {str(nest / "ckpt" / "a.txt"), str(contents / "a.txt")}


def _writer(path: Path) -> subprocess.Popen:
    """A process that keeps appending to path (a checkpoint still being written)."""
    code = ("import sys,time\nf=open(sys.argv[1],'ab')\n"
            "while True:\n f.write(b'x'*4096); f.flush(); time.sleep(0.001)\n")
    return subprocess.Popen([sys.executable, "-c", code, str(path)])


def test_pull_of_a_file_changing_meanwhile_replaces_nothing(cli, tmp_path):
    src = tmp_path / "ckpt.bin"
    src.write_bytes(os.urandom(1 << 20) * 32)
    dst = tmp_path / "local"
    dst.mkdir()
    (dst / "ckpt.bin").write_bytes(b"the old verified copy")
    w = _writer(src)
    try:
        time.sleep(0.2)
        rc, doc = cli.json("pull", f"{src}:{dst}/")
    finally:
        w.kill()
        w.wait()
    assert rc == 1, doc
    assert "changed on the far side" in doc["error"]["message"], doc
    assert (dst / "ckpt.bin").read_bytes() == b"the old verified copy"
    assert _no_temp_files(dst)


# --------------------------------------------------------------------------- a container behind ssh

POD = "ssh://rw1/podman:rwpod"


def _in_pod(pod, script: str, timeout: float = 120) -> str:
    p = subprocess.run(["podman", "exec", "-i", pod.tb["podman"], "sh", "-c", script], env=pod.env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_pull_from_a_container_behind_ssh_file_tree(pod, tmp_path):
    rc, doc = pod.json("push", "--on", POD, f"{Path(__file__)}:{pod.dir}/one.py")
    assert rc == 0, doc
    src = tmp_path / "src"
    _tree(src)
    rc, doc = pod.json("push", "--on", POD, f"{src}:{pod.dir}/tree")
    assert rc == 0, doc
    # links travel only with pull: made there by hand
    _in_pod(pod, f"ln -s ../a.txt {pod.dir}/tree/sub/to-a; ln -s /nonexistent/elsewhere {pod.dir}/tree/dangling; "
                 f"chmod 710 {pod.dir}/tree/sub")
    assert not Path(pod.dir).exists(), "the test must read the container's filesystem, not the host's"
    out = tmp_path / "out"
    rc, doc = pod.json("pull", "--on", POD, f"{pod.dir}/one.py:{out}/one.py", f"{pod.dir}/tree:{out}/tree")
    assert rc == 0, doc
    assert (out / "one.py").read_bytes() == Path(__file__).read_bytes()
    _check_tree(src, out / "tree")
    assert doc["result"]["in_container"]


def test_pull_big_file_from_a_container_behind_ssh_is_streamed(pod, tmp_path):
    big = f"{pod.dir}/weights.bin"
    _in_pod(pod, f"mkdir -p {pod.dir} && head -c 268435456 /dev/urandom > {big}")  # 256 MiB
    want = _in_pod(pod, f"sha256sum {big}").split()[0]
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.Popen(pod.argv("pull", "--on", POD, "--json", f"{big}:{out}/"), cwd=pod.cwd, env=pod.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    while p.poll() is None:
        try:
            for ln in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if ln.startswith("VmHWM:"):
                    peak = max(peak, int(ln.split()[1]))
        except OSError:
            pass
        time.sleep(0.05)
    stdout, err = p.communicate()
    assert p.returncode == 0, err
    assert peak < 120 * 1024, f"the CLI held {peak} KiB: the file must be streamed, not loaded"
    assert _sha(out / "weights.bin") == want
    assert _no_temp_files(out)


def test_pull_from_a_container_of_a_file_changing_meanwhile(pod, tmp_path):
    f = f"{pod.dir}/ckpt.bin"
    _in_pod(pod, f"mkdir -p {pod.dir} && head -c 33554432 /dev/urandom > {f}")
    out = tmp_path / "out"
    out.mkdir()
    (out / "ckpt.bin").write_bytes(b"the old verified copy")
    # appends until told to stop (a file), for 60 s at most whatever happens to this test
    w = subprocess.Popen(["podman", "exec", "-i", pod.tb["podman"], "timeout", "60", "sh", "-c",
                          f"while [ ! -e {f}.stop ]; do echo more >> {f}; done"], env=pod.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        rc, doc = pod.json("pull", "--on", POD, f"{f}:{out}/ckpt.bin")
    finally:
        _in_pod(pod, f"touch {f}.stop")
        w.wait(timeout=60)
    assert rc == 1 and "changed on the far side" in doc["error"]["message"], doc
    assert (out / "ckpt.bin").read_bytes() == b"the old verified copy"
    assert _no_temp_files(out)
