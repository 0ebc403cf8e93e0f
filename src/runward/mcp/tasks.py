"""start, stop and watch as tasks of MCP's tasks extension (io.modelcontextprotocol/tasks,
SEP-2663; docs/agents.md, "Long waits as tasks").

Why: clients drop a tools/call that stays silent for 30 s to 30 min, and a start's settle, a
stop's grace or a watch window can last longer. A client that declares the extension on its
request gets a task handle at once and polls tasks/get; any other client gets the plain call
with progress notifications (mcpserver._with_progress).

A task's id names the verb, the run, the attempt and the target ("start:NAME:3@ssh://gpu1#...",
the part after '#' the creation time, the wait's length, and w=1 for a start handed out while it
waited for GPUs), so a server process started after
the one that created it still answers: it reads the run's status on the target, which is where
the state is. The process that created a task answers from the verb's own document while it
has it (the result equals the non-task call's); any other answers from `status`.

Imported by mcpserver only: the SDK is the runward[mcp] extra.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

import anyio
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR, INVALID_PARAMS, RequestParams

from .. import library
from ..spec.config import load as load_config
from ..agent.core.runspec import READY_TIMEOUT_S  # start --ready-timeout's default: the MCP tool takes no other
from ..errors import RunwardError

TASKS = "io.modelcontextprotocol/tasks"
VERBS = ("start", "stop", "watch")  # the verbs that wait; the others answer within a call
POLL_MS = 1000
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# set by the interceptor for a tools/call whose client declared the extension; the tool's
# Server.call puts the created task's wire dict into it (contextvars reach call_next's handler)
_BOX: contextvars.ContextVar[dict | None] = contextvars.ContextVar("runward_task_box", default=None)


class TaskParams(RequestParams):
    task_id: str


@dataclass
class Entry:
    """A task this process created: the verb's thread fills doc; cancel may end it first."""
    tid: "Tid"
    doc: dict | None = None
    res: library.Result | None = None
    cancelled: str | None = None  # why, once cancelled (terminal: what the verb says later is dropped)
    done: threading.Event = field(default_factory=threading.Event)


# --- the id: verb, run, attempt, target; the wait's facts after '#' -------------------------

@dataclass(frozen=True)
class Tid:
    """What a task id says: the verb, the run, the attempt, the target, when it was made, and
    the wait's facts (a start's settle and ready regex, a stop's grace, a watch's window)."""
    verb: str
    name: str
    attempt: int
    target: str
    created: float
    expect_s: float | None = None
    ready: str | None = None
    gpu_wait: bool = False  # a start's handle given while it waited for GPUs, before attempt N existed

    def __str__(self) -> str:
        facts = {"t": round(self.created, 3), **({"s": self.expect_s} if self.expect_s is not None else {}),
                 **({"r": self.ready} if self.ready is not None else {}), **({"w": 1} if self.gpu_wait else {})}
        return f"{self.verb}:{self.name}:{self.attempt}@{self.target}#{urlencode(facts)}"


def decode(tid: str) -> Tid:
    """The Tid of a task id; MCPError INVALID_PARAMS naming the id when it is not one of ours
    (the spec's answer for an unknown task)."""
    try:
        head, _, frag = tid.partition("#")
        verb, rest = head.split(":", 1)
        run, _, target = rest.partition("@")  # run names have no '@'; a target may (ssh://u@h)
        name, _, attempt = run.rpartition(":")
        facts = dict(parse_qsl(frag))
        if verb in VERBS and _NAME.match(name) and target and int(attempt) >= 1:
            return Tid(verb, name, int(attempt), target, float(facts["t"]),
                       float(facts["s"]) if "s" in facts else None, facts.get("r"), facts.get("w") == "1")
    except (ValueError, KeyError):
        pass
    raise MCPError(code=INVALID_PARAMS, message=f"task {tid!r}: not a runward task id "
                   "(VERB:NAME:ATTEMPT@TARGET#t=..., VERB start, stop or watch)")


# --- the extension ---------------------------------------------------------------------------

