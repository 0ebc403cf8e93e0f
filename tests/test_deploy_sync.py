"""push/deploy as rsync does them (issue 18): only what differs is sent, unchanged files are
named as such, --delete, --exclude, .gitignore / .runwardignore, --dry-run, links copied as
links, no write through a planted link anywhere on the destination path, and a push cut
mid-file leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

import testbed
from conftest import CLI, sha, wait_for

sys.path.insert(0, str(Path(__file__).parent))
from faults.test_faults import CuttableRelay  # noqa: E402

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a directory owned by another user)")

# What the far side holds, as {rel: "f:<sha256>" | "l:<target>" | "d"}: run there with exec,
# so a container's own filesystem is what is read.
LIST_TREE = r"""
import hashlib, json, os, sys
root, out = sys.argv[1], {}
for d, dirs, files in os.walk(root):
    for n in dirs + files:
        p = os.path.join(d, n); r = os.path.relpath(p, root)
        if os.path.islink(p): out[r] = "l:" + os.readlink(p)
        elif os.path.isdir(p): out[r] = "d"
        else: out[r] = "f:" + hashlib.sha256(open(p, "rb").read()).hexdigest()
print(json.dumps(out))
"""


def far_tree(cli: CLI, on: list[str], path: str) -> dict:
    rc, doc = cli.json("exec", *on, "--", "python3", "-c", LIST_TREE, path)
    assert rc == 0, doc
    return json.loads(doc["result"]["stdout"])


def make_source(src: Path) -> None:
    (src / "sub").mkdir(parents=True)
    (src / "a.py").write_text("print('a v1')\n")
    (src / "sub" / "b.py").write_text("B\n")
    (src / "ckpt").mkdir()
    (src / "ckpt" / "w.pt").write_bytes(b"weights")       # .gitignore: ckpt/
    (src / "wandb").mkdir()
    (src / "wandb" / "run.txt").write_text("run")           # .runwardignore: wandb/
    (src / "train.log").write_text("log")                   # --exclude '*.log'
    (src / "sub" / "__pycache__").mkdir()
    (src / "sub" / "__pycache__" / "b.pyc").write_bytes(b"pyc")  # .gitignore: __pycache__/
    (src / ".gitignore").write_text("ckpt/\n__pycache__/\n")
    (src / ".runwardignore").write_text("wandb/\n")
    os.symlink("a.py", src / "alias.py")                    # a link inside the tree
    os.symlink("/etc/hostname", src / "outside")            # a link out of it: sent as a link, not followed


def push(cli: CLI, on: list[str], *args: str) -> dict:
    rc, doc = cli.json("push", *on, *args)
    assert rc == 0, doc
    return doc["result"]


def sent(res: dict) -> list[str]:
    return sorted(os.path.basename(f["remote"]) for f in res["sent"])


def scenario(cli: CLI, on: list[str], src: Path, dest: str) -> None:
    """Everything the issue lists, against one target."""
    spec = f"{src}:{dest}"
    res = push(cli, on, "--exclude", "*.log", spec)
    assert sent(res) == [".gitignore", ".runwardignore", "a.py", "b.py"], res
    assert res["bytes_sent"] == sum(f["size"] for f in res["sent"]) > 0
    far = far_tree(cli, on, dest)
    assert far["a.py"] == "f:" + sha(b"print('a v1')\n") and far["sub/b.py"] == "f:" + sha(b"B\n")
    assert far["alias.py"] == "l:a.py" and far["outside"] == "l:/etc/hostname", far
    assert not {"ckpt", "wandb", "train.log", "sub/__pycache__"} & set(far), far

    # unchanged: nothing sent, every file named as unchanged
    res = push(cli, on, "--exclude", "*.log", spec)
    assert res["sent"] == [] and res["bytes_sent"] == 0 and len(res["unchanged"]) == 4, res
    assert res["bytes_unchanged"] == sum(f["size"] for f in res["unchanged"])

    # one changed file: one sent
    (src / "a.py").write_text("print('a v2')\n")
    res = push(cli, on, "--exclude", "*.log", spec)
    assert sent(res) == ["a.py"] and len(res["unchanged"]) == 3, res
    assert far_tree(cli, on, dest)["a.py"] == "f:" + sha(b"print('a v2')\n")

    # what the source lost goes with --delete (dry run first: nothing changes); what is
    # excluded stays there, as rsync keeps it
    rc, doc = cli.json("exec", *on, "--", "sh", "-c", f"mkdir -p {dest}/old {dest}/ckpt && echo x > {dest}/old/x "
                       f"&& echo e > {dest}/extra.txt && echo w > {dest}/ckpt/remote.pt")
    assert rc == 0, doc
    (src / "sub" / "b.py").unlink()
    before = far_tree(cli, on, dest)
    res = push(cli, on, "--exclude", "*.log", "--delete", "--dry-run", spec)
    assert res["dry_run"] and far_tree(cli, on, dest) == before
    gone = sorted(d["remote"][len(dest) + 1:] for d in res["deleted"])
    assert gone == ["extra.txt", "old", "old/x", "sub/b.py"], res
    res = push(cli, on, "--exclude", "*.log", "--delete", spec)
    assert sorted(d["remote"][len(dest) + 1:] for d in res["deleted"]) == gone and res["sent"] == [], res
    far = far_tree(cli, on, dest)
    assert not {"extra.txt", "old", "sub/b.py"} & set(far) and far["ckpt/remote.pt"].startswith("f:"), far
    assert far["sub"] == "d" and far["a.py"] == "f:" + sha(b"print('a v2')\n")


def test_push_sends_only_what_differs_locally(cli, tmp_path):
    src = tmp_path / "src"
    make_source(src)
    scenario(cli, [], src, str(tmp_path / "dest"))


def test_push_into_a_container_through_ssh(cli, tmp_path):
    tb = testbed.require("pct")
    cli.env = testbed.env(tb, cli.env)
    cli.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    src = tmp_path / "src"
    make_source(src)
    dest = f"/root/rw-sync-{uuid.uuid4().hex[:8]}"
    on = ["--on", "ssh://rw1/pct:200"]
    try:
        scenario(cli, on, src, dest)
        assert not Path(dest).exists(), "the push landed on the host, not in the container"
    finally:
        cli.json("exec", *on, "--", "rm", "-rf", dest)


def test_delete_refuses_root_and_home(cli, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("f")
    for dest in ("/", "~", "~/"):
        rc, doc = cli.json("push", "--delete", f"{src}:{dest}")
        assert rc == 2 and "refused" in doc["error"]["message"], doc
    # a path that names runward's own home only once resolved: refused by the agent, which
    # compares the directory it reached (device, inode), before it reads or removes anything
    cli.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (cli.home / "keep.txt").write_text("mine")
    os.symlink(cli.home, tmp_path / "homelink")
    rc, doc = cli.json("push", "--delete", f"{src}:{tmp_path}/homelink")
    assert rc == 2 and "refused" in doc["error"]["message"], doc
    assert (cli.home / "keep.txt").read_text() == "mine"


def test_push_through_a_symlinked_destination_stays_inside_it(cli, tmp_path):
    """A destination that is a link we made (in a directory only we write) is followed, as
    a user means it; the files land in what it points to, and a link inside the far tree is
    replaced, never written through."""
    real = tmp_path / "real"
    real.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(real, tmp_path / "dlink")
    os.symlink(outside, real / "sub")  # where the source has a directory
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "b.py").write_text("B")
    (src / "a.py").write_text("A")
    push(cli, [], f"{src}:{tmp_path}/dlink")
    assert (real / "a.py").read_text() == "A" and (real / "sub" / "b.py").read_text() == "B"
    assert (tmp_path / "dlink").is_symlink() and not (real / "sub").is_symlink()
    assert list(outside.iterdir()) == []


@ROOT_ONLY
def test_push_never_follows_a_link_planted_mid_path(cli, tmp_path):
    """The hole: a link planted in a directory others can write, on the way to the
    destination (not at its last name), was followed by makedirs."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    d = Path(f"/tmp/rwmid-{os.getpid()}")
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    try:
        os.chmod(d, 0o1777)
        os.symlink(victim, d / "shared")
        src = tmp_path / "src"
        src.mkdir()
        (src / "authorized_keys").write_text("planted\n")
        for spec in (f"{src}:{d}/shared/deep/conf", f"{src}/authorized_keys:{d}/shared/deep/authorized_keys"):
            rc, doc = cli.json("push", spec)
            assert rc == 1 and "symbolic link" in doc["error"]["message"], doc
        assert list(victim.iterdir()) == []
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_push_cut_mid_file_leaves_old_or_new_and_the_next_completes(tmp_path):
    tb = testbed.require("ssh")
    relay = CuttableRelay((tb["addresses"]["rw1"], 22))
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host rwcut\n  HostName 127.0.0.1\n  Port {relay.port}\n  HostKeyAlias rw1\n  User root\n"
                   f"  IdentityFile {tb['client_key']}\n\nInclude {tb['ssh_config']}\n")
    (tmp_path / "work").mkdir()
    c = CLI(tmp_path / "home", tmp_path / "work")
    c.env = dict(testbed.env(tb, c.env), RUNWARD_SSH_CONFIG=str(cfg), RUNWARD_RESIDENT="0")
    dest = tmp_path / "far"  # the test hosts share this filesystem
    src = tmp_path / "big.bin"
    old, new = b"o" * (1 << 20), b"n" * (1 << 20)
    src.write_bytes(old)
    try:
        push(c, ["--on", "ssh://rwcut"], f"{src}:{dest}/big.bin")
        with open(src, "wb") as f:
            for _ in range(192):
                f.write(new)
        p = c.popen("push", "--on", "ssh://rwcut", "--json", f"{src}:{dest}/big.bin")
        deadline = time.monotonic() + 60
        while not any(t.stat().st_size > (8 << 20) for t in dest.glob(".big.bin.runward-*")):
            assert p.poll() is None and time.monotonic() < deadline, "the push ended before it could be cut"
            time.sleep(0.002)
        relay.cut()
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3, (out, err)
        after, new_sha = sha((dest / "big.bin").read_bytes()), sha(src.read_bytes())
        # cut with 8 MiB of 192 written it is the old file; the new one only if every byte
        # had already arrived (buffers on the way): never anything else
        assert after in (sha(old), new_sha), "a torn file after the cut"
        res = push(c, ["--on", "ssh://rwcut"], f"{src}:{dest}/big.bin")
        assert [f["size"] for f in res["sent"]] == ([192 << 20] if after != new_sha else []), res
        assert sha((dest / "big.bin").read_bytes()) == new_sha
        # the cut agent saw its input end and removed its temp file (it may finish after us)
        wait_for(lambda: list(dest.iterdir()) == [dest / "big.bin"], timeout=60, what="the cut push's temp file gone")
    finally:
        relay.close()


