"""A process's children as /proc lists them, for the tests that watch what a verb leaves running."""

from __future__ import annotations

from pathlib import Path


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