class Tasks(Extension):
    """tasks/get and tasks/cancel, and the tools/call interceptor that lets Server.call make a
    task. refusal(verb, on, name): the policy's error document, or None (mcpserver.refusal):
    a task id can be written by hand, so its verb and target pass the policy as a call would."""
    identifier = TASKS

    def __init__(self, config: str | None, refusal: Callable[[str, str | None, str | None], dict | None]):
        self.config = config
        self.refusal = refusal
        self.table: dict[str, Entry] = {}

    def methods(self):
        return (MethodBinding("tasks/get", TaskParams, self._get),
                MethodBinding("tasks/cancel", TaskParams, self._cancel))

    async def intercept_tool_call(self, params, ctx, call_next):
        caps = (ctx.meta or {}).get(CLIENT_CAPABILITIES_META_KEY) or {}
        declared = isinstance(caps, dict) and TASKS in (caps.get("extensions") or {})
        if params.name not in VERBS or not declared:
            return await call_next(ctx)  # the spec: never a task to a client that did not declare it
        box: dict = {}
        token = _BOX.set(box)
        try:
            res = await call_next(ctx)
        finally:
            _BOX.reset(token)
        return box.get("task") or res

    # -- creation (from Server.call, after the policy let the call through) --

    async def create(self, verb: str, fn: Callable[[], library.Result], on: str | None, name: str | None,
                     expect_s: float | None, ready: str | None = None) -> dict | library.Result | None:
        """The task's wire dict; or the verb's Result when it ended before a task was worth
        making; or None: no task for this call (its client did not ask, or the run is unknown:
        the plain call says why at once)."""
        box = _BOX.get()
        if box is None or verb not in VERBS or name is None:
            return None
        target = str(load_config(self.config).target(on, name))
        before = await anyio.to_thread.run_sync(lambda: _attempt_now(name, target, self.config))
        if verb != "start" and before is None:
            return None
        t = Tid(verb, name, (before or 0) + 1 if verb == "start" else before, target, time.time(), expect_s, ready)
        e = Entry(t)
        # a stop half done is the worst state a server's exit can leave (signals sent, no KILL
        # after the grace): the interpreter waits for it; a start's job runs under its shim
        # and a watch only reads, so their waits may end with the process
        threading.Thread(target=_work, args=(e, fn), daemon=verb != "stop", name=f"runward-task-{verb}").start()
        if verb == "start":
            # the spec: no handle before tasks/get can answer for it, i.e. before attempt N
            # exists or the target says a start waits for GPUs to make it (status's gpu_wait)
            said: tuple = ()
            while not e.done.is_set() and t.attempt not in said:
                said = await anyio.to_thread.run_sync(lambda: _attempts_said(name, target, self.config))
                if t.attempt not in said:
                    await anyio.to_thread.run_sync(e.done.wait, 0.2)
            if e.done.is_set() and ((e.doc or {}).get("result") or {}).get("attempt") != t.attempt:
                return e.res or library.Result(verb, 1, e.doc)  # failed before launching: no task
            if said and said[0] != t.attempt:  # said by the start's gpu_wait: the id says so
                t = e.tid = dataclasses.replace(t, gpu_wait=True)
        self.table[str(t)] = e
        box["task"] = {"resultType": "task", **_wire(str(t), "working", t.created, f"{verb} {name}: under way")}
        return box["task"]

    # -- tasks/get, tasks/cancel --

    async def _get(self, ctx, params: TaskParams) -> dict:
        e = self.table.get(params.task_id)
        if e is not None:
            return _from_entry(e)
        t = self._decode(params.task_id)
        run, doc, ready_seen = await anyio.to_thread.run_sync(lambda: self._read(t))
        state, message, err = judge(t, run, doc, ready_seen)
        return _wire(params.task_id, state, t.created, message, _tool_result(doc, err) if state == "completed" else None)

    async def _cancel(self, ctx, params: TaskParams) -> dict:
        """A start's attempt is stopped (verified) while it settles or waits to be ready; a
        watch stops waiting (the run untouched); a stop goes on (its signals are sent: it ends
        verified dead or says why). A task already ended is left as it is, its run untouched."""
        e = self.table.get(params.task_id)
        if e is not None:
            if not e.done.is_set() and e.cancelled is None and e.tid.verb != "stop":
                if e.tid.verb == "start":
                    self._check("stop", e.tid)  # refused: nothing changes, the task goes on as it was
                    # terminal from here: the start's own answer (Cancelled, by this stop) is dropped
                    e.cancelled = f"cancelled by the client: stopping attempt {e.tid.attempt}"
                    e.cancelled = await anyio.to_thread.run_sync(lambda: _stop(e.tid, self.config))
                else:
                    e.cancelled = "cancelled by the client: the watch stopped waiting, the run untouched"
            return {}
        t = self._decode(params.task_id)
        run, doc, ready_seen = await anyio.to_thread.run_sync(lambda: self._read(t))
        if t.verb == "start" and judge(t, run, doc, ready_seen)[0] == "working":
            self._check("stop", t)
            await anyio.to_thread.run_sync(lambda: _stop(t, self.config))
        return {}

    def _decode(self, tid: str) -> Tid:
        t = decode(tid)
        self._check(t.verb, t)
        return t

    def _check(self, verb: str, t: Tid) -> None:
        """The policy's answer for VERB on the task's run and target; an id whose target or
        run name is bad input (a target runward.toml does not define) is said as the call's
        BadInput would be, INVALID_PARAMS, never an internal error."""
        try:
            doc = self.refusal(verb, t.target, t.name)
        except RunwardError as e:
            doc = {"ok": False, "command": verb, "error": e.to_dict()}
        if doc is not None:
            err = doc["error"]
            raise MCPError(code=INVALID_PARAMS, message=f"task {t}: {err['message']} ({err.get('hint')})", data=doc)

    def _read(self, t: Tid) -> tuple[dict, dict, bool | None]:
        """The run's status now, and for a start with a ready regex whether its line came."""
        first = t.verb == "start" and t.attempt == 1  # no run yet: its first start's wait ended without it
        run, doc = _status(t.name, t.target, self.config, strict=not first)
        if run is None:
            if (doc.get("error") or {}).get("type") != "RunNotFound":
                run, doc = _status(t.name, t.target, self.config)  # raises: could not read
            run = {"name": t.name, "attempt": None}
        ready_seen = None
        if t.verb == "start" and t.ready is not None and run.get("attempt") == t.attempt:
            ready_seen = _ready_seen(t, self.config)
        return run, doc, ready_seen


