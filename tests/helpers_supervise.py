"""The supervision tests' python, and a runward.toml run of the example job (fast steps and
checkpoints) with extra lines."""

from __future__ import annotations

import sys

from conftest import EXAMPLE


PY = sys.executable


def _example(name: str, extra: str) -> str:
    return (f'[runs.{name}]\ncommand = ["{PY}", "{EXAMPLE}"]\nsettle = 0\n'
            f'env = {{ TRAIN_STEP_SECONDS = "0.05", TRAIN_CHECKPOINT_SECONDS = "0.05" }}\n{extra}')
