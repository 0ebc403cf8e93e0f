"""What a person wrote, read and checked before any request (api.py's split, by concern):
--env entries and env files (their secrets kept out of every child this process starts),
runward.toml's env_from, sizes (log_max), durations (--since, --older-than), metric limits
(--min/--max) and a run's health rules. Each bad value is BadInput naming the flag and the fix."""

from __future__ import annotations

import os

from ..agent.core.secrets import redact_value
from ..errors import UTF8_HINT, BadInput, is_text, shown_bytes
from .options import duration
from ..targets.sshconf import HIDDEN_ENV


def parse_env(items: list[str] | None) -> dict:
    """--env K=V entries; `--env NAME` (no '=') takes NAME's value from this process's own
    environment, so a secret never has to be typed on a command line (where /proc/PID/cmdline
    and the shell's history keep it)."""
    return read_env(items)[0]


def read_env(items: list[str] | None, files: list[str] | None = None) -> tuple[dict, dict]:
    """(values, sources) of --env-file PATH files (read first) and --env entries (over them).
    sources names each entry whose value came from the CLI's environment ("environment") or
    a file ("file:PATH"): the target stores those names and where they came from, never
    their values, and `restart` reads them again from the same place."""
    values: dict = {}
    sources: dict = {}
    for path in files or []:
        for k, v in read_env_file(path).items():
            values[k], sources[k] = v, "file:" + os.path.abspath(path)
    for item in items or []:
        k, sep, v = item.partition("=")
        if not k or "\0" in item:
            # shown by the rule the target's replies follow: a value typed here is no less secret
            raise BadInput(f"invalid --env entry {k + sep + redact_value(k, v)!r}", "write --env NAME=VALUE, or "
                           "--env NAME to pass NAME from this shell's environment")
        if sep:
            values[k] = v
            sources.pop(k, None)
        elif k in os.environ:
            values[k], sources[k] = os.environ[k], "environment"
            HIDDEN_ENV.add(k)
        else:
            raise BadInput(f"--env {k}: {k} is not set in this environment",
                           f"export {k}=... first, or write --env {k}=VALUE")
    return values, sources


def read_env_file(path: str) -> dict:
    """Docker's --env-file format: KEY=VALUE per line, taken verbatim (no quotes removed, no
    variables expanded); blank lines and lines starting with # are skipped; a leading
    `export ` is allowed; a bare KEY takes its value from this environment."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise BadInput(f"--env-file {path}: {e.strerror}", "give a readable file of KEY=VALUE lines")
    except UnicodeDecodeError:
        raise BadInput(f"--env-file {path}: not UTF-8 text", "give a text file of KEY=VALUE lines")
    out = {}
    for n, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("export "):
            text = text[len("export "):].lstrip()
        k, sep, v = text.partition("=")
        k = k.strip()
        if not k or any(c.isspace() for c in k) or "\0" in line:
            raise BadInput(f"--env-file {path}, line {n}: not KEY=VALUE", "write one KEY=VALUE per line")
        if sep:
            out[k] = line.split("=", 1)[1]
        elif k in os.environ:
            out[k] = os.environ[k]
        else:
            raise BadInput(f"--env-file {path}, line {n}: {k} has no value and is not set in this environment",
                           f"write {k}=VALUE")
    return out


def resolve_env_from(env_from: dict | None) -> dict:
    """The values of a stored spec's env_from ({NAME: "environment" | "file:PATH"}), read
    again from the same places, for restart."""
    values = {}
    files: dict = {}
    for k, src in (env_from or {}).items():
        if src == "environment":
            if k not in os.environ:
                raise BadInput(f"{k} was taken from the environment at start, and is not set now",
                               f"export {k}=... and restart again, or give --env {k}=VALUE")
            values[k] = os.environ[k]
            HIDDEN_ENV.add(k)
        elif isinstance(src, str) and src.startswith("file:"):
            path = src[len("file:"):]
            if path not in files:
                files[path] = read_env_file(path)
            if k not in files[path]:
                raise BadInput(f"{k} was read from {path} at start, and that file no longer has it",
                               f"add it back to {path}, or give --env {k}=VALUE")
            values[k] = files[path][k]
    return values


def parse_size(text: str | int, what: str = "log_max") -> int:
    """Bytes of a size written as 2G, 512M, 64k, 64KiB or 1048576 (powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        n = text
    else:
        import re
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", str(text))
        if not m:
            raise BadInput(f"invalid {what} {text!r}", "write a size such as 64k, 512M or 2G")
        n = int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))
    if n < 1024:
        raise BadInput(f"invalid {what} {text!r}: below 1K", "write a size such as 64k, 512M or 2G")
    return n


