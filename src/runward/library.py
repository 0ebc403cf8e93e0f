"""The Python API behind `import runward`: one function per verb, each answering with the very
document the CLI's `--json` prints, as a typed result.

    import runward
    gpu = runward.Target("ssh://gpu1/pct:200")
    res = runward.start("train", ["python3", "train.py"], on=gpu, env={"LR": "3e-4"})
    res.ok, res.attempt, res.pid, res.to_json()

Each function builds its verb's typed options and calls the operation (operations/<verb>.py)
in this process: no argv, nothing captured, no JSON round trip. The CLI, this API and the MCP
server (mcp/server.py) call the same operations and answer with one document, so a change to
a verb reaches all three.
Failures are results too (`ok` false, `error` with its type, hop and hint, `exit_code` as the
CLI's); `check()` raises them as `runward.Failed`. docs/api.md documents it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .spec.apivalues import attempt_list, env_values, file_specs, gpu_indices, strings
from .errors import EXIT_OK, RunwardError


@dataclass(frozen=True)
class Target:
    """Where a verb acts: a target string (`local`, `ssh://[user@]host[:port]`,
    `ssh://host/pct:200`, `podman:NAME`) or a name from runward.toml's [targets], read as
    `--on` is. `config` is the runward.toml to use (default: found from the cwd)."""
    spec: str = "local"
    config: str | None = None

    def __post_init__(self):
        if not isinstance(self.spec, str) or not self.spec.strip():
            raise ValueError(f"Target needs a target string, got {self.spec!r}")

    def __str__(self) -> str:
        return self.spec


class Failed(Exception):
    """A result that is not ok, raised by Result.check(): .result is the whole Result."""

    def __init__(self, result: "Result"):
        err = result.error or {}
        super().__init__(f"{result.command}: {err.get('type', 'Failed')}: {err.get('message', '')}"
                         + (f" (hint: {err['hint']})" if err.get("hint") else ""))
        self.result = result


@dataclass
class Result:
    """One verb's answer. `document` is exactly what `runward VERB --json` prints."""
    command: str
    exit_code: int
    document: dict
    ok: bool = field(init=False)
    result: Any = field(init=False)
    error: dict | None = field(init=False)

    def __post_init__(self):
        self.ok = self.exit_code == EXIT_OK
        self.result = self.document.get("result")
        self.error = self.document.get("error")
        res = self.result if isinstance(self.result, dict) else {}
        for f in dataclasses.fields(self):  # a subclass's typed fields, read from the result
            if f.init is False and f.name not in ("ok", "result", "error"):
                setattr(self, f.name, res.get(f.name, f.default if f.default is not dataclasses.MISSING else None))

    def to_json(self) -> dict:
        return self.document

    def check(self) -> "Result":
        """self, if ok; else raise Failed."""
        if not self.ok:
            raise Failed(self)
        return self


@dataclass
class StartResult(Result):
    attempt: int | None = field(init=False, default=None)
    pid: int | None = field(init=False, default=None)
    verified: list | None = field(init=False, default=None)


@dataclass
class StopResult(Result):
    verified_dead: bool = field(init=False, default=False)
    survivors: list | None = field(init=False, default=None)


@dataclass
class RestartResult(Result):
    attempt: int | None = field(init=False, default=None)
    pid: int | None = field(init=False, default=None)
    steps: list | None = field(init=False, default=None)
    verified: list | None = field(init=False, default=None)


@dataclass
class StatusResult(Result):
    runs: list | None = field(init=False, default=None)


@dataclass
class LogsResult(Result):
    lines: list | None = field(init=False, default=None)
    offset: int | None = field(init=False, default=None)
    more: bool = field(init=False, default=False)


@dataclass
class WatchResult(Result):
    healthy: bool = field(init=False, default=False)
    alerts: list | None = field(init=False, default=None)
    alert: dict | None = field(init=False, default=None)


# --- the verbs ---------------------------------------------------------------------------

def _shaped(verb: str, kind: Callable[..., Result]):
    """A verb whose keywords are shaped (py) before they become its options: a wrong
    shape is answered as the CLI answers a bad flag, a Result with BadInput (exit 2)."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            from .errors import BadInput
            try:
                return fn(*args, **kwargs)
            except BadInput as e:  # raised by apivalues before _operate (whose own it answers itself)
                return _failed(verb, e, kind)
        return call
    return wrap


def _declared(verb: str, keywords: dict) -> dict:
    """VERB's keywords (its locals()) that are options spec/options.py declares for it, as
    given: a declared keyword in a verb's signature reaches its options without a second line
    naming it (those shaped for their side, env and gpus, are then shaped over these)."""
    from .spec.options import TAKES
    return {k: v for k, v in keywords.items() if k in TAKES[verb]}


@_shaped("start", StartResult)
def start(name: str, command: Sequence[str] | None = None, *, on: Target | str | None = None, sh: str | None = None,
          env: Mapping[str, str] | None = None, cwd: str | None = None, log: str | None = None,
          settle: float | None = None, ready: str | None = None, replace: bool = False,
          gpus: Sequence[int] | None = None, stop_signal: str | None = None, grace: float | None = None,
          wait_gpus_free: bool = False, config: str | None = None) -> StartResult:
    """Start NAME (argv `command`, or one shell line `sh`, or as runward.toml defines it),
    verified alive after settling; wait_gpus_free: first wait (up to 300 s) until `gpus`
    are free, else refuse (GpusBusy, naming the holders)."""
    from .operations import start as op
    on, config = _where(on, config)
    opts = op.StartOptions(name=name, on=on, config=config, **{
        **_declared("start", locals()), "env": env_values(env),
        "command": strings(command, "command", '["python3", "train.py"]') or None, "gpus": gpu_indices(gpus)})
    return _operate("start", opts, lambda: op.start(opts), StartResult)


def stop(name: str, *, on: Target | str | None = None, grace: float | None = None, stop_signal: str | None = None,
         config: str | None = None) -> StopResult:
    """Stop NAME: the whole tree, verified dead."""
    from .operations import stop as op
    on, config = _where(on, config)
    opts = op.StopOptions(name=name, on=on, config=config, grace=grace, stop_signal=stop_signal)
    return _operate("stop", opts, lambda: op.stop(opts), StopResult)


@_shaped("restart", RestartResult)
def restart(name: str, *, on: Target | str | None = None, env: Mapping[str, str | None] | None = None,
            settle: float | None = None, ready: str | None = None, grace: float | None = None,
            deploy: bool | None = None, config: str | None = None) -> RestartResult:
    """Verified stop, (deploy), verified start with the last spec; env entries override it
    (a value of None or "" unsets the entry). deploy: True deploys the run's files between
    stop and start (--deploy); False restarts on what the target has (--no-deploy); None, as
    the CLI without either: runward.toml's deploy_on_restart, else refused (exit 2, nothing
    stopped) when the files differ locally from what was deployed."""
    from .operations import restart as op
    on, config = _where(on, config)
    # deploy as it is: anything but True/False/None is refused by check() (options' deploy), BadInput
    opts = op.RestartOptions(name=name, on=on, config=config, deploy=deploy,
                             **{**_declared("restart", locals()), "env": env_values(env, unset_ok=True)})
    return _operate("restart", opts, lambda: op.restart(opts), RestartResult)


def status(name: str | None = None, *, on: Target | str | None = None, since: str | None = None,
           config: str | None = None) -> StatusResult:
    """The state of one run, or of every run on the target."""
    from .operations import status as op
    on, config = _where(on, config)
    opts = op.StatusOptions(name=name, on=on, config=config, since=since)
    return _operate("status", opts, lambda: op.status(opts), StatusResult)


def logs(name: str, *, on: Target | str | None = None, lines: int | None = None, offset: int | None = None,
         grep: str | None = None, attempt: int | None = None, since: str | None = None,
         config: str | None = None) -> LogsResult:
    """The last `lines` lines (default 20), or the lines after `offset` (the offset a
    previous call returned); bounded, never a follow."""
    from .operations import logs as op
    on, config = _where(on, config)
    opts = op.LogsOptions(name=name, n=lines, offset=offset, grep=grep, attempt=attempt, since=since, on=on,
                          config=config)
    return _operate("logs", opts, lambda: op.logs(opts), LogsResult)


def watch(name: str, *, on: Target | str | None = None, for_s: float = 60.0, min: Mapping[str, float] | None = None,
          max: Mapping[str, float] | None = None, stall: float | None = None, since: str | None = None,
          config: str | None = None) -> WatchResult:
    """Judge the run's health through a window of for_s seconds; the verdict (healthy, or the
    first alert: NaN, OOM, throughput under a floor, a stall, the job ended)."""
    from .operations import watch as op
    on, config = _where(on, config)
    opts = op.WatchOptions(name=name, for_s=for_s, min=min or [], max=max or [], stall_after=stall,
                           since=since, on=on, config=config)
    return _operate("watch", opts, lambda: op.watch(opts), WatchResult)


def history(name: str, *, on: Target | str | None = None, config: str | None = None) -> Result:
    """Every attempt: started, ran for, exit, steps, median throughput, last loss, what changed."""
    from .operations import history as op
    on, config = _where(on, config)
    opts = op.HistoryOptions(name=name, on=on, config=config)
    return _operate("history", opts, lambda: op.history(opts), Result)


def compare(name: str, a: int | None = None, b: int | None = None, *, on: Target | str | None = None,
            config: str | None = None) -> Result:
    """Attempts A and B (default: the last two) side by side: what changed (with diffs), the
    metrics at common steps and a one-line verdict."""
    from .operations import compare as op
    on, config = _where(on, config)
    opts = op.CompareOptions(name=name, a=a, b=b, on=on, config=config)
    return _operate("compare", opts, lambda: op.compare(opts), Result)


@_shaped("push", Result)
def push(files: Mapping[str, str] | Sequence[str], *, on: Target | str | None = None,
         config: str | None = None) -> Result:
    """Send local files through the hop chain: {LOCAL: REMOTE} (or "LOCAL:REMOTE" strings);
    atomic, sha256-checked where they land."""
    from .operations import push as op
    specs = file_specs(files)
    on, config = _where(on, config)
    opts = op.PushOptions(specs=specs, on=on, config=config)
    return _operate("push", opts, lambda: op.push(opts), Result)


@_shaped("pull", Result)
def pull(files: Mapping[str, str] | Sequence[str], *, on: Target | str | None = None,
         config: str | None = None) -> Result:
    """Fetch files back through the hop chain: {REMOTE: LOCAL} (or "REMOTE:LOCAL" strings; a
    directory recursively); each sha256-checked here, then renamed in."""
    from .operations import pull as op
    specs = file_specs(files)
    on, config = _where(on, config)
    opts = op.PullOptions(specs=specs, on=on, config=config)
    return _operate("pull", opts, lambda: op.pull(opts), Result)


@_shaped("plot", Result)
def plot(name: str, output: str, *, on: Target | str | None = None, metric: Sequence[str] | None = None,
         x: str = "step", attempts: Sequence[int] | None = None, config: str | None = None) -> Result:
    """Draw the run's metrics (alerts marked) to the PNG OUTPUT; attempts: overlay those
    attempts instead (x = step). Needs matplotlib (runward[plot])."""
    from .operations import plot as op
    on, config = _where(on, config)
    opts = op.PlotOptions(name=name, output=output, metric=strings(metric, "metric", '["loss"]') or [], x=x,
                          attempts=attempt_list(attempts), on=on, config=config)
    return _operate("plot", opts, lambda: op.plot(opts), Result)


def deploy(name: str, *, on: Target | str | None = None, config: str | None = None) -> Result:
    """Push the run's files (runward.toml) to where it runs."""
    from .operations import deploy as op
    on, config = _where(on, config)
    opts = op.DeployOptions(name=name, on=on, config=config)
    return _operate("deploy", opts, lambda: op.deploy(opts), Result)


def rm(name: str, *, on: Target | str | None = None, logs: bool = False, lock_timeout: float | None = None,
       config: str | None = None) -> Result:
    """Remove a stopped run's records (RunAlive, exit 1, if it lives); its log kept unless
    logs=True."""
    from .operations import rm as op
    on, config = _where(on, config)
    opts = op.RmOptions(name=name, logs=logs, lock_timeout=lock_timeout, on=on, config=config)
    return _operate("rm", opts, lambda: op.rm(opts), Result)


def prune(older_than: str, *, on: Target | str | None = None, dry_run: bool = False, logs: bool = False,
          config: str | None = None) -> Result:
    """Remove the stopped runs that ended longer ago than OLDER_THAN ("7d", "12h"); dry_run
    lists them and removes nothing."""
    from .operations import prune as op
    on, config = _where(on, config)
    opts = op.PruneOptions(older_than=older_than, dry_run=dry_run, logs=logs, on=on, config=config)
    return _operate("prune", opts, lambda: op.prune(opts), Result)


def gpus(*, on: Target | str | None = None, config: str | None = None) -> Result:
    """Each GPU: memory, utilization, and the processes on it mapped to their runs."""
    from .operations import gpus as op
    on, config = _where(on, config)
    opts = op.GpusOptions(on=on, config=config)
    return _operate("gpus", opts, lambda: op.gpus(opts), Result)


def stacks(name: str, *, on: Target | str | None = None, native: bool = False, timeout: float | None = None,
           bring_py_spy: bool = False, config: str | None = None) -> Result:
    """The Python stacks of every process of the run on one target (py-spy), grouped by frame
    and named by rank; kept with the attempt. (The nodes of a multi-node run: the CLI's
    repeated --on, or api.stacks with a list of targets.)"""
    from .operations import stacks as op
    on, config = _where(on, config)
    given = {"timeout": timeout} if timeout is not None else {}  # None: the flag's default, as the CLI
    opts = op.StacksOptions(name=name, native=native, on=on, config=config, bring_py_spy=bring_py_spy, **given)
    return _operate("stacks", opts, lambda: op.stacks(opts), Result)


