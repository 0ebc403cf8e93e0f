"""A supervised run's progress as its records say it: the fast example job's flags, and the
lines of an events file (JSON lines)."""

from __future__ import annotations

import json
from pathlib import Path


FAST = ["--env", "TRAIN_STEP_SECONDS=0.02", "--env", "TRAIN_WORKERS=0", "--env", "TRAIN_ESCAPEE=0"]


def _events(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []
