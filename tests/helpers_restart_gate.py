"""A runward.toml of a multi-node run on fake GPUs (a stand-in nvidia-smi per node), for the
restart gate's tests on two nodes."""

from __future__ import annotations

import fakegpu
from conftest import EXAMPLE


FAST = {"TRAIN_STEP_SECONDS": "0.1", "TRAIN_WORKERS": "0", "TRAIN_ESCAPEE": "0"}


def _config(tmp_path, name: str, n: int = 2) -> list:
    """N nodes (rw1, rw2, ...), each a home and a fake GPU driver of its own: the python the
    agent runs there is a wrapper that puts the stand-in first on PATH (the hosts share this
    machine's files). The fake drivers' state files, by rank."""
    states, lines = [], []
    for i in range(n):
        state = fakegpu.create_state(tmp_path / f"smi{i}.json", gpus=2)
        py = tmp_path / f"py{i}"
        py.write_text(f"#!/bin/sh\nexport PATH={fakegpu.BIN_DIR}:$PATH RUNWARD_FAKE_SMI_STATE={state}\n"
                      'exec python3 "$@"\n')
        py.chmod(0o755)
        states.append(state)
        lines += [f"[targets.n{i}]", f'on = "ssh://rw{i + 1}"', f'home = "{tmp_path}/node{i}"', f'python = "{py}"', ""]
    env = ", ".join(f'{k} = "{v}"' for k, v in FAST.items())
    lines += [f"[runs.{name}]", "nodes = [" + ", ".join(f'"n{i}"' for i in range(n)) + "]",
              f'command = ["python3", "{EXAMPLE}", "--rank={{node_rank}}", "--of={{nnodes}}"]',
              f"env = {{ {env} }}", "settle = 0.5", "gpus = [1]"]
    (tmp_path / "work" / "runward.toml").write_text("\n".join(lines) + "\n")
    return states
