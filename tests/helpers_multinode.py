"""Multi-node runs on the ssh testbed: the mn fixture (hosts and a run name), a runward.toml of N
nodes, the rows of a multi-node document, a node's log, and the torchrun beside this
interpreter."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

import testbed
from conftest import EXAMPLE, alive, marked


FAST = {"TRAIN_STEP_SECONDS": "0.1", "TRAIN_WORKERS": "1", "TRAIN_ESCAPEE": "0"}


def _config(tmp_path, hosts: list[str], name: str, extra: str = "") -> None:
    lines = []
    for i, h in enumerate(hosts):
        lines += [f"[targets.n{i}]", f'on = "ssh://{h}"', f'home = "{tmp_path}/node{i}"', ""]
    env = ", ".join(f'{k} = "{v}"' for k, v in FAST.items())
    lines += [f"[runs.{name}]", "nodes = [" + ", ".join(f'"n{i}"' for i in range(len(hosts))) + "]",
              f'command = ["python3", "{EXAMPLE}", "--rank={{node_rank}}", "--of={{nnodes}}"]',
              f"env = {{ {env} }}", "settle = 0.5", extra]
    (tmp_path / "work" / "runward.toml").write_text("\n".join(lines) + "\n")


@pytest.fixture
def mn(cli, tmp_path):
    tb = testbed.require("ssh")
    cli.env.update(RUNWARD_SSH_CONFIG=tb["ssh_config"])
    name = "mn" + uuid.uuid4().hex[:6]
    yield name
    cli.run("stop", name, "--grace", "2")
    for pid, start in marked(name + ".").items():  # whatever a failed assertion left, by pid + start
        if alive(pid, start):
            os.kill(pid, signal.SIGKILL)


def _rows(doc: dict) -> list[dict]:
    return doc["result"]["nodes"]


def _log(tmp_path, rank: int, name: str) -> str:
    return (tmp_path / f"node{rank}" / "runs" / name / "log").read_text()


def _torchrun() -> str | None:
    """torchrun beside this interpreter (CI installs torch==2.13.0, the extra `torch`), else None."""
    import shutil
    import sys
    here = os.path.join(os.path.dirname(sys.executable), "torchrun")
    return here if os.path.exists(here) else os.environ.get("RUNWARD_TEST_TORCHRUN") or shutil.which("torchrun")