def _work(e: Entry, fn: Callable[[], library.Result]) -> None:
    try:
        e.res = fn()
        e.doc = e.res.to_json()
    except Exception as x:  # a bug, not a verdict: the task says so rather than staying "working"
        e.doc = {"ok": False, "command": e.tid.verb, "error": {"type": type(x).__name__, "message": str(x)}}
    finally:
        e.done.set()


def _stop(t: Tid, config: str | None) -> str:
    doc = library.stop(t.name, on=t.target, config=config).to_json()
    if doc.get("ok") and (doc.get("result") or {}).get("verified_dead"):
        return f"cancelled: attempt {t.attempt} was stopped, verified dead"
    return f"cancelled, but the stop failed: {(doc.get('error') or {}).get('message')}"


def _attempt_now(name: str, target: str, config: str | None) -> int | None:
    run, _ = _status(name, target, config, strict=False)
    return run.get("attempt") if run else None


def _attempts_said(name: str, target: str, config: str | None) -> tuple:
    """The run's latest attempt, and the one a start waiting for GPUs will make (gpu_wait)."""
    run, _ = _status(name, target, config, strict=False)
    return (run.get("attempt"), (run.get("gpu_wait") or {}).get("attempt")) if run else ()


def _status(name: str, target: str, config: str | None, strict: bool = True) -> tuple[dict | None, dict]:
    """The run's status (its latest attempt) as `runward status NAME --on TARGET` reads it.
    strict: a status that could not be read is a JSON-RPC error, never a guess (rule 11)."""
    doc = library.status(name, on=target, config=config).to_json()
    runs = (doc.get("result") or {}).get("runs") or []
    if doc.get("ok") and runs:
        return runs[0], doc
    if strict:
        err = doc.get("error") or {}
        raise MCPError(code=INTERNAL_ERROR, message=f"could not read {name} on {target}: "
                       f"{err.get('type')}: {err.get('message')}", data=doc)
    return None, doc


def _ready_seen(t: Tid, config: str | None) -> bool:
    """Whether attempt t.attempt (the latest) logged a line matching t.ready: the lines that
    match it or an attempt's header line, read after the last header (that attempt's own)."""
    header = f"=== runward: {t.name} attempt "
    doc = library.logs(t.name, on=t.target, lines=200, grep=f"({t.ready})|(^{re.escape(header)})",
                       config=config).to_json()
    if not doc.get("ok"):
        err = doc.get("error") or {}
        raise MCPError(code=INTERNAL_ERROR, message=f"could not read {t.name}'s log on {t.target}: "
                       f"{err.get('type')}: {err.get('message')}", data=doc)
    lines = (doc.get("result") or {}).get("lines") or []
    heads = [i for i, line in enumerate(lines) if line.startswith(header)]
    after = lines[heads[-1] + 1:] if heads else lines  # no header among them: all came after the last
    return bool(after) and (not heads or lines[heads[-1]].startswith(f"{header}{t.attempt} "))


# --- the answers ------------------------------------------------------------------------------

