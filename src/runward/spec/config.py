"""runward.toml: named targets and runs.

Found in the current directory or its parents, or given with --config. Example:

    [targets.gpu1]
    on = "ssh://root@10.1.2.6:10638/pct:200"

    [runs.train]
    on = "gpu1"
    command = ["python3", "train.py", "--lr", "3e-4"]   # or: sh = "python3 train.py | tee x"
    cwd = "/root/work"
    env = { TRAIN_PROFILE_INTERVAL = "60" }
    files = ["train.py:/root/work/train.py"]            # LOCAL:REMOTE, deployed by `deploy`
    deploy_on_restart = true                             # `restart` deploys them first (as --deploy)
    settle = 5
    ready = "^step 1 "
    gpus = [0, 1]
    stop_signal = "INT"
    grace = 120
    log_max = "2G"                                       # rotate the log past 2 GiB ...
    log_keep = 3                                         # ... keeping log.1 .. log.3

    [runs.train.health]
    min = { tok_s = 14500 }
    stall = 300
"""

from __future__ import annotations

import os

from ..errors import BadInput
from .options import OPTS, seconds
from ..targets import ENGINE_DURATION_KEYS, ENGINE_OPTION_KEYS, Target, engine_options, parse_target

FILENAME = "runward.toml"
# [runs.NAME]'s keys: each declared option that runward.toml takes (spec/options.py), and the keys no
# start flag says: where the run lives (on, nodes: docs/multinode.md), its command, its files, its
# health table, backoff's cap (docs/supervision.md), stop_checkpoint, snapshots (spec/snapbounds.py) and
# deploy_on_restart (`restart` deploys the run's files first, as --deploy)
RUN_KEYS = {*(name for name, opt in OPTS.items() if opt.toml), "on", "nodes", "command", "files", "health",
            "backoff_max", "stop_checkpoint", "snapshots", "deploy_on_restart"}
TARGET_KEYS = {"on", "home", "python", *ENGINE_OPTION_KEYS}  # an engine's options (targets.ENGINES)
MCP_KEYS = {"allow", "targets"}  # what `runward mcp` lets agents do (mcp/server.py, docs/agents.md)


