"""A job in a container gets the container's environment, not the caller's (issue 39, item
15): `lxc-attach` (and `pct exec`, lxc-attach underneath) keep the caller's environment, so a
token set in the operator's shell was in the container job's /proc/PID/environ, with the
caller's PATH and HOME, and that HOME (a path the container lacks) was the job's default
working directory. Every container hop now gives the container's own login environment plus
what runward sets and --env adds, as `docker exec` does. Ground truth: /proc/PID/environ and
/proc/PID/cwd of the job, read inside the container by its own tool."""

from __future__ import annotations

import subprocess
import uuid

import pytest

import testbed
from conftest import CLI

LEAK = "leaky-" + uuid.uuid4().hex


def _inside(tb: dict, on: str, script: str) -> str:
    kind, name = on.split(":")
    argv = (["podman", "exec", name] if kind == "podman" else
            ["lxc-attach", "-n", "rwlxc" if kind == "pct" else name, "--clear-env", "--"])
    p = subprocess.run([*argv, "sh", "-c", script], env=testbed.env(tb), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("on, feature", [("lxc:rwlxc", "lxc"), ("pct:200", "pct"), ("podman:rwpod", "podman")])
def test_a_container_job_gets_the_containers_environment_not_the_callers(cli: CLI, tmp_path, on, feature):
    tb = testbed.require(feature)
    cli.env = testbed.env(tb, cli.env)
    caller_home = str(tmp_path / "operator-home")  # exists here, not in the container
    cli.env.update(LEAKY_SECRET_TOKEN=LEAK, HOME=caller_home)
    caller_path = cli.env["PATH"]
    name = f"ce{uuid.uuid4().hex[:6]}"
    rc, doc = cli.json("start", name, "--on", on, "--env", "MINE=given", "--settle", "0.3", "--", "sleep", "120")
    try:
        assert rc == 0, doc
        pid = doc["result"]["pid"]
        out = _inside(tb, on, f"tr '\\0' '\\n' < /proc/{pid}/environ; echo; readlink /proc/{pid}/cwd; "
                              "getent passwd $(id -u) | cut -d: -f6")
        *lines, cwd, home = out.strip().split("\n")
        env = dict(ln.split("=", 1) for ln in lines if "=" in ln)
        assert LEAK not in out and "LEAKY_SECRET_TOKEN" not in env, env
        assert env.get("HOME") == home != caller_home and cwd == home, (env, cwd, home)
        assert env.get("PATH") != caller_path and "runward-testbed" not in env.get("PATH", ""), env
        assert env.get("MINE") == "given" and env.get("RUNWARD_RUN") == f"{name}.1", env
    finally:
        cli.run("stop", name, "--on", on)