def judge(t: Tid, run: dict, doc: dict, ready_seen: bool | None = None) -> tuple[str, str, bool]:
    """(task status, message, is_error) from the run's status now: how a server process that
    did not create the task answers (docs/agents.md lists them by verb)."""
    if (run.get("attempt") or 0) > t.attempt:
        return "completed", f"attempt {t.attempt} of {t.name} was followed by attempt {run['attempt']}; " \
                            "`history` says how it ended", False
    if t.verb == "start" and (run.get("attempt") or 0) == t.attempt - 1:
        w = run.get("gpu_wait") or {}
        if w.get("attempt") == t.attempt:
            now = (doc.get("result") or {}).get("time") or time.time()
            return "working", f"start {t.name}: waiting for GPUs {w.get('gpus')} to be free, " \
                              f"{now - (w.get('since') or now):.0f}s; attempt {t.attempt} is made once they are", False
        if not t.gpu_wait:  # its handle came once attempt N existed: an id of a start that never was
            raise MCPError(code=INVALID_PARAMS, message=f"task {t}: {t.name} has no attempt {t.attempt} on "
                           f"{t.target} (" + (f"its last is {run['attempt']}" if run.get("attempt") else
                                              "no such run there") + "): not a task of a start made there")
        return "completed", f"attempt {t.attempt} was never made: the start's wait for GPUs ended without it " \
                            f"(still held after its timeout, cancelled by a stop or a restart, or its caller ended); " \
                            f"`runward status {t.name}` says what runs", True
    if run.get("attempt") != t.attempt:
        raise MCPError(code=INVALID_PARAMS, message=f"task {t}: {t.name} has no attempt {t.attempt} "
                       f"(its last is {run.get('attempt')})")
    now = (doc.get("result") or {}).get("time") or time.time()
    alive, started = run.get("state") == "running", run.get("started_at") or now
    if t.verb == "start":
        return _judge_start(t, run, alive, now - started, ready_seen)
    if t.verb == "stop":
        if alive:
            return "working", f"attempt {t.attempt} is still alive: the stop may have ended with the server " \
                              "process that ran it; call stop again", False
        return "completed", f"attempt {t.attempt}: {run.get('state')}, no process of it alive", False
    alerts = (run.get("health") or {}).get("alerts") or []
    if alive and not alerts and now < t.created + (t.expect_s or 0):
        return "working", f"watch {t.name}: the window is open", False
    verdict = alerts[0]["kind"] if alerts else "healthy" if alive else run.get("state")
    return "completed", f"judged from the run's status now (the window's watch ended with the server process " \
                        f"that ran it): {verdict}", bool(alerts) or not alive


def _judge_start(t: Tid, run: dict, alive: bool, up: float, ready_seen: bool | None) -> tuple[str, str, bool]:
    expect = t.expect_s or 0  # the settle period the start was asked for
    stop_at = (run.get("stop_requested") or {}).get("at")
    if stop_at is not None and stop_at - (run.get("started_at") or stop_at) < expect:
        return "cancelled", f"attempt {t.attempt} was stopped during its settle period", False
    if not alive:
        early = (run.get("duration_s") or 0) < expect
        return "completed", f"attempt {t.attempt} " + ("exited during its settle period" if early else
                                                       "was alive after its settle period, and has ended since") \
            + f": {run.get('state')}", early
    if up < expect:
        return "working", f"start {t.name}: settling, {up:.0f}s of {expect:g}s", False
    if ready_seen is False:
        if up < READY_TIMEOUT_S:
            return "working", f"start {t.name}: alive, waiting for a line matching {t.ready!r}", False
        return "completed", f"attempt {t.attempt}: no line matching {t.ready!r} within {READY_TIMEOUT_S:g}s", True
    return "completed", f"attempt {t.attempt} is alive after its settle period" + \
        (f" and logged a line matching {t.ready!r}" if ready_seen else ""), False


def _from_entry(e: Entry) -> dict:
    t = e.tid
    if e.cancelled is not None:
        return _wire(str(t), "cancelled", t.created, e.cancelled)
    if not e.done.is_set():
        of = f" of {t.expect_s:g}s" if t.expect_s else ""
        return _wire(str(t), "working", t.created, f"{t.verb} {t.name}: {time.time() - t.created:.0f}s{of}")
    err = not e.doc.get("ok")
    what = ((e.doc.get("error") or {}).get("type") or "failed") if err else "verified"
    return _wire(str(t), "completed", t.created, f"{t.verb} {t.name}: {what}", _tool_result(e.doc, err))


def _tool_result(doc: dict, is_error: bool) -> dict:
    """The CallToolResult the plain call returns (Server.call): the document as text and as
    structured content. A verb's failure is a completed task with isError: the spec keeps
    `failed` for JSON-RPC errors."""
    return {"content": [{"type": "text", "text": json.dumps(doc)}], "structuredContent": doc, "isError": is_error}


def _wire(tid: str, status: str, created: float, message: str, result: dict | None = None) -> dict:
    def iso(t):
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()
    out = {"taskId": tid, "status": status, "statusMessage": message, "createdAt": iso(created),
           "lastUpdatedAt": iso(time.time()), "ttlMs": None, "pollIntervalMs": POLL_MS}
    return {**out, "result": result} if result is not None else out