class Runs(dict):
    """runward.toml's [runs]: NAME -> its table. A table with a bad declared value (options'
    check_run: settle = -1, stop_signal = "TERMM") is kept, and reading that table raises its
    error, exit 2 naming the file, the table and the key: the verbs that would act on the
    value refuse it before anything is done, while `status`, `logs`, `stop` of that run and
    every verb on the other runs go on (a typo in one run's settle blocked them all).
    Where a run lives (`on`, `nodes`: checked as the file is read) never raises: placement();
    one key of a table: value(), raising only when that key is the bad one."""

    def __init__(self):
        super().__init__()
        self.bad: dict[str, dict[str, tuple[str, str]]] = {}  # run -> key -> (message, hint)

    def _check(self, name: str, key: str | None = None) -> None:
        for k, (message, hint) in self.bad.get(name, {}).items():
            if key is None or key == k:
                raise BadInput(message, hint)

    def __getitem__(self, name: str) -> dict:
        self._check(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        return self[name] if name in self else default

    def items(self):
        return [(n, self[n]) for n in self]

    def values(self):
        return [self[n] for n in self]

    def placement(self, name: str) -> dict:
        """{"on", "nodes"} of run NAME (an empty dict for a run not defined)."""
        r = super().get(name) or {}
        return {k: r[k] for k in ("on", "nodes") if k in r}

    def value(self, name: str, key: str, default=None):
        """KEY of run NAME's table (DEFAULT where either is absent)."""
        self._check(name, key)
        return (super().get(name) or {}).get(key, default)


class Config:
    def __init__(self, path: str | None = None):
        self.path = path
        self.targets: dict[str, dict] = {}
        # [targets.X] tables whose own check failed: kept, and raised only where X is used (by
        # --on, by a run that names it, by a project-wide status, which says it failed beside
        # the others), so a typo in one target's table blocks no verb on the others
        self.bad_targets: dict[str, BadInput] = {}
        self.runs = Runs()
        self.ssh_config: str | None = None
        self.ssh_alive_timeout: float | None = None
        self.mcp: dict = {}
        self.stacks_bring = False  # [stacks] bring: `stacks` may push runward's py-spy (docs/diagnosis.md)

    def target(self, text: str | None, run: str | None = None) -> Target:
        """--on TEXT (a name from [targets] or a target string), else the run's `on`, else local."""
        where = "--on"
        if text is None and run is not None and run in self.runs:
            text, where = self.runs.placement(run).get("on"), f"[runs.{run}] on"
        if text is None:
            return Target(())
        if text in self.bad_targets:
            raise self.bad_targets[text]
        if text in self.targets:
            t = self.targets[text]
            return parse_target(t["on"], label=text, home=t.get("home"), python=t.get("python"),
                                engine_options=engine_options(t))
        if isinstance(text, str) and looks_like_a_name(text):
            raise self.unknown_target(text, where)
        return parse_target(text)

    def unknown_target(self, name: str, where: str) -> BadInput:
        """A word that is neither local nor a target string is meant as a target's name."""
        import difflib
        known = ", ".join(self.targets) if self.targets else (
            "none: runward.toml has no [targets]" if self.path else "none: no runward.toml found")
        close = difflib.get_close_matches(name, list(self.targets), n=1)
        hint = (f"did you mean {close[0]}? " if close else "") + (
            f"define it in runward.toml: [targets.{name}] on = \"ssh://HOST\"; or give a target: "
            "local, ssh://[user@]host[:port], podman:NAME, ssh://host/pct:200")
        return BadInput(f"no target {name} (known: {known})" + ("" if where == "--on" else f", named by {where}"), hint)

    def named_targets(self) -> list[Target]:
        return [parse_target(t["on"], label=name, home=t.get("home"), python=t.get("python"),
                             engine_options=engine_options(t))
                for name, t in self.targets.items()]


def looks_like_a_name(text: str) -> bool:
    """A bare word (gpu9): not `local`, no scheme, no KIND:NAME hop, no path."""
    return text != "local" and ":" not in text and "/" not in text and bool(text.strip())


def find(start: str | None = None) -> str | None:
    try:
        d = os.path.realpath(start or os.getcwd())
    except FileNotFoundError:  # the shell's directory was removed under it
        raise BadInput("the current directory no longer exists: runward.toml cannot be looked for from it",
                       "cd to an existing directory, or give --config PATH")
    while True:
        cand = os.path.join(d, FILENAME)
        if os.path.isfile(cand):
            return cand
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def load(path: str | os.PathLike | None = None) -> Config:
    if path is None:
        p = os.environ.get("RUNWARD_CONFIG") or find()
        if p is None:
            return Config()
    else:
        if not isinstance(path, (str, os.PathLike)):  # the API's config=5: a TypeError out of os.fspath
            raise BadInput(f"invalid config {path!r}: not a path", "give the path of a runward.toml")
        p = os.fspath(path)
        if not os.path.isfile(p):
            raise BadInput(f"config file not found: {p}", "give an existing --config path")
    try:
        with open(p, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise BadInput(f"cannot read config {p}: {e.strerror}", "check the path and its permissions")
    return _validate(p, _parsed(p, raw))


def _parsed(p: str, raw: bytes) -> dict:
    """The TOML of raw. tomllib's imports (typing, datetime, string, its regexes) cost a call
    more than the rest of its config handling (~6 ms of a ~120 ms warm status over ssh), so
    the parse is kept in the cache (_kept) under the blake2b of the exact bytes it came from
    and used only when the file's bytes hash the same: no timestamp can make it stale. A file
    holding a secret (_holds_secret) is parsed each call and kept nowhere."""
    kept = _kept(p, raw)
    if kept is not None:
        return kept
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{p}: invalid TOML: {e}", "fix the syntax (https://toml.io)")
    _keep(p, raw, data)
    return data


def _blake2b(data: bytes) -> str:
    try:
        from _blake2 import blake2b  # what hashlib.blake2b is, without hashlib's OpenSSL (~2 ms)
    except ImportError:
        from hashlib import blake2b
    return blake2b(data, digest_size=32).hexdigest()


def _kept(p: str, raw: bytes) -> dict | None:
    """The parse kept from these very bytes, or None (none kept, another file's bytes, a
    cache file torn or not ours)."""
    import json
    from ..cache import read_cache
    try:
        kept = json.loads(read_cache(_kept_path(p)) or b"null")
    except (ValueError, RecursionError):  # torn, or nested past the decoder's depth: not ours
        return None
    if isinstance(kept, dict) and kept.get("blake2b") == _blake2b(raw) and isinstance(kept.get("doc"), dict):
        return kept["doc"]
    return None


def _kept_path(p: str) -> str:
    from ..cache import cache_path
    return cache_path("config-" + _blake2b(os.path.realpath(p).encode())[:16])


def _keep(p: str, raw: bytes, data: dict) -> None:
    """Keep the parse for the next call, unless the file holds a secret or a value JSON
    cannot give back as it is (a TOML date, a NaN)."""
    import json
    if _holds_secret(data):
        return
    try:
        text = json.dumps({"blake2b": _blake2b(raw), "doc": data})
    except (TypeError, ValueError):
        return
    if json.loads(text)["doc"] != data:
        return
    from ..cache import write_cache
    write_cache(_kept_path(p), text.encode())


def _holds_secret(data) -> bool:
    """A secret by agent/core/secrets.py's rule anywhere in the parse: a key under a secret name
    in any table (an env entry, [runs.X.env] HF_TOKEN = ...; and the same entry where the
    file is refused or the env misplaced: [[runs.X.env]], env = [{...}], env = { A = {...} },
    a misspelt [runs.X.environment], all kept before the validation refused them), or a URL
    with a password in any string (a notify URL's password is written to no file,
    docs/supervision.md). Such a file is never kept. A harmless key that the rule calls
    secret (a metric tokens_s) only costs that file its cache."""
    from ..agent.core.secrets import is_secret_name, mask_url_passwords
    if isinstance(data, str):
        return mask_url_passwords(data) != data
    if isinstance(data, list):
        return any(_holds_secret(v) for v in data)
    if isinstance(data, dict):
        return any(is_secret_name(k) or _holds_secret(k) or _holds_secret(v) for k, v in data.items())
    return False


def _validate(p: str, data: dict) -> Config:
    cfg = Config(path=p)
    unknown = set(data) - {"targets", "runs", "ssh", "mcp", "stacks"}
    if unknown:
        raise BadInput(f"{p}: unknown section(s) {', '.join(sorted(unknown))}",
                       _nearest(unknown, ("targets", "runs", "ssh", "mcp", "stacks"))
                       + "sections are [targets.*], [runs.*], [ssh], [mcp], [stacks]")
    cfg.mcp = _mcp_section(p, data.get("mcp") or {})
    st = data.get("stacks") or {}
    if set(st) - {"bring"} or not isinstance(st.get("bring", False), bool):
        raise BadInput(f"{p}: [stacks] takes one key, bring = true|false", "[stacks]\nbring = true")
    cfg.stacks_bring = st.get("bring", False)
    ssh = data.get("ssh", {})
    bad = set(ssh) - {"config", "alive_timeout"} if isinstance(ssh, dict) else {"(not a table)"}
    if bad:
        raise BadInput(f"{p}: [ssh] unknown key(s) {', '.join(sorted(bad))}",
                       _nearest(bad, ("alive_timeout", "config")) + "keys: alive_timeout, config")
    if "config" in ssh:
        cfg.ssh_config = os.path.realpath(os.path.join(os.path.dirname(p), os.path.expanduser(ssh["config"])))
    if "alive_timeout" in ssh:
        from .options import seconds
        v = seconds(ssh["alive_timeout"])  # "15s" as 15
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 3 <= v <= 3600:
            raise BadInput(f"{p}: [ssh] alive_timeout = {v!r}",
                           "give the seconds after which a silent link counts as down, 3 to 3600 (default 15), "
                           'e.g. alive_timeout = 15 or "15s"')
        cfg.ssh_alive_timeout = float(v)
    for name, t in (data.get("targets") or {}).items():
        t = _target_seconds(t)
        try:
            _check_target(p, name, t)
        except BadInput as e:  # kept, raised where the target is used (Config.bad_targets)
            cfg.bad_targets[name] = e
            continue
        cfg.targets[name] = t
    for name, r in (data.get("runs") or {}).items():
        if not isinstance(r, dict):
            raise BadInput(f"{p}: [runs.{name}] must be a table", "see the example in docs")
        bad = set(r) - RUN_KEYS
        if bad:
            raise BadInput(f"{p}: [runs.{name}] unknown key(s) {', '.join(sorted(bad))}",
                           _nearest(bad, RUN_KEYS) + f"keys: {', '.join(sorted(RUN_KEYS))}")
        if "command" in r and "sh" in r:
            raise BadInput(f"{p}: [runs.{name}] has both command and sh", "keep one")
        if "command" in r and (not isinstance(r["command"], list) or not all(isinstance(a, str) for a in r["command"])):
            raise BadInput(f"{p}: [runs.{name}] command must be a list of strings", 'command = ["python3", "train.py"]')
        if "nodes" in r and (not isinstance(r["nodes"], list) or not all(isinstance(a, str) for a in r["nodes"])):
            raise BadInput(f"{p}: [runs.{name}] nodes must be a list of targets", 'nodes = ["gpu1", "gpu2"]')
        if "deploy_on_restart" in r and not isinstance(r["deploy_on_restart"], bool):
            raise BadInput(f"{p}: [runs.{name}] deploy_on_restart must be true or false", "deploy_on_restart = true")
        if r.get("deploy_on_restart") and not r.get("files"):
            raise BadInput(f"{p}: [runs.{name}] deploy_on_restart = true, but the run has no files to deploy",
                           f'add files = ["LOCAL:REMOTE"] to [runs.{name}], or remove deploy_on_restart')
        if "env" in r and not isinstance(r["env"], dict):
            raise BadInput(f"{p}: [runs.{name}] env must be a table", 'env = { KEY = "value" }')
        from .options import problems_of_run  # each declared key's value (spec/options.py), as the flags are
        bad = _durations(f"{p}: [runs.{name}]", r)
        bad.update(problems_of_run(f"{p}: [runs.{name}]", r))
        bad.update(_api_shapes(f"{p}: [runs.{name}]", r))
        if "health" in r and "health" not in bad:  # each rule by its flag's check (spec/inputs.py)
            from .supervision import check_health_table
            why = check_health_table(r["health"], f"{p}: [runs.{name}]", name)
            if why:
                bad["health"] = why
        if "log_keep" in r and "log_max" not in r and "log_keep" not in bad:  # rotation is by size
            bad["log_keep"] = (f"{p}: [runs.{name}] log_keep = {r['log_keep']!r} without log_max",
                               f'the log rotates by size: add log_max = "2G" to [runs.{name}], or remove log_keep')
        if bad:
            cfg.runs.bad[name] = bad
        cfg.runs[name] = r
    return cfg


def _target_seconds(t):
    """An engine's duration keys ([targets.X] pending_timeout = "5m") as seconds, as a run's
    are (_durations); a word that says none stays, for the engine's check to refuse, naming it."""
    if not isinstance(t, dict):
        return t
    return {k: seconds(v) if k in ENGINE_DURATION_KEYS else v for k, v in t.items()}


def _check_target(p: str, name: str, t) -> None:
    if not isinstance(t, dict) or "on" not in t:
        raise BadInput(f"{p}: [targets.{name}] needs on = \"ssh://...\"", "see `runward --help`")
    bad = set(t) - TARGET_KEYS
    if bad:
        raise BadInput(f"{p}: [targets.{name}] unknown key(s) {', '.join(sorted(bad))}",
                       _nearest(bad, TARGET_KEYS) + f"keys: {', '.join(sorted(TARGET_KEYS))}")
    try:  # validated now; an engine option's error names the file, as the table's own errors do
        parse_target(t["on"], label=name, engine_options=engine_options(t))
    except BadInput as e:
        if not e.message.startswith(f"[targets.{name}]"):
            raise
        raise BadInput(f"{p}: {e.message}", e.hint) from None


def _api_shapes(where: str, r: dict) -> dict:
    """A run's gpus and env by the library's check (spec/apivalues.py), as runward.start(gpus=,
    env=) refuses them: {key: (message, hint)}. The start reads gpus = [true] or [1.5] as GPU
    1 (int()) and hands env's values to the job as Python writes them (A=True, A=[1]), so each
    is refused here, naming the entry. gpus = "0,1" and gpus = 1 are the flag's words, read
    (and checked) by its parser as the table is started."""
    from .apivalues import env_values, gpu_indices
    out = {}
    g = r.get("gpus")
    for i in g if isinstance(g, list) else [g] if isinstance(g, (bool, float)) else []:
        try:
            gpu_indices([i])
        except BadInput:
            out["gpus"] = (f"{where} gpus = {g!r}: {i!r} is not a GPU index (an int >= 0)",
                           'give a list of GPU indices, e.g. gpus = [0, 1] or gpus = "0,1"')
            break
    env = r.get("env")
    for k, v in (env.items() if isinstance(env, dict) else ()):
        try:
            env_values({k: v})
        except BadInput:
            out["env"] = ((f"{where} env {k} = {v!r}: " + ("holds a NUL" if isinstance(v, str) else "not a string"),
                           f'write each value as a string without NUL, e.g. env = {{ {k} = "1" }}')
                          if isinstance(k, str) and k and "=" not in k and "\0" not in k else
                          (f"{where} env name {k!r}: not a name without '=' or NUL", 'env = { KEY = "value" }'))
            break
    return out


def _nearest(bad, known) -> str:
    """'did you mean command? ' for a typo of a known key (comand), as an unknown target says."""
    import difflib
    close = {k: m[0] for k in sorted(bad) for m in [difflib.get_close_matches(k, sorted(known), n=1)] if m}
    if not close:
        return ""
    if len(bad) == 1:
        return f"did you mean {next(iter(close.values()))}? "
    return "did you mean " + ", ".join(f"{v} for {k}" for k, v in close.items()) + "? "


# the tables of a run whose `timeout` is seconds, as the flag that says it (--gpu-wait-timeout,
# --checkpoint-timeout); their other keys are checked where they are used
_TIMEOUT_TABLES = {"wait_gpus_free": "wait_gpus_free = { timeout = \"5m\" }",
                   "stop_checkpoint": "stop_checkpoint = { signal = \"USR1\", timeout = \"10m\" }"}


_TABLE_KEYS = {"wait_gpus_free": ("timeout", "max_used_mib"), "stop_checkpoint": ("signal", "wait_for", "timeout")}


def _durations(where: str, r: dict) -> dict:
    """A run's seconds written as durations ("10s", "2m", "1h30m"), as the CLI's flags and the
    duration keys (backoff, min_uptime, [health] stall_after) take them, made seconds in R;
    {key: (message, hint)} for a table's timeout that says no duration, or a key of
    stop_checkpoint or wait_gpus_free that it does not take. A bare key's string
    that says none stays, for problems_of_run to refuse with its flag's hint."""
    from .options import OPTS, seconds
    for key, opt in OPTS.items():
        if opt.kind == "seconds" and opt.toml and key in r:
            r[key] = seconds(r[key])
    out = {}
    for key, keys in _TABLE_KEYS.items():  # a typo (max_used) would be a key nothing reads
        t = r.get(key)
        odd = set(t) - set(keys) if isinstance(t, dict) else ()
        if odd:
            out[key] = (f"{where} {key}: unknown key(s) {', '.join(sorted(odd))}",
                        _nearest(odd, keys) + f"keys: {', '.join(keys)}")
    for key, example in _TIMEOUT_TABLES.items():
        t = r.get(key)
        if key not in out and isinstance(t, dict) and "timeout" in t:
            v = seconds(t["timeout"])
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                out[key] = (f"{where} {key} timeout = {t['timeout']!r}: not a number of seconds or a duration",
                            f"give seconds >= 0 or a duration, e.g. {example}")
            else:
                r[key] = {**t, "timeout": float(v)}
    return out


def _mcp_section(p: str, m: dict) -> dict:
    bad = set(m) - MCP_KEYS if isinstance(m, dict) else {"(not a table)"}
    if bad:
        raise BadInput(f"{p}: [mcp] unknown key(s) {', '.join(sorted(bad))}",
                       _nearest(bad, MCP_KEYS) + f"keys: {', '.join(sorted(MCP_KEYS))}")
    for k in MCP_KEYS & set(m):
        v = m[k]
        if not (isinstance(v, str) or isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise BadInput(f"{p}: [mcp] {k} must be a list of strings", f'{k} = ["status", "logs"]'
                           if k == "allow" else f'{k} = ["gpu1"]')
    return m
