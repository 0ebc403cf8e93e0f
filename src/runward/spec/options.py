"""Options declared once: a run's spec options that the CLI's flags, runward.toml's
[runs.NAME] keys, the Python API's keywords and the MCP tools' parameters all take. Each is
declared here (its name, kind, help, flag, metavar, whether runward.toml takes it), and
argparse (`add`), runward.toml's check (`problems_of_run`, raised by config.Runs) and the MCP tools' descriptions (`help`)
are derived from the declaration; tests/test_options_agree.py proves that the library's
signatures and the MCP tools' JSON Schemas agree with it, for every verb that takes one.

A kind is what a value must be, said the same way on every side:
  seconds  a number >= 0, finite, at most MAX_SECONDS (argparse: float; TOML: an integer or a float)
  count    an integer >= 0 / >= 1
  fraction a finite number over 0 and at most 1 (argparse: float; watch's --drop)
  ratio    a finite number over 1 (argparse: float; --straggler-ratio: N x the median rank)
  regex    a Python regular expression (compiled where it is checked)
  signal   a Linux signal's name or number (signals.known)
  text     a non-empty string
  flag     true or false                (argparse: a switch, store_true)
  choice   one of the declaration's choices
  int      a whole number, float a number (the flag's type; the module that uses it checks the range)
  word     text whose meaning one module parses, for the flag, runward.toml and the API alike
           (spec/supervision.py: durations, backoff, exit codes; spec/inputs.py: K=V env words, GPU lists,
           sizes; spec/stallopts.py), so its check and message are that module's on every side

An option one verb says in its own words (stacks' --timeout is py-spy's, exec's the
command's) keeps one declaration, its kind and name, with that verb's help in `verbs`.

Light on purpose: `runward --help` builds every parser from it (no regex compiled, no
module imported until a value is checked)."""

from __future__ import annotations

import math

from ..agent.core.runspec import GRACE_S, READY_TIMEOUT_S, SETTLE_S, STOP_SIGNAL

# The most seconds any option takes (~31 years). A larger finite value (--settle 1e30) passed
# every check and then overflowed the agent's clock arithmetic (OverflowError, AgentError exit
# 3) after the job was launched; no wait, grace or timeout needs more.
MAX_SECONDS = 10 ** 9


class Opt:
    """One option's declaration. A plain class, not a NamedTuple: typing's import (~2 ms) would
    be paid by every verb's parser that adds a declared flag (`status --json` included)."""
    __slots__ = ("name", "kind", "help", "metavar", "toml", "least", "verbs", "flags", "dest", "mcp", "choices",
                 "append")

    def __init__(self, name: str, kind: str, help: str, metavar: str | None, toml: bool | str = True,  # noqa: A002
                 least: int = 0, verbs: dict | None = None, flags: tuple = (), dest: str | None = None,
                 mcp: str | None = None, choices: tuple | None = None, append: bool = False):
        self.name = name        # the keyword, the MCP parameter, argparse's dest and the runward.toml key
        self.kind = kind        # one of the kinds above
        self.help = help
        self.metavar = metavar
        self.toml = toml        # a key of [runs.NAME]: True, checked here; "own": checked by the module that parses it
        self.least = least      # count: the smallest value
        self.verbs = verbs      # verb -> its own help, where it says the option in its own words
        self.flags = flags      # the spellings, where not just --NAME (logs' -n/--lines)
        self.dest = dest        # argparse's dest, where not NAME (logs' n)
        self.mcp = mcp          # the MCP tool's description, where a caller without flags needs other words
        self.choices = choices  # choice: the values it takes
        self.append = append    # the flag is repeatable, its values a list

    def __repr__(self) -> str:
        return f"Opt({self.name!r}, {self.kind!r})"

    @property
    def flag(self) -> str:
        return self.flags[-1] if self.flags else "--" + self.name.replace("_", "-")

    def help_for(self, verb: str | None) -> str:
        return (self.verbs or {}).get(verb, self.help)


OPTS = {o.name: o for o in (
    Opt("cwd", "text", "working directory on the target (default: here on the local target, or the directory of "
        "the runward.toml that defines the run; the remote user's home elsewhere; restart: the last attempt's)", "DIR"),
    Opt("log", "text", "log file on the target (appended; default under the run's dir)", "PATH"),
    Opt("settle", "seconds", "alive this long counts as started (default %g; restart: the last attempt's)" % SETTLE_S,
        "SECONDS"),
    Opt("ready", "regex", "also wait for a log line matching REGEX", "REGEX"),
    Opt("ready_timeout", "seconds", "with --ready: how long to wait for that line (default %g)" % READY_TIMEOUT_S,
        "SECONDS"),
    Opt("grace", "seconds", "seconds after the stop signal before KILL (default: the run's, else %g)" % GRACE_S,
        "SECONDS"),
    Opt("stop_signal", "signal", "the signal a stop sends first (default: the run's, else %s, torchrun's too); "
        "INT is Ctrl-C, torchrun's orderly stop" % STOP_SIGNAL, "SIG"),
    Opt("log_keep", "count", "with --log-max: rotated files kept (default 3)", "N"),
    Opt("straggler_ratio", "ratio", "alert `straggler` for a rank N times slower than the median rank (default 3)",
        "N", toml=False),  # runward.toml: [runs.NAME.health] straggler_ratio (spec/stallopts.py, the same check)
    Opt("drop", "fraction", "alert when throughput stays under FRACTION of its early median (default 0.5)",
        "FRACTION", toml=False),
    Opt("lock_timeout", "seconds", "give up after this long if another verb holds the run (default 30)", "SECONDS",
        toml=False),
    Opt("master_addr", "text", "several nodes: node 0's address as the others reach it (default: where ssh "
        "reached it)", "ADDR"),
    Opt("nproc_per_node", "count", "several nodes: sets WORLD_SIZE = nodes x N", "N", least=1),
    # start's own (restart's where said): words whose meaning one module parses for the flag,
    # runward.toml and the API alike (toml="own": a [runs.NAME] key that module checks)
    Opt("env", "word", "environment for the job (repeatable); a bare NAME passes NAME from this shell's "
        "environment, and its value is never stored on the target", "K=V|NAME", toml="own", append=True, verbs={
            "restart": "override/add environment entries; `K=` (empty) unsets K; a bare NAME passes NAME "
                       "from this shell's environment",
            "exec": "environment entry (repeatable); a bare NAME passes NAME from this shell's environment"}),
    Opt("env_file", "word", "KEY=VALUE lines (docker's format); values are passed, never stored; restart reads the "
        "file again", "PATH", toml=False, append=True,
        verbs={"restart": "KEY=VALUE lines (docker's format), never stored"}),
    Opt("keep_env", "flag", "keep the last attempt's --env K=V overrides (a run of runward.toml drops them by "
        "default)", "", toml=False),
    Opt("replace_grace", "float", "with --replace: the old attempt's grace (default: the grace it was started with)",
        "SECONDS", toml=False),
    Opt("gpus", "word", "sets CUDA_VISIBLE_DEVICES and records the GPUs", "0,1", toml="own"),
    Opt("gpu_wait_timeout", "float", "with --wait-gpus-free: how long to wait for the GPUs (default 300)", "SECONDS",
        toml=False),
    Opt("max_used", "float", "a GPU using at most this counts as free (default 1024)", "MiB", toml=False),
    Opt("log_max", "word", "rotate the log past SIZE (e.g. 2G), no line lost: log -> log.1 -> ... (runward.toml: "
        "log_max)", "SIZE", toml="own"),
    Opt("on_node_failure", "choice", "several nodes: when one node's job fails, stop the others (default) or let "
        "them run", None, toml="own", choices=("stop", "continue")),
    # the supervision policy (spec/supervision.py parses each, from the flag and runward.toml alike)
    Opt("restart", "choice", "restart policy, kept on the target by the shim (default never)", None, toml="own",
        choices=("never", "on-failure", "always")),
    Opt("max_restarts", "int", "give up (state gave_up) after N restarts (default 5)", "N", toml="own"),
    Opt("restart_window", "word", "count --max-restarts within this window, e.g. 1h (default: the whole run)",
        "DURATION", toml="own"),
    Opt("backoff", "word", "delay before a restart, doubled per failed start, to the cap (default 1s..60s; 0 for "
        "none)", "FIRST..CAP", toml="own"),
    Opt("min_uptime", "word", "an attempt that dies sooner is a failed start: the delay grows (default 10s)",
        "DURATION", toml="own"),
    Opt("restart_exit_codes", "word", "with on-failure: restart only on these codes", "1,2", toml="own"),
    Opt("no_restart_exit_codes", "word", "never restart on these codes", "3,4", toml="own"),
    Opt("notify", "word", "on exited, restarted, gave_up and every alert: run CMD (event JSON on stdin) or POST it "
        "to URL (repeatable)", "CMD|URL", toml="own", append=True),
    Opt("checkpoint", "word", "the run's checkpoints on the target, a glob from its cwd (e.g. 'ckpt/step_*'): its "
        "progress, {last_checkpoint}", "GLOB", toml="own"),
    Opt("checkpoint_marker", "word", "a checkpoint is complete when it holds this file (e.g. COMPLETE)", "FILE",
        toml="own"),
    Opt("checkpoint_saved", "word", "or when a log line matches REGEX naming it (group `path` or 1)", "REGEX",
        toml="own"),
    Opt("max_no_progress", "int", "give up after N attempts in a row that passed no step and saved no new "
        "checkpoint", "N", toml="own"),
    Opt("gpu_release_timeout", "word", "with --gpus: a restart waits this long for the old attempt's GPU memory to "
        "be released, then says blocked and starts once it is (default 60s)", "DURATION", toml="own"),
    Opt("resume_default", "word", "{last_checkpoint} while no complete checkpoint exists (default: empty)", "PATH",
        toml="own"),
    # spec/stallopts.py parses it (runward.toml: [runs.NAME.health] stall_after)
    Opt("stall_after", "word", "alert `stall` when the step has not advanced this long (before the first step: the "
        "log silent and the job's processes without CPU and I/O that long); default max(10 x median step time, "
        "120s)", "DURATION", toml=False),
    # stop's and restart's checkpoint before the stop (runward.toml's stop_checkpoint)
    Opt("no_checkpoint", "flag", "stop at once, even with stop_checkpoint", "", toml=False),
    Opt("checkpoint_signal", "signal", "the checkpoint signal (default USR1)", "SIG", toml=False),
    Opt("checkpoint_wait_for", "word", "the log line that says the checkpoint is saved (default: a newer complete "
        "--checkpoint)", "REGEX", toml=False),
    Opt("checkpoint_timeout", "float", "wait at most this long (default 600)", "SECONDS", toml=False),
    # the options of one or a few verbs that the Python API and the MCP tools take too
    Opt("replace", "flag", "stop the live attempt first (verified)", "", toml=False),
    # runward.toml's wait_gpus_free is true or a table {timeout, max_used_mib} (spec/config.py checks it)
    Opt("wait_gpus_free", "flag", "wait until --gpus are free, else refuse", "", toml="own"),
    Opt("native", "flag", "native (C/C++) frames too, where py-spy can (py-spy --native)", "", toml=False),
    Opt("bring_py_spy", "flag", "where the target has no py-spy, push this machine's (runward[stacks]; same "
        "architecture only), sha256-checked, kept under runward's home there; runward.toml [stacks] bring = true "
        "makes it the default", "", toml=False,
        mcp="true: where the target has no py-spy, push this machine's (runward[stacks]; same architecture only) "
            "into runward's home there, sha256-checked, and read the stacks with it; runward.toml's [stacks] "
            "bring = true makes it the default"),
    Opt("tree", "flag", "also every descendant of a match", "", toml=False),
    Opt("force", "flag", "run --sh even when the linter finds an error", "", toml=False),
    Opt("interactive", "flag", "the command is typed at a prompt (no enclosing `bash -c` carries its text)", "",
        toml=False),
    Opt("dry_run", "flag", "say what would be sent and deleted; change nothing", "", toml=False,
        verbs={"prune": "list what would be removed; remove nothing"}),
    Opt("lines", "count", "the last LINES lines (default 20; with --attempt, --since or --grep and no -f, every "
        "selected line)", "LINES", toml=False, flags=("-n", "--lines"), dest="n",
        mcp="the last N lines (default 20); with offset: at most N lines after it (default 200)"),
    Opt("offset", "count", "the lines after this byte offset of the log: the `offset` the previous call returned "
        "(--json), at most -n (default 200); pages through a log in bounded calls", "BYTES", toml=False,
        mcp="read on after this byte offset: the `offset` the previous logs call returned"),
    Opt("attempt", "count", "attempt N's section of the log only", "N", toml=False, least=1),
    Opt("timeout", "seconds", "kill the command after this long (default: none)", "SECONDS", toml=False,
        verbs={"stacks": "how long py-spy may take per process (default 10)"}),
    Opt("sh", "text", "run one shell command line instead of an argv", "STRING", toml="own",
        verbs={"exec": "one shell command line (linted first)"}),
    Opt("since", "text", "only health alerts of this last while, e.g. 10m", "DURATION", toml=False, verbs={
        "logs": "lines written in the last DURATION (10m, 2h): by the timestamps lines start with, else by their "
                "attempt's start time",
        "watch": "the rules also judge lines of this look-back before the window, e.g. 60s (default: from the "
                 "watch's start)"}),
    Opt("grep", "regex", "only lines matching this Python regex, matched on the target (with -f too)", "REGEX",
        toml=False, mcp="only lines matching this Python regex"),
    Opt("for_s", "seconds", "window (default 60)", "S", toml=False, flags=("--for",),
        verbs={"logs": "follow for S seconds, then exit"}),
    Opt("older_than", "text", "remove the stopped runs whose last attempt ended longer ago than this (7d, 12h, "
        "10m, 90s, 1h30m; a live run is never removed)", "DURATION", toml=False),
    Opt("logs", "flag", "remove its log files too (default: kept; a log in the run's directory is moved to "
        "<home>/removed/, one elsewhere stays where it is)", "", toml=False,
        verbs={"prune": "remove their log files too (default: kept, as `runward rm` keeps them)"}),
    Opt("signal", "signal", "the signal sent first (default TERM), then KILL", "SIG", toml=False),
    # the API's and MCP's confirm (kill): a dry run unless given
    Opt("yes", "flag", "signal them (without it: a dry run)", "", toml=False),
    # the API's and MCP's deploy=True / deploy=False (restart): one tri-state there, two switches here
    Opt("deploy", "flag", "deploy the run's files between stop and start", "", toml=False),
    Opt("no_deploy", "flag", "restart on the files the target has even where the local ones differ (without it, "
        "a restart refuses then), and with runward.toml's deploy_on_restart = true", "", toml=False),
)}

# The declared options each of these verbs takes, in the order its --help shows them: the verb adds
# its flags from it (verbs/start.py, verbs/restart.py), and its typed options (operations/) take a
# field for each, a switch off and any other not given (None) by default.
TAKES = {
    "start": ("env", "env_file", "cwd", "log", "settle", "ready", "ready_timeout", "replace", "replace_grace",
              "lock_timeout", "gpus", "wait_gpus_free", "gpu_wait_timeout", "log_max", "log_keep", "max_used",
              "stop_signal", "grace", "sh", "master_addr", "nproc_per_node", "on_node_failure",
              # the supervision policy (spec/supervision.py reads it, and runward.toml's keys of the same names)
              "restart", "max_restarts", "restart_window", "backoff", "min_uptime", "restart_exit_codes",
              "no_restart_exit_codes", "notify", "checkpoint", "checkpoint_marker", "checkpoint_saved",
              "max_no_progress", "gpu_release_timeout", "resume_default",
              "stall_after", "straggler_ratio"),  # spec/stallopts.py
    "restart": ("env", "env_file", "keep_env", "cwd", "lock_timeout", "settle", "ready", "ready_timeout", "grace",
                "stop_signal"),
}

# The declared options runward.toml and start's flags hand to the start request as they are (api.start's
# keywords, the agent's spec keys); master_addr and nproc_per_node are a multi-node run's, per node.
AS_IS = tuple(n for n, o in OPTS.items() if o.toml is True and n not in ("master_addr", "nproc_per_node"))

# The declared options a start request carries under their own names, each as given or as its
# default (api.start's keywords, the agent's request keys): runward.toml's as-is ones (less
# log_keep, sent only with log_max) and the command line's own for a replace and the run's lock.
START_REQUEST = (*(n for n in AS_IS if n != "log_keep"), "replace", "replace_grace", "lock_timeout")

_EXAMPLE = {"fraction": "0.5", "ratio": "3", "seconds": "120", "count": "3", "regex": '"^step 1 "', "signal": '"INT"', "text": '"..."'}


def help(name: str, verb: str | None = None) -> str:  # noqa: A001 - the declaration's help, as the MCP tools say it
    opt = OPTS[name]
    return opt.mcp or opt.help_for(verb)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> float | None:
    """`7d`, `10m`, `1h30m`, `90s`, `2w`, or plain seconds, as seconds; None where TEXT says
    none (a negative number, nan, inf, a word). inputs.parse_duration raises on the None."""
    s = str(text).strip().lower()
    try:
        v = float(s) if s and s[-1].isdigit() else _units(s)
    except ValueError:
        return None
    return v if 0 <= v < float("inf") else None  # negative, NaN, or "1e309" (float() reads it as inf)


def _units(s: str) -> float:
    total, num, seen = 0.0, "", False
    for c in s:
        if c.isdigit() or c == ".":
            num += c
        elif c in _UNITS and num:
            total += float(num) * _UNITS[c]
            num, seen = "", True
        else:
            raise ValueError(s)
    if num or not seen:
        raise ValueError(s)
    return total