def ps(pattern: str, *, on: Target | str | None = None, config: str | None = None) -> Result:
    """Processes whose command line matches the regex; never this call's own chain."""
    from .operations import ps as op
    on, config = _where(on, config)
    opts = op.PsOptions(pattern=pattern, on=on, config=config)
    return _operate("ps", opts, lambda: op.ps(opts), Result)


def kill(pattern: str, *, on: Target | str | None = None, confirm: bool = False, signal: str | None = None,
         grace: float | None = None, tree: bool = False, config: str | None = None) -> Result:
    """What a safe pkill -f would signal; with confirm=True, signal them, verified dead."""
    from .operations import kill as op
    on, config = _where(on, config)
    # None: the flag's default, as the CLI without it
    given = {k: v for k, v in (("signal", signal), ("grace", grace)) if v is not None}
    opts = op.KillOptions(pattern=pattern, yes=confirm, tree=tree, on=on, config=config, **given)
    return _operate("kill", opts, lambda: op.kill(opts), Result)


@_shaped("exec", Result)
def exec(command: Sequence[str] | None = None, *, on: Target | str | None = None, sh: str | None = None,
         force: bool = False, cwd: str | None = None, env: Mapping[str, str] | None = None,
         timeout: float | None = None, config: str | None = None) -> Result:
    """Run a command (argv, or a shell line `sh`, linted first: an error refuses it unless
    force) on a target; its exit code, signal, output and diagnosis."""
    from .operations import exec as op
    on, config = _where(on, config)
    opts = op.ExecOptions(command=strings(command, "command", '["nvidia-smi"]') or [], sh=sh, force=force,
                          cwd=cwd, env=env_values(env),
                          timeout=timeout, on=on, config=config)
    return _operate("exec", opts, lambda: op.exec(opts), Result)


def lint_command(command_line: str, *, interactive: bool = False) -> Result:
    """Self-kill and wrong-filesystem hazards in a shell command line, before it runs."""
    from .operations import lint as op
    opts = op.LintOptions(command_line=command_line, interactive=interactive)
    return _operate("lint", opts, lambda: op.lint(opts), Result)


def doctor(*, on: Target | str | None = None, config: str | None = None) -> Result:
    """What works on a target, hop by hop, and where the chain breaks."""
    from .operations import doctor as op
    on, config = _where(on, config)
    opts = op.DoctorOptions(on=on, config=config)
    return _operate("doctor", opts, lambda: op.doctor(opts), Result)


def named_targets(*, config: str | None = None) -> Result:
    """The targets and runs runward.toml names (no CLI verb prints this: it is what an agent
    needs before it can say `on`)."""
    from .operations.common import config_targets
    try:
        cfg = _config(config)
        doc = {"ok": True, "command": "targets", "result": {
            "config": cfg.path,
            "targets": [{"name": n, "on": t["on"]} for n, t in cfg.targets.items()],
            "runs": [{"name": n, "on": str(cfg.target(None, n)), "files": list(cfg.runs.value(n, "files") or [])}
                     for n in cfg.runs],
            "all": [t.display() for t in config_targets(cfg)]}}
        return Result("targets", EXIT_OK, doc)
    except RunwardError as e:
        return Result("targets", e.exit_code, {"ok": False, "command": "targets", "error": e.to_dict()})


# --- one verb, called in this process ----------------------------------------------------

def _where(on, config) -> tuple:
    """(the target string, the runward.toml) a Target or a string names."""
    if isinstance(on, Target):
        return on.spec, config or on.config
    return on, config


def _operate(verb: str, opts, run: Callable, kind: Callable[..., Result]) -> Result:
    """An operation called directly (no argv, nothing captured): its Outcome, or
    its error as the CLI's error document (cli._fail), as a typed Result."""
    from .operations import check  # the subpackage itself: never through runward's own namespace
    from .operations.common import suggest_for
    try:
        check(opts)  # the declared options' values, as the CLI's flags are checked (spec/options.py)
        outcome = run()
    except RunwardError as e:
        suggest_for(opts, e)
        return _failed(verb, e, kind)
    return kind(verb, outcome.code, _plain(outcome.document))


def _failed(verb: str, e: RunwardError, kind: Callable[..., Result]) -> Result:
    """An error as the CLI's error document (cli._fail), as a typed Result."""
    from .operations import failed
    outcome = failed(verb, e)
    return kind(verb, outcome.code, _plain(outcome.document))


def _plain(obj):
    """The document as the CLI prints it (json.dumps' default=str): what is not JSON, a str."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def _config(path: str | None):
    from .spec.config import load  # the submodule itself: not through the package's lazy __getattr__
    return load(path)
