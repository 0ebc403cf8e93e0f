"""[runs.NAME] snapshots = { file_max = "256K", attempt_max = "2M", keep_attempts = 20 }: the
bounds of the text runward keeps per attempt for compare's diffs (agent/core/snapshots.py,
docs/history.md), read and checked here before any request: a bad value is exit 2 naming
its key, never a start that keeps more (or less) than was asked."""

from __future__ import annotations

from ..errors import BadInput

DEFAULTS = {"file_max": 256 << 10, "attempt_max": 2 << 20, "keep_attempts": 20}  # as agent/core/snapshots.py
EXAMPLE = 'snapshots = { file_max = "256K", attempt_max = "2M", keep_attempts = 20 }'


def parse(v, name: str) -> dict:
    """{"file_max": bytes, "attempt_max": bytes, "keep_attempts": n}: the defaults where not given."""
    where = f"[runs.{name}] snapshots"
    if not isinstance(v, dict) or set(v) - set(DEFAULTS):
        bad = sorted(set(v) - set(DEFAULTS)) if isinstance(v, dict) else [repr(v)]
        raise BadInput(f"invalid {where}: {', '.join(bad)}", f"its keys are file_max, attempt_max, keep_attempts: "
                                                               f"{EXAMPLE}")
    out = dict(DEFAULTS)
    for key in ("file_max", "attempt_max"):
        if key in v:
            from .inputs import parse_size
            out[key] = parse_size(v[key], f"{where}.{key}")
    if "keep_attempts" in v:
        k = v["keep_attempts"]
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 10000:
            raise BadInput(f"invalid {where}.keep_attempts {k!r}", f"a whole number from 1 to 10000: {EXAMPLE}")
        out["keep_attempts"] = k
    return out