def seconds(value):
    """VALUE as seconds where it is a number or says one: 120, "120", "2m", "1h30m" (the
    durations --backoff, --min-uptime and --stall-after take, so every seconds option takes
    them too); the value itself where it says none, for problem() to refuse."""
    if not isinstance(value, str):
        return value
    v = duration(value)
    return value if v is None else v


def problem(opt: Opt, value) -> str | None:
    """What is wrong with VALUE for OPT (None: nothing): a CLI string already converted, or
    a value from runward.toml, or one given to the Python API."""
    k = opt.kind
    if k == "flag":
        return None if isinstance(value, bool) else "not true or false"
    if k == "word":
        return None  # its module's parser checks it (the kinds above)
    if k == "choice":
        return None if value in opt.choices else "not one of " + ", ".join(opt.choices)
    if k in ("int", "float"):
        ok = (int,) if k == "int" else (int, float)
        return None if isinstance(value, ok) and not isinstance(value, bool) else "not a number" if k == "float" \
            else "not a whole number"
    if k == "seconds":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number of seconds"
        if not math.isfinite(value) or value < 0:
            return "not a finite number of seconds >= 0"
        if value > MAX_SECONDS:
            return "more than %d seconds (about 31 years)" % MAX_SECONDS
    elif k in ("fraction", "ratio"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        if not math.isfinite(value):
            return "not a finite number"
        if k == "fraction" and not 0 < value <= 1:
            return "not a fraction over 0 and at most 1"
        if k == "ratio" and value <= 1:
            return "not a number over 1"
    elif k == "count":
        if isinstance(value, bool) or not isinstance(value, int):
            return "not a whole number"
        if value < opt.least:
            return "less than %d" % opt.least
    elif not isinstance(value, str) or not value.strip():
        return "not a non-empty string"
    elif k == "text" and "\0" in value:  # a path or a shell line: the OS refuses it after the launch
        return "contains a NUL character"
    elif k == "signal":
        from .signals import known
        if not known(value):
            return "not a signal"
    elif k == "regex":
        import re
        try:
            re.compile(value)
        except re.error as e:
            return "not a Python regex (%s)" % e
    return None


def refuse(opt: Opt, value, where: str = "", toml: bool = False) -> None:
    """BadInput (exit 2) where VALUE is wrong for OPT: the message every side says of a value
    the flag's conversion would refuse (argparse says the same problem after the flag's name)."""
    bad = problem(opt, value)
    if bad:
        from ..errors import BadInput
        raise BadInput(f"{where}invalid {opt.name} {value!r}: {bad}", fix(opt, toml=toml))


def hint_for(message: str) -> str | None:
    """The fix for argparse's error about a declared option's flag ("argument --settle: ..."),
    which the CLI says as the error's hint, as for every other bad input."""
    import re
    m = re.match(r"argument (--[a-z][a-z-]*)", message)
    opt = OPTS.get(m.group(1)[2:].replace("-", "_")) if m else None
    # argparse's own message about a plain kind names the choices or the type: nothing to add
    return fix(opt) if opt is not None and opt.kind not in ("word", "choice", "int", "float") else None


def fix(opt: Opt, toml: bool = False) -> str:
    """How to say it right, in the syntax of where it was said."""
    if opt.kind == "signal":
        from .signals import HINT
        return HINT
    if opt.kind == "flag":
        return "give true or false" + ("" if toml else " (on the command line: %s, or leave it out)" % opt.flag)
    if opt.kind in ("choice", "int", "float", "word"):
        return "give %s" % {"choice": "one of " + ", ".join(opt.choices or ()), "int": "a whole number",
                            "float": "a number", "word": "a string"}[opt.kind]
    what = {"fraction": "a fraction over 0 and at most 1", "ratio": "a number over 1",
            "seconds": "seconds >= 0 or a duration", "count": "a whole number >= %d" % opt.least, "regex": "a Python regex",
            "text": "a non-empty string"}[opt.kind]
    ex = _EXAMPLE[opt.kind]
    said = "%s = %s" % (opt.name, ex) if toml else "%s %s" % (opt.flag, ex if " " in ex else ex.strip('"'))
    if opt.kind == "seconds":
        said += " or %s" % ('%s = "2m"' % opt.name if toml else "%s 2m" % opt.flag)
    return "give %s, e.g. %s" % (what, said)


def problems_of_run(where: str, run: dict) -> dict:
    """runward.toml's [runs.NAME] table: each declared key's value, checked as it is loaded;
    {key: (message, hint)} for the bad ones. config.Runs raises one as exit 2 naming the file,
    the table and the key when a verb reads that table, before anything is started (it reached
    the agent as a traceback before, exit 3)."""
    out = {}
    for key, value in run.items():
        opt = OPTS.get(key)
        if opt is None or opt.toml is not True:  # "own": its module checks it as it parses it
            continue
        bad = problem(opt, value)
        if bad:
            out[key] = (f"{where} {key} = {value!r}: {bad}", fix(opt, toml=True))
    return out


def add(p, name: str, verb: str | None = None, also: tuple = (), **extra) -> None:
    """NAME's flag on argparse parser P, from its declaration, in VERB's words where it has
    its own (ALSO: a verb's short spelling, push's -n; extra: dest, for an option the verb
    reads under another name; default)."""
    opt = OPTS[name]
    flags = (*(opt.flags or (opt.flag,)), *also)
    extra.setdefault("dest", opt.dest or opt.name)  # --for's would be "for"
    if opt.kind == "flag":
        p.add_argument(*flags, action="store_true", help=opt.help_for(verb), **extra)
        return
    if opt.append:
        extra.setdefault("action", "append")
    if opt.choices:
        extra.setdefault("choices", opt.choices)
    p.add_argument(*flags, type=_converter(opt), metavar=opt.metavar, help=opt.help_for(verb), **extra)


def _plain(kind: str):
    """argparse's type for a kind converted as plain Python does (argparse says `invalid int
    value: 'x'` after the type's name) or not at all (a word, a choice: argparse checks choices)."""
    if kind == "int":
        return int
    if kind == "float":
        return float

    def word(text: str) -> str:
        return text
    word.__name__ = kind
    return word


def converter(name: str):
    """argparse's type of declared option NAME, for a flag of another name that takes the
    same kind of value (verbs/_common.signal_arg)."""
    return _converter(OPTS[name])


def _converter(opt: Opt):
    """argparse's type for OPT: the text converted to its kind, then checked by problem()
    (the very check runward.toml's values and the API's get)."""
    import argparse

    if opt.kind in ("word", "choice", "int", "float"):
        return _plain(opt.kind)

    def convert(text: str):
        raw: object = text
        if opt.kind == "seconds":
            raw = seconds(text)
            if isinstance(raw, str):
                raise argparse.ArgumentTypeError(f"invalid seconds {text!r}: not a number of seconds or a "
                                                 "duration (90s, 5m, 1h30m)")
        elif opt.kind in ("fraction", "ratio"):
            try:
                raw = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"invalid {opt.kind} {text!r}: not a number")
        elif opt.kind == "count":
            try:
                raw = int(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"invalid count {text!r}: not a whole number")
        bad = problem(opt, raw)
        if bad and opt.kind == "signal":  # the CLI adds signals.HINT to this message
            raise argparse.ArgumentTypeError(f"unknown signal {text!r}")
        if bad:
            raise argparse.ArgumentTypeError(f"invalid {opt.kind} {text!r}: {bad}")
        return raw
    convert.__name__ = opt.kind  # argparse names the type in its messages
    return convert
