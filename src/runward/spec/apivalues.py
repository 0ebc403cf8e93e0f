"""The Python API's own value shapes (gpus, env, an argv, files, metric names, attempt numbers),
checked as they are given (a string is never read as its characters: command="python3" would be
the argv ["p", "y", ...], metric="loss" four metrics).

gpus=[0, 1] and env={"K": "V"} reach the operations as they are, a list of ints and a dict (the
CLI's verbs make the same of --gpus 0,1 and --env K=V). Each is checked here, not guessed:
int("x") raised a ValueError out of runward.start (the API answers with results), int(1.5) and
int(True) picked GPU 1 unasked, and a value of None (restart's "unset") or an int started a job
with A="None" or A="1". Each is refused as BadInput (exit 2, as the CLI's --gpus x / --env),
nothing started."""

from __future__ import annotations

from collections.abc import Mapping

from ..agent.core.secrets import redact_value
from ..errors import BadInput


def gpu_indices(items) -> list[int] | None:
    """[0, 1] as it is; anything but a sequence of non-negative ints (bool excluded) refused."""
    if items is None:
        return None
    if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
        raise BadInput(f"invalid gpus {items!r}: not a list of GPU indices", "give a list of ints, e.g. gpus=[0, 1]")
    out = []
    for i in items:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:
            raise BadInput(f"invalid gpus {list(items)!r}: {i!r} is not a GPU index (an int >= 0)",
                           "give a list of ints, e.g. gpus=[0, 1]")
        out.append(i)
    return out


def env_values(env, *, unset_ok: bool = False) -> dict | None:
    """{"K": "V"} as it is (None where empty). Keys: non-empty str without '=' or NUL (a K=V
    word of "A=B": "1" would set A to "B=1"; an empty name is refused as the CLI's --env "=x"
    is); values: str (None or "" where it means unset, restart: as None)."""
    if env is None:
        return None
    if not hasattr(env, "items"):
        raise BadInput(f"invalid env {env!r}: not a mapping", 'give a dict of strings, e.g. env={"LR": "3e-4"}')
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or "=" in k or "\0" in k:
            raise BadInput(f"invalid env name {k!r}: not a string without '=' or NUL",
                           'give a dict of strings, e.g. env={"LR": "3e-4"}')
        if unset_ok and v in (None, ""):
            v = None
        elif not isinstance(v, str) or "\0" in v:
            what = "a string (None unsets it on restart only)" if not unset_ok else "a string or None"
            raise BadInput(f"invalid env value {k}={v!r}: not {what}",
                           f'quote it, e.g. env={{"{k}": "{v}"}}' if v is not None else f'give a string for {k}')
        if not k:
            raise BadInput(f"invalid --env entry {'=' + redact_value(k, v or '')!r}", "write --env NAME=VALUE, or "
                           "--env NAME to pass NAME from this shell's environment")
        out[k] = v
    return out or None


def strings(value, keyword: str, example: str) -> list | None:
    """A list (or tuple) of strings; None stays None. One string is refused, not split."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        nul = [v for v in value if "\0" in v]
        if nul:  # no argv word or path holds one: the OS refuses it only after the run's record is written
            raise BadInput(f"{keyword}: {nul[0]!r} contains a NUL character", f"give a list without NUL, e.g. "
                           f"{keyword}={example}")
        return list(value)
    what = "one string" if isinstance(value, str) else f"of type {type(value).__name__}"
    raise BadInput(f"{keyword}={value!r} is {what}, not a list of strings", f"give a list, e.g. {keyword}={example}")


def file_specs(value, keyword: str = "files") -> list:
    """{FROM: TO} or "FROM:TO" strings, as push's and pull's words."""
    if isinstance(value, Mapping):
        return [f"{k}:{v}" for k, v in value.items()]
    return strings(value, keyword, '["train.py:/root/work/train.py"]') or []


def attempt_list(value, keyword: str = "attempts") -> str | None:
    """Attempt numbers as the CLI's 1,3 (checked there: each >= 1)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(a, int) and not isinstance(a, bool) for a in value):
        return ",".join(str(a) for a in value)
    raise BadInput(f"{keyword}={value!r} is not a list of attempt numbers", f"give a list, e.g. {keyword}=[1, 3]")
