"""A job that prints its version and sleeps, the one marked process of a run, and a CLI whose
targets are a podman container behind the ssh testbed host rw1 (the `pod` fixture): for tests
of what code a run runs, read where the job reads it."""

from __future__ import annotations

import subprocess
import uuid

import pytest

import testbed
from conftest import CLI


JOB = "import time\nprint('job {v}', flush=True)\ntime.sleep(600)\n"


def only(procs: dict[int, int]) -> tuple[int, int]:
    assert len(procs) == 1, f"expected one marked process, found {procs}"
    return next(iter(procs.items()))


@pytest.fixture
def pod(tmp_path):
    tb = testbed.require("podman")
    c = CLI(tmp_path / "home", tmp_path / "work")
    (tmp_path / "work").mkdir()
    c.env = testbed.env(tb, c.env)
    c.env["RUNWARD_SSH_CONFIG"] = tb["ssh_config"]
    c.dir = f"/tmp/rw-rt-{uuid.uuid4().hex[:8]}"  # in the container's own /tmp
    c.container = tb["podman"]
    c.tb = tb
    c.toml_head = f'[targets.h1pod]\non = "ssh://rw1/podman:{tb["podman"]}"\nhome = "{c.dir}/home"\n\n'
    yield c
    subprocess.run(["podman", "exec", "-i", c.container, "rm", "-rf", c.dir], env=c.env, capture_output=True)


def sha_in_pod(pod, path: str) -> str:
    p = subprocess.run(["podman", "exec", "-i", pod.container, "sha256sum", path], env=pod.env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()[0]
