"""stall_after and straggler_ratio (docs/diagnosis.md, "Stalls and stragglers"): the start and
watch flags and [runs.NAME.health]'s keys, read and checked before any request. The older
spellings (`stall = 300`, `watch --stall`) are read as stall_after: the same number of seconds,
judged on the step (log silence only where the log shows no steps)."""

from __future__ import annotations

from ..errors import BadInput


def add_arguments(p) -> None:
    from . import options
    options.add(p, "stall_after")
    options.add(p, "straggler_ratio")  # a finite number over 1: nan and inf refused, exit 2 naming it


def _seconds(v, what: str) -> float:
    from .inputs import parse_duration
    s = parse_duration(str(v), what) if not isinstance(v, (int, float)) or isinstance(v, bool) else float(v)
    if s is None or not 0 < s < float("inf"):  # runward.toml's nan and inf are floats: a stall never called
        raise BadInput(f"invalid {what} {v!r}", "give a duration over 0, e.g. 5m, 90s or 300")
    return s


def from_config(health: dict, name: str = "NAME") -> dict:
    """{"after", "ratio"} from a [runs.NAME.health] table (stall = S is stall_after's old name)."""
    out = {}
    if "stall_after" in health and "stall" in health:
        raise BadInput(f"[runs.{name}.health] has both stall and stall_after",
                       "keep stall_after (stall is its old name)")
    v = health.get("stall_after", health.get("stall"))
    if v is not None:
        out["after"] = _seconds(v, f"[runs.{name}.health] stall_after")
    if health.get("straggler_ratio") is not None:
        out["ratio"] = _ratio(health["straggler_ratio"], f"[runs.{name}.health] straggler_ratio")
    return out


def _ratio(v, what: str) -> float:
    """runward.toml's and the API's straggler_ratio, by the declared option's check (spec/options.py):
    nan (`v <= 1` is False for it) and inf pass a plain `v <= 1` and judge no rank a straggler."""
    from .options import OPTS, problem
    bad = problem(OPTS["straggler_ratio"], v)
    if bad:
        raise BadInput(f"invalid {what} {v!r}: {bad}", "give a number over 1, e.g. 3 (a rank 3 x slower than the median)")
    return float(v)


def options(run_cfg: dict | None, args=None, name: str = "NAME") -> dict:
    """The run's stall options: runward.toml's, then the flags over them."""
    out = from_config(dict((run_cfg or {}).get("health") or {}), name)
    after = getattr(args, "stall_after", None)
    if after is not None:
        out["after"] = _seconds(after, "--stall-after")
    ratio = getattr(args, "straggler_ratio", None)
    if ratio is not None:
        out["ratio"] = _ratio(ratio, "--straggler-ratio")
    return out
