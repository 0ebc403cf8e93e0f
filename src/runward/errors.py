"""The error tree. Each class maps to one exit code (README.md's exit code table; docs/cli.md) and
carries the fields a person needs to act: the hop, the host, the exit status, a hint."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_NO_SUCH_RUN = 4
EXIT_NOT_VERIFIED = 5


class RunwardError(Exception):
    exit_code = EXIT_FAILED
    kind = "Failed"

    def __init__(self, message: str, hint: str | None = None, *, hop: str | None = None,
                 details: dict | None = None, result: dict | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.hop = hop
        self.details = details or {}
        self.result = result

    def to_dict(self) -> dict:
        d = {"type": self.kind, "message": self.message, "exit_code": self.exit_code}
        if self.hint:
            d["hint"] = self.hint
        if self.hop:
            d["hop"] = self.hop
        if self.details:
            d["details"] = self.details
        return d


class OperationFailed(RunwardError):
    """The operation ran and failed, verifiably (the job exited early, already running)."""
    kind = "OperationFailed"


class ExitedEarly(OperationFailed):
    """start's job exited (or was gone) during the settle period: its exit code and last log
    lines are in result. A subclass, so `except OperationFailed` catches it as any failed step;
    a --json document and runward.Result.error say "ExitedEarly"."""
    kind = "ExitedEarly"


class NotStarted(RunwardError):
    """A multi-node start's request to one node was never sent: another node was not
    reachable, so nothing ran anywhere (multinode/nodes.py)."""
    kind = "NotStarted"


class BadInput(RunwardError):
    exit_code = EXIT_BAD_INPUT
    kind = "BadInput"


class Unreachable(RunwardError):
    """ssh could not connect: refused, timed out, name unknown, host key, auth."""
    exit_code = EXIT_UNREACHABLE
    kind = "Unreachable"


class HopFailed(RunwardError):
    """A hop was reached but could not run the next one: container absent or stopped,
    python3 missing, the far side killed by a signal."""
    exit_code = EXIT_UNREACHABLE
    kind = "HopFailed"


class AgentError(RunwardError):
    """The agent answered with something that is not its JSON, or crashed."""
    exit_code = EXIT_UNREACHABLE
    kind = "AgentError"


class RunNotFound(RunwardError):
    exit_code = EXIT_NO_SUCH_RUN
    kind = "RunNotFound"


class NotVerified(RunwardError):
    """Done, but the outcome could not be verified (survivors, GPUs not released)."""
    exit_code = EXIT_NOT_VERIFIED
    kind = "NotVerified"


class Interrupted(RunwardError):
    """Ctrl-C (SIGINT) while a verb waited; the message says what was and was not done."""
    exit_code = 130
    kind = "Interrupted"


# Agent error types (agent/core/wire.py AgentFailure.type) -> local classes.
AGENT_TYPES = {
    "BadInput": BadInput,
    "RunNotFound": RunNotFound,
    "NotVerified": NotVerified,
    "AlreadyRunning": OperationFailed,
    "RunAlive": OperationFailed,         # rm of a run that is not stopped (names its pid)
    "ExitedEarly": ExitedEarly,
    "StartFailed": OperationFailed,
    "Failed": OperationFailed,
    "GpuUnavailable": OperationFailed,   # nvidia-smi fails: driver not loaded, NVML error
    "GpusBusy": OperationFailed,         # start --wait-gpus-free timed out; names the holders
    "DiskFull": OperationFailed,         # ENOSPC/EDQUOT on the target: nothing half-written was left
    "LockTimeout": OperationFailed,      # another verb held the run's lock past --lock-timeout
    "Cancelled": OperationFailed,        # a start cancelled by a stop (settling or waiting for GPUs)
    "Orphaned": NotVerified,             # the shim died while the job lives: alive, unsupervised
    "ShimFailed": OperationFailed,       # the shim failed in the settle period (its error recorded)
    "AgentError": AgentError,
    "HopFailed": HopFailed,              # the far side's python lacks a standard module
    "Unreachable": Unreachable,          # the agent could not reach a service it drives (an engine's controller)
}


# Agent error types the CLI handles itself and never shows: the far side lacks this agent's
# code (the bootstrap's, or a resident of another version), so transport sends it again.
AGENT_INTERNAL_TYPES = ("AgentMissing",)

# Types that a verb's document says without an exception to carry them, with their exit codes.
DOCUMENT_TYPES = {
    "Alert": (EXIT_FAILED,),       # watch: a health alert (verbs/watch.py)
    "Refused": (EXIT_BAD_INPUT,),  # the MCP server's policy refused a tool call (mcp/server.py)
    # a multi-node verb that failed on a node: the worst node's code (operations/nodes.outcome)
    "NodesFailed": (EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_NO_SUCH_RUN, EXIT_NOT_VERIFIED),
}


def _error_types() -> dict[str, tuple[int, ...]]:
    types = {c.kind: (c.exit_code,) for c in (RunwardError, OperationFailed, ExitedEarly, NotStarted, BadInput,
                                               Unreachable, HopFailed, AgentError, RunNotFound, NotVerified,
                                               Interrupted)}
    types.update((name, (cls.exit_code,)) for name, cls in AGENT_TYPES.items())
    types.update(DOCUMENT_TYPES)
    return types


# The closed list: every "type" a --json error document (and so runward.Result.error, an MCP
# tool's error) can carry -> its exit codes (README.md's exit code table). docs/api.md and docs/agents.md
# list exactly these (tests/test_error_types.py); a new type is added here first.
ERROR_TYPES = _error_types()


def from_agent(err: dict, hop: str | None = None) -> RunwardError:
    cls = AGENT_TYPES.get(err.get("type"), AgentError)
    details = dict(err.get("details") or {})
    result = details.pop("result", None)
    if err.get("traceback"):
        details["remote_traceback"] = err["traceback"]
    e = cls(err.get("message", "agent error"), err.get("hint"), hop=hop, details=details, result=result)
    e.kind = err.get("type", cls.kind) if err.get("type") in AGENT_TYPES else cls.kind
    return e


# A value that is not UTF-8 text (a byte of argv or the environment that did not decode) is
# bad input where it is given (spec/inputs.py) and where a request would carry it
# (transport/agentcall.py): both say it with these.
UTF8_HINT = ("runward carries a run's command, env, cwd and paths to the target as UTF-8 text (JSON) "
             "and keeps them in its records: write that byte inside the command instead, e.g. "
             "--sh \"printf '\\377'\" (octal), or use a UTF-8 name")


def shown_bytes(text: str) -> str:
    """A string read from argv or the environment, shown as its bytes were: a byte that is not
    UTF-8 (Python's surrogateescape, '\\udcff') as \\xff."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_text(value: str) -> bool:
    """Whether a string is UTF-8 text: no byte that argv or the environment could not decode
    (os.fsdecode's lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
