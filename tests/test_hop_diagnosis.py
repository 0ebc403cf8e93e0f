"""A failed call through container hops names the hop that failed and what failed there: a
missing container tool as missing (not "python3 not found"), the inner hop of a nested chain
when it is the inner one, and a container tool's passing failure as transient (not ssh's).
Real sshd hosts, containers and tools of the testbed; a `pct` stand-in (tests' own bin dir)
where a wedged or flaky tool is needed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import testbed
from conftest import CLI


@pytest.fixture
def tb():
    return testbed.require("pct")


@pytest.fixture
def tcli(tmp_path, tb):
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    return c


def _in_pod(tb, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", "-i", tb["podman"], *argv], env=testbed.env(tb),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("target,hop,tool,where", [
    ("ssh://rw1/podman:rwpod/pct:200", "pct:200", "pct", "podman:rwpod"),
    ("ssh://rw1/podman:rwpod/docker:x", "docker:x", "docker", "podman:rwpod"),
    ("ssh://rw1/podman:rwpod/lxc:foo", "lxc:foo", "lxc-attach", "podman:rwpod"),
    ("ssh://rw1/pct:200/podman:x", "podman:x", "podman", "pct:200"),
])
def test_a_missing_container_tool_is_named_missing_at_its_hop(tcli, tb, target, hop, tool, where):
    # ground truth: the tool is absent where that hop runs it; python3 is there
    if where == "podman:rwpod":
        assert _in_pod(tb, "sh", "-c", f"command -v {tool}").returncode != 0
        assert _in_pod(tb, "python3", "-c", "pass").returncode == 0
    rc, doc = tcli.json("status", "--on", target)
    assert rc == 3, doc
    err = doc["error"]
    assert err["hop"] == hop and err["message"] == f"{hop}: `{tool}` not found on {where}", err
    assert "python3" not in err["message"] + err["hint"] and tool in err["hint"], err


def _standin(tmp_path: Path, body: str) -> Path:
    """A `pct` of the test's own, first on PATH: `pct exec ID -- ARGV`."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    p = d / "pct"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return d


# a container 200 that runs: its "inside" is this machine (its tools, the testbed's podman)
HOST_PCT = '[ "$1" = exec ] || exit 2\nshift 3\nexec "$@"\n'


@pytest.mark.parametrize("inner,ground,said", [
    ("podman:no-such-ctr", ["podman", "container", "exists", "no-such-ctr"], "container not found"),
    ("podman:rwpod-stopped", ["podman", "container", "inspect", "-f", "{{.State.Running}}", "rwpod-stopped"],
     "container is not running"),
])
def test_the_inner_hop_of_a_chain_is_blamed_when_it_is_the_inner_one(tcli, tb, tmp_path, inner, ground, said):
    tcli.env["PATH"] = f"{_standin(tmp_path, HOST_PCT)}:{tcli.env['PATH']}"
    assert subprocess.run(["pct", "exec", "200", "--", "true"], env=tcli.env).returncode == 0  # 200 runs
    g = subprocess.run(ground, env=tcli.env, capture_output=True, text=True)
    assert g.returncode != 0 or g.stdout.strip() == "false", g  # absent / not running, by podman itself
    rc, doc = tcli.json("status", "--on", f"pct:200/{inner}")
    assert rc == 3, doc
    err = doc["error"]
    assert err["hop"] == inner and err["message"] == f"{inner}: {said}", err
    assert "pct start" not in err["hint"] and "200" not in err["message"], err


def test_a_container_tools_passing_failure_is_said_transient_at_its_hop(tcli, tmp_path):
    # lxc-attach's failure under `pct exec` seen in a soak, once; the next call works
    flag = tmp_path / "failed-once"
    body = (f'[ "$1" = exec ] || exit 2\nshift 3\nif [ ! -e {flag} ]; then : > {flag}\n'
            'echo "lxc-attach: 200: ../src/lxc/attach.c: lxc_attach: 1139 Device or resource busy - '
            'Failed to rexec as memfd" >&2\nexit 255\nfi\nexec "$@"\n')
    tcli.env["PATH"] = f"{_standin(tmp_path, body)}:{tcli.env['PATH']}"
    rc, doc = tcli.json("status", "--on", "pct:200")
    assert rc == 3, doc
    err = doc["error"]
    assert flag.exists() and err["hop"] == "pct:200", err
    assert err["details"]["transient"] is True and "transient" in err["message"], err
    assert "Failed to rexec as memfd" in err["message"] and "ssh" not in err["message"], err
    rc, doc = tcli.json("status", "--on", "pct:200")  # and it passes: the container was fine
    assert rc == 0, doc
