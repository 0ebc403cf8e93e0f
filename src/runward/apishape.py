"""The Python API's shaped values (issue 27), checked before they become a verb's options:
an argv, a mapping of environment entries, files, metric names, attempt numbers. A wrong
shape is BadInput (exit 2, naming the keyword and the fix), as the CLI's flags are; before,
Python's own error escaped (env="x": AttributeError), or worse, a string was read as its
characters (command="python3": argv ["p", "y", ...]; metric="loss": four metrics).
The declared options' values (options.py) are checked by operations.check."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import BadInput


def strings(value, keyword: str, example: str) -> list | None:
    """A list (or tuple) of strings; None stays None. One string is refused, not split."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    what = "one string" if isinstance(value, str) else f"of type {type(value).__name__}"
    raise BadInput(f"{keyword}={value!r} is {what}, not a list of strings", f"give a list, e.g. {keyword}={example}")


def env_words(value, keyword: str = "env") -> list:
    """{NAME: VALUE} as the CLI's NAME=VALUE words (a value of None: NAME=, which unsets)."""
    if value is None:
        return []
    if not isinstance(value, Mapping):  # its names are checked as --env's are (operations: '=x' refused there)
        raise BadInput(f"{keyword}={value!r} is not a mapping of names to values",
                       f'give a dict, e.g. {keyword}={{"LR": "3e-4"}}')
    return [f"{k}={'' if v is None else v}" for k, v in value.items()]


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
