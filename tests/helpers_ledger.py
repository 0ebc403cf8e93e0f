"""A run's ledger as the CLI prints it: its attempt lines, the throughput it printed, waiting for
steps past a number, a watch, and the fast example job's env."""

from __future__ import annotations

import re

from conftest import CLI, wait_for


FAST = ["TRAIN_STEP_SECONDS=0.05", "TRAIN_STEPS=40", "TRAIN_WORKERS=0", "TRAIN_ESCAPEE=0"]


def _printed_tok_s(log_lines: list[str]) -> list[float]:
    return [float(m.group(1)) for ln in log_lines for m in [re.search(r"tok/s ([0-9.]+)", ln)] if m]


def _attempt_lines(cli: CLI, name: str, n: int) -> list[str]:
    rc, doc = cli.json("logs", name, "--attempt", str(n))
    assert rc == 0, doc
    return doc["result"]["lines"]


def _watch(cli: CLI, name: str, for_s: str) -> tuple[int, dict]:
    return cli.json("watch", name, "--for", for_s, timeout=120)


def _steps_past(cli: CLI, name: str, attempt: int, step: int) -> None:
    def there():
        lines = _attempt_lines(cli, name, attempt)
        return any(re.match(rf"step {step} ", ln) for ln in lines)
    wait_for(there, timeout=60, what=f"attempt {attempt} of {name} to reach step {step}")