def health_rules(run_cfg: dict | None, *, mins: dict | None = None, maxs: dict | None = None,
                 stall: float | None = None, drop: float | None = None, ratio: float | None = None) -> dict:
    """Rules for the agent's log scan: runward.toml's [runs.NAME.health], then flags. STALL is
    stall_after in seconds (agent/health/stall.py: the step, or the log's silence where it has none)."""
    h = dict((run_cfg or {}).get("health") or {})
    after = h.get("stall_after", h.get("stall"))  # stall: its old name (spec/stallopts.py checks both)
    if after is not None and not isinstance(after, (int, float)):
        after = parse_duration(str(after), "[health] stall_after")
    if h.get("drop_fraction") is not None:  # watch --drop's check (spec/options.py): nan judged nothing
        from .options import OPTS, problem
        bad = problem(OPTS["drop"], h["drop_fraction"])
        if bad:
            raise BadInput(f"invalid [health] drop_fraction {h['drop_fraction']!r}: {bad}",
                           "give a fraction over 0 and at most 1, e.g. drop_fraction = 0.5")
    rules = {"min": health_limits(h, "min"), "max": health_limits(h, "max"),
             "stall_after": after, "straggler_ratio": h.get("straggler_ratio"),
             "drop_fraction": h.get("drop_fraction"), "metrics": _named_regexes(h.get("metrics"))}
    from .baselines import rules as baseline_rules
    rules["baseline"] = baseline_rules(h)  # tok_s = { min_ratio = 0.95, baseline = "best" }
    rules["min"].update(mins or {})
    rules["max"].update(maxs or {})
    if stall is not None:
        rules["stall_after"] = stall
    if ratio is not None:
        rules["straggler_ratio"] = ratio
    if drop is not None:
        rules["drop_fraction"] = drop
    return {k: v for k, v in rules.items() if v not in (None, {}, [])}


def refuse_idle_without_gpus(name: str, kw: dict) -> None:
    """An idle rule reads the utilization of the run's own GPUs (`gpus`): on a run without
    them it could never fire, and a rule that never fires passes every watch. Refused, exit 2."""
    if ((kw.get("supervise") or {}).get("health") or {}).get("idle") and not kw.get("gpus"):
        raise BadInput(f"[runs.{name}.health] idle on a run without gpus: it judges the run's own GPUs, "
                       "so it could never fire", f"give the run its GPUs (gpus = [0, 1] in [runs.{name}], "
                       "or --gpus 0,1), or remove idle")


def parse_limits(items: list[str] | None, flag: str) -> dict:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        try:
            if not sep or not k:
                raise ValueError
            out[k.strip()] = limit_number(v)
        except ValueError:
            raise BadInput(f"invalid {flag} {item!r}", f"write {flag} METRIC=NUMBER, e.g. {flag} tok_s=14500")
    return out


def limit_number(v) -> float:
    """A --min/--max value, or one of [health] min/max: a finite number, or its text with
    `,` or `_` between digits (14,500); ValueError otherwise (14.5K, true). A floor of nan
    would never alert (healthy), one of inf always; a string would reach the shim's health
    check as written, and its comparison would kill the shim."""
    import math
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(v)
    n = float(v.replace(",", "").replace("_", "")) if isinstance(v, str) else float(v)
    if not math.isfinite(n):
        raise ValueError(v)
    return n


def _named_regexes(metrics):
    """[health] metrics = { NAME = "REGEX" }: the log parser compiles each on the target, in
    every scan the shim makes too; a bad one there is a traceback (re.error), the shim's end."""
    if metrics is None:
        return None
    hint = 'metrics = { lr = "lr=([0-9.e-]+)" } (a name, then a Python regex whose group 1 is the value)'
    if not isinstance(metrics, dict):
        raise BadInput(f"invalid [health] metrics {metrics!r}: not a table", hint)
    import re
    for name, rx in metrics.items():
        try:
            re.compile(rx)
        except (re.error, TypeError) as e:
            raise BadInput(f"invalid [health] metrics.{name} {rx!r}: {e}", hint)
    return metrics


def health_limits(h: dict, key: str) -> dict:
    """[health] min or max (KEY): {METRIC: number}, each value by --min/--max's rule;
    BadInput naming the key and the metric."""
    table = h.get(key)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise BadInput(f"invalid [health] {key} {table!r}: not a table", f"write {key} = {{ tok_s = 14500 }}")
    out = {}
    for metric, v in table.items():
        try:
            out[metric] = limit_number(v)
        except ValueError:
            raise BadInput(f"invalid [health] {key}.{metric} {v!r}: not a number",
                           f"write {key} = {{ {metric} = 14500 }} (a plain number, as --{key} {metric}=14500 takes)")
    return out


def parse_duration(text: str | None, flag: str) -> float | None:
    """`7d`, `10m`, `1h30m`, `90s`, `2w`, or plain seconds, as seconds (None stays None); else
    BadInput (exit 2). The grammar is options.duration's, which every seconds option takes."""
    if text is None:
        return None
    v = duration(text)
    if v is None:
        raise BadInput(f"invalid {flag} {text!r}", f"write a duration like {flag} 7d, 12h, 10m, 90s or 1h30m")
    return v


def refuse_undecodable(**fields) -> None:
    """A start's values refused as bad input (exit 2, naming the argument) where one holds a
    byte that is not UTF-8: a Linux argv is bytes, but the request, the target's records and
    the log's header are UTF-8 text, and the target's agent failed writing them (a traceback,
    exit 3). argv: each argument of the command; env: each value (never shown: it may be a
    secret), each name; any other keyword: its flag's value (cwd, sh, log, ready)."""
    for i, arg in enumerate(fields.pop("argv", None) or [], 1):
        if isinstance(arg, str) and not is_text(arg):
            raise BadInput(f"argument {i} of the command, '{shown_bytes(arg)}', is not UTF-8 text", UTF8_HINT)
    for k, v in (fields.pop("env", None) or {}).items():
        if isinstance(k, str) and not is_text(k):
            raise BadInput(f"--env name '{shown_bytes(k)}' is not UTF-8 text", UTF8_HINT)
        if isinstance(v, str) and not is_text(v):
            raise BadInput(f"--env {k}: its value is not UTF-8 text", UTF8_HINT)
    for flag, v in fields.items():
        if isinstance(v, str) and not is_text(v):
            raise BadInput(f"--{flag.replace('_', '-')} '{shown_bytes(v)}' is not UTF-8 text", UTF8_HINT)