def test_far_hashes_are_cached_by_inode_and_a_same_size_edit_is_still_seen(cli, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    (src / "m.py").write_text("x = 1\n")
    push(cli, [], f"{src}:{dest}")
    st = (dest / "m.py").stat()
    cache = json.loads((cli.home / "cache" / "hashes.json").read_text())
    assert cache[f"{st.st_dev}:{st.st_ino}"][3] == sha(b"x = 1\n"), cache
    # the same size and the same mtime, other bytes: the ctime in the key still tells
    (dest / "m.py").write_text("x = 2\n")
    os.utime(dest / "m.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    res = push(cli, [], f"{src}:{dest}")
    assert sent(res) == ["m.py"] and (dest / "m.py").read_text() == "x = 1\n", res
    # here too: a local file last changed long enough ago is hashed once
    os.utime(src / "m.py", (time.time() - 3600, time.time() - 3600))
    assert push(cli, [], f"{src}:{dest}")["sent"] == []
    lst = (src / "m.py").stat()
    local = json.loads((cli.home / "cache" / "local-hashes.json").read_text())
    assert local[f"{lst.st_dev}:{lst.st_ino}"][3] == sha(b"x = 1\n"), local


def test_a_directory_where_the_source_has_a_file_is_named_and_replaced_only_with_delete(cli, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    (src / "cfg").write_text("now a file")
    (dest / "cfg").mkdir(parents=True)
    (dest / "cfg" / "old.yaml").write_text("old")
    rc, doc = cli.json("push", f"{src}:{dest}")
    assert rc == 1 and "is a directory there" in doc["error"]["message"], doc
    assert (dest / "cfg" / "old.yaml").read_text() == "old" and not list(dest.glob(".*runward-*"))
    res = push(cli, [], "--delete", f"{src}:{dest}")
    assert (dest / "cfg").read_text() == "now a file", res
    assert sorted(d["remote"][len(str(dest)) + 1:] for d in res["deleted"]) == ["cfg", "cfg/old.yaml"]


def test_status_local_drift_covers_a_deployed_directory(cli, tmp_path):
    pkg = cli.cwd / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "m.py").write_text("v1\n")
    (pkg / "same.py").write_text("same\n")
    dest = tmp_path / "deployed"
    (cli.cwd / "runward.toml").write_text(f'[runs.ld]\ncommand = ["sleep", "600"]\nfiles = ["pkg:{dest}"]\n'
                                          'settle = 0.2\n')
    rc, doc = cli.json("deploy", "ld")
    assert rc == 0 and sent(doc["result"]) == ["m.py", "same.py"], doc
    rc, doc = cli.json("start", "ld")
    assert rc == 0, doc
    try:
        (pkg / "sub" / "m.py").write_text("v2\n")
        st = cli.status("ld")
        assert [d["remote"] for d in st["local_drift"]] == [f"{dest}/sub/m.py"], st
    finally:
        cli.json("stop", "ld", "--grace", "2")


@pytest.mark.parametrize("patterns, path, is_dir, excluded", [
    (["*.log"], "a/b/train.log", False, True),
    (["/build"], "build", True, True),
    (["/build"], "src/build", True, False),          # anchored to where the pattern came from
    (["doc/*.md"], "doc/a.md", False, True),
    (["doc/*.md"], "doc/x/a.md", False, False),      # * never crosses a /
    (["**/cache"], "a/b/cache", True, True),
    (["a/**/z"], "a/z", False, True),
    (["a/**/z"], "a/b/c/z", False, True),
    (["ckpt/"], "ckpt", False, False),               # a trailing / matches directories only
    (["*.pt", "!keep.pt"], "keep.pt", False, False),  # the last match wins
    (["*.pt", "!keep.pt"], "other.pt", False, True),
    (["\\!bang"], "!bang", False, True),
    (["[ab].txt"], "b.txt", False, True),
    (["[!ab].txt"], "c.txt", False, True),
])
def test_gitignore_patterns(patterns, path, is_dir, excluded):
    from runward.ignore import Matcher
    assert Matcher(patterns, read_files=False).excluded(path, is_dir) is excluded


def test_a_nested_gitignore_applies_below_its_directory(tmp_path):
    from runward.ignore import Matcher
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("# outputs\n*.out\n/local.cfg\n")
    m = Matcher([])
    m.enter(str(tmp_path), "")
    m.enter(str(tmp_path), "sub")
    assert m.excluded("sub/x.out", False) and m.excluded("sub/deep/x.out", False)
    assert m.excluded("sub/local.cfg", False) and not m.excluded("sub/deep/local.cfg", False)
    assert not m.excluded("x.out", False) and m.excluded_path("sub/x.out/f", False)


def test_a_temp_file_left_by_a_killed_agent_goes_with_the_next_push(cli, tmp_path):
    """An agent killed mid-file (SIGKILL: it cannot clean up) leaves its temp file; one
    untouched for an hour is no running push's, and the next push into that tree removes it."""
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    (src / "a.py").write_text("A")
    push(cli, [], f"{src}:{dest}")
    stale, fresh = dest / ".a.py.runward-0123456789abcdef", dest / ".a.py.runward-fedcba9876543210"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"being written")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    res = push(cli, [], f"{src}:{dest}")
    assert res["temps_removed"] == [str(stale)] and res["sent"] == [] and res["deleted"] == [], res
    assert not stale.exists() and fresh.exists()


def _strings(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)
    elif isinstance(doc, str):
        yield doc


def test_a_file_where_the_source_has_a_directory_is_not_removed_unsaid(cli, tmp_path):
    """The target has a file `sub` where the source has a directory `sub/`. The dry run lists
    only what it would send; the real push (no --delete) removes the file, its bytes gone,
    and makes the directory: exit 0, 'verified', no word of it. The reverse (a directory
    where a file goes) is refused (F4). Either refuse, or say it in the plan."""
    pkg = cli.cwd / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "b.py").write_text("b\n")
    dst = tmp_path / "dst" / "pkg"
    dst.mkdir(parents=True)
    (dst / "sub").write_text("the operator's notes, not runward's\n")
    rc, plan = cli.json("push", "--on", "local", "--dry-run", f"pkg:{dst}")
    said = str(dst / "sub") in set(_strings(plan))
    rc, doc = cli.json("push", "--on", "local", f"pkg:{dst}")
    if (dst / "sub").is_dir():  # ground truth: the file is gone
        assert said and str(dst / "sub") in set(_strings(doc)), (
            "the file %s was removed without --delete and neither the plan nor the push said so: %s"
            % (dst / "sub", doc))
    else:
        assert rc != 0 and (dst / "sub").read_text().startswith("the operator's"), doc
