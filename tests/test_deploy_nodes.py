"""A multi-node run's files land on every node, each checked there (issue 25, item 9): here in two
containers with filesystems of their own (podman and LXC), read back by their own tools, never by
asking runward; a restart --deploy of such a run is all or nothing, and its views name the nodes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import uuid

import pytest

import testbed


NODES = ("podman:rwpod", "lxc:rwlxc")


def _node_sha(tb: dict, node: str, path: str) -> str | None:
    """sha256 of path as the node's own filesystem has it, read by the container's own tool."""
    kind, name = node.split(":")
    argv = ["podman", "exec", name] if kind == "podman" else ["lxc-attach", "-n", name, "--"]
    p = subprocess.run([*argv, "sha256sum", path], env=testbed.env(tb), capture_output=True, text=True, timeout=60)
    return p.stdout.split()[0] if p.returncode == 0 else None


def _in_node(tb: dict, node: str, *cmd: str) -> None:
    kind, name = node.split(":")
    argv = ["podman", "exec", name] if kind == "podman" else ["lxc-attach", "-n", name, "--"]
    subprocess.run([*argv, *cmd], env=testbed.env(tb), check=True, capture_output=True, timeout=60)


@pytest.fixture
def two_fs(cli, tmp_path):
    """A run over two containers with filesystems of their own: a podman one and an LXC one
    (no network: their shims keep on_node_failure = "continue", as test_multinode's do)."""
    tb = testbed.require("podman")
    testbed.require("lxc")
    cli.env.update(testbed.env(tb, cli.env))
    name = "dn" + uuid.uuid4().hex[:6]
    dest = f"/root/{name}/train.py"
    (cli.cwd / "src").mkdir()
    (cli.cwd / "src" / "train.py").write_text(f"print('v1 {name}')\n")
    (cli.cwd / "runward.toml").write_text(
        f"[runs.{name}]\nnodes = [{', '.join(repr(n).replace(chr(39), chr(34)) for n in NODES)}]\n"
        f'command = ["sleep", "300"]\nfiles = ["src/train.py:{dest}"]\nsettle = 0.3\n'
        f'on_node_failure = "continue"\n')
    yield tb, name, dest
    cli.run("stop", name, "--grace", "2")
    for node in NODES:
        _in_node(tb, node, "rm", "-rf", f"/root/{name}")


def _attempts(cli, name: str) -> list:
    rc, st = cli.json("status", name)
    assert rc == 0, st
    return [(r["state"], (r.get("run") or {}).get("attempt")) for r in st["result"]["nodes"]]


def test_deploy_of_a_multi_node_run_lands_on_every_node_each_checked_there(cli, two_fs):
    tb, name, dest = two_fs
    local = hashlib.sha256((cli.cwd / "src" / "train.py").read_bytes()).hexdigest()
    rc, doc = cli.json("deploy", name)
    assert rc == 0 and doc["ok"] and doc["target"] == ",".join(NODES), doc
    rows = doc["result"]["nodes"]
    assert [(r["rank"], r["target"], r["ok"]) for r in rows] == [(0, NODES[0], True), (1, NODES[1], True)], doc
    for r in rows:
        assert [(f["remote"], f["sha256"]) for f in r["result"]["files"]] == [(dest, local)], r
        assert r["result"]["verified"] == ["sha256_on_target"], r
    assert [_node_sha(tb, n, dest) for n in NODES] == [local, local]
    assert not os.path.exists(os.path.dirname(dest)), "deploy wrote to this machine, not to the nodes"
    p = cli.run("deploy", name)  # the human view: one section per node
    assert p.returncode == 0 and f"node 0 {NODES[0]}" in p.stdout and f"node 1 {NODES[1]}" in p.stdout, p.stdout
    assert p.stdout.count("1 unchanged") == 2 and "local" not in p.stdout, p.stdout


def test_restart_deploy_of_a_multi_node_run_is_all_or_nothing_and_views_name_its_nodes(cli, two_fs):
    tb, name, dest = two_fs
    rc, doc = cli.json("start", name)
    assert rc == 0 and doc["result"]["state"] == "running", doc
    assert _attempts(cli, name) == [("running", 1), ("running", 1)]
    (cli.cwd / "src" / "train.py").write_text(f"print('v2 {name}')\n")
    new = hashlib.sha256((cli.cwd / "src" / "train.py").read_bytes()).hexdigest()
    # node 1's deploy cannot succeed (a directory where the file goes): nothing is stopped
    _in_node(tb, NODES[1], "mkdir", "-p", dest + "/blocker")
    rc, doc = cli.json("restart", name, "--deploy")
    assert rc == 1 and doc["result"]["failed_step"] == "deploy", doc
    assert [s["step"] for s in doc["result"]["steps"]] == ["deploy"], doc
    assert "nothing was stopped" in doc["error"]["message"], doc
    assert _attempts(cli, name) == [("running", 1), ("running", 1)]
    rc, doc = cli.json("restart", name, "--on", NODES[0])  # one node alone would not rejoin the others
    assert rc == 2 and "multi-node" in doc["error"]["message"], doc
    assert _attempts(cli, name) == [("running", 1), ("running", 1)]
    _in_node(tb, NODES[1], "rm", "-rf", dest)
    rc, doc = cli.json("restart", name, "--deploy")
    assert rc == 0 and [s["step"] for s in doc["result"]["steps"]] == ["deploy", "stop", "start"], doc
    assert [_node_sha(tb, n, dest) for n in NODES] == [new, new]
    assert _attempts(cli, name) == [("running", 2), ("running", 2)]
    # a local edit not deployed: a plain restart would run the old code on every node: refused
    (cli.cwd / "src" / "train.py").write_text(f"print('v3 {name}')\n")
    rc, doc = cli.json("restart", name)
    assert rc == 2 and "differ locally" in doc["error"]["message"] and "--deploy" in doc["error"]["hint"], doc
    assert _attempts(cli, name) == [("running", 2), ("running", 2)]
    assert [_node_sha(tb, n, dest) for n in NODES] == [new, new]
    rc, doc = cli.json("restart", name, "--no-deploy")  # restart on what the nodes have, as said
    assert rc == 0 and [s["step"] for s in doc["result"]["steps"]] == ["stop", "start"], doc
    assert _attempts(cli, name) == [("running", 3), ("running", 3)]
    assert [_node_sha(tb, n, dest) for n in NODES] == [new, new]
    # views of the project name the run's nodes, never this machine
    rc, st = cli.json("status")
    assert rc == 0 and [t["target"] for t in st["targets"]] == list(NODES), st
    assert all(name in [r["name"] for r in t["result"]["runs"]] for t in st["targets"]), st  # shared containers
    rc, doc = cli.json("stop", "--all", "--grace", "2")
    assert rc == 0 and [(r["name"], r["target"]) for r in doc["runs"]] == [(name, ",".join(NODES))], doc
    assert _attempts(cli, name)[0][0] != "running"
