"""start, stop and watch as tasks of MCP's tasks extension (io.modelcontextprotocol/tasks,
issue 27), through the SDK's own Client over stdio (`python -m runward mcp`), with real local
runs: a start polled to completed (its result the plain call's document), a stop, a task
answered by a new server process after the first was ended, cancel, and a client that does
not declare the extension (the plain call, progress notifications as before).

The SDK (mcp 2.3) carries the extension's types but no requester: the ClientExtension below
(a ResultClaim on resultType "task", tasks/get and tasks/cancel as plain requests) is the
glue a client needs, written here as a client would write it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Literal

import pytest

import testbed
from conftest import ROOT, wait_for

pytest.importorskip("mcp", reason="needs the MCP SDK: pip install -e '.[mcp]'")
import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.extension import ClientExtension, ResultClaim  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import INVALID_PARAMS, CallToolResult, Request, RequestParams, Result  # noqa: E402
from pydantic import ConfigDict  # noqa: E402

TASKS = "io.modelcontextprotocol/tasks"


class Created(Result):
    """CreateTaskResult (resultType "task")."""
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


class Got(Result):
    """GetTaskResult: a Task, with result (completed) or error (failed) inlined."""
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    result: dict | None = None
    error: dict | None = None


class Ack(Result):
    model_config = ConfigDict(extra="allow")


async def get(session, tid: str) -> Got:
    return await session.send_request(GetTask(params=TaskParams(task_id=tid)), Got)


async def poll(session, tid: str, until=("completed", "failed", "cancelled"), timeout: float = 60) -> tuple[Got, list]:
    """tasks/get until the task's status is one of `until` (a deadline, not a sleep): the
    last answer and every status seen on the way."""
    seen = []
    with anyio.fail_after(timeout):
        while True:
            got = await get(session, tid)
            seen.append(got.status)
            if got.status in until:
                return got, seen
            await anyio.sleep(0.2)


class ClientTasks(ClientExtension):
    """Declares the extension on each request; resolves a task handle by polling tasks/get."""
    identifier = TASKS

    def __init__(self):
        self.created: list[Created] = []

    def claims(self):
        async def resolve(created: Created, ctx) -> CallToolResult:
            self.created.append(created)
            got, _ = await poll(ctx.session, created.task_id)
            assert got.status == "completed", got
            return CallToolResult.model_validate(got.result)
        return [ResultClaim(result_type="task", model=Created, resolve=resolve)]


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, RUNWARD_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT / "src"))
    e.pop("RUNWARD_CONFIG", None)
    names: list[str] = []
    yield {"env": e, "dir": tmp_path, "names": names}
    for n in names:  # nothing left running
        subprocess.run([sys.executable, "-m", "runward", "stop", n, "--grace", "1"], cwd=tmp_path, env=e,
                       capture_output=True, timeout=60)


def _name(env, what: str) -> str:
    n = f"mt{what}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    env["names"].append(n)
    return n


@contextlib.asynccontextmanager
async def _client(env, tasks: ClientTasks | None, args=("--allow", "all")):
    """A client of `runward mcp ARGS`; by default every tool allowed: the starts here give
    their own commands, which is exec's switch (tests/test_mcp.py holds the default policy)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "runward", "mcp", *args], env=env["env"],
                                   cwd=str(env["dir"]))
    async with Client(params, extensions=[tasks] if tasks else None) as c:
        assert c.protocol_version == "2026-07-28"  # the extension's results need the modern wire
        yield c


def _kill_servers() -> list[int]:
    """SIGKILL this test's `runward mcp` children (the server processes the SDK spawned): a
    server that dies with its tasks under way, no goodbye."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"runward" in argv and b"mcp" in argv:
            os.kill(int(pid), signal.SIGKILL)
            pids.append(int(pid))
    for pid in pids:
        wait_for(lambda: _dead(pid), timeout=10, what=f"server {pid} dead")
    return pids


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie until the client reaps it
    except OSError:
        return True


def _doc(res) -> dict:
    doc = json.loads(res["content"][0]["text"]) if isinstance(res, dict) else json.loads(res.content[0].text)
    return doc


def _cli(env, *args) -> dict:
    p = subprocess.run([sys.executable, "-m", "runward", *args, "--json"], cwd=env["dir"], env=env["env"],
                       capture_output=True, text=True, timeout=60)
    return json.loads(p.stdout)


def _shape(doc):
    if isinstance(doc, dict):
        return {k: _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else []
    return type(doc).__name__


def _start_args(name: str, settle: float) -> dict:
    return {"name": name, "command": ["sleep", "300"], "on": "local", "settle": settle}


def test_a_start_as_a_task_is_polled_to_completed_with_the_plain_calls_document(env):
    a, b = _name(env, "a"), _name(env, "b")

    async def main():
        async with _client(env, ClientTasks()) as c:
            assert TASKS in c.server_capabilities.extensions  # advertised
            created = await c.session.call_tool("start", _start_args(a, 3), allow_claimed=True)
            assert isinstance(created, Created) and created.status == "working", created
            assert created.task_id.startswith(f"start:{a}:1@local#"), created.task_id  # run, attempt, target
            got, seen = await poll(c.session, created.task_id)
            assert seen[0] == "working" and got.status == "completed", (seen, got)
            assert not got.result["isError"]
            doc = got.result["structuredContent"]
            assert doc == _doc(got.result) and doc["result"]["attempt"] == 1
            assert doc["result"]["verified"] == ["alive_after_settle"] and doc["result"]["waited_s"] >= 3
            # refused before an attempt exists (alive, no replace): the plain result, no task
            again = await c.session.call_tool("start", _start_args(a, 3), allow_claimed=True)
            assert isinstance(again, CallToolResult) and again.is_error, again
        async with _client(env, None) as c:  # the same call from a client that did not ask for tasks
            plain = await c.call_tool("start", _start_args(b, 3))
        assert _shape(_doc(plain)) == _shape(doc)
        assert _cli(env, "status", a)["result"]["runs"][0]["state"] == "running"
    anyio.run(main)


def test_a_stop_and_a_watch_as_tasks(env):
    a = _name(env, "s")

    async def main():
        tasks = ClientTasks()
        async with _client(env, tasks) as c:
            await c.call_tool("start", _start_args(a, 0.5))  # resolved through tasks/get by the claim
            res = await c.call_tool("watch", {"name": a, "for_s": 2})
            assert not res.is_error and _doc(res)["result"]["healthy"], _doc(res)
            res = await c.call_tool("stop", {"name": a, "grace": 5})
            doc = _doc(res)
            assert not res.is_error and doc["result"]["verified_dead"] and doc["command"] == "stop", doc
        assert [t.task_id.split("#")[0] for t in tasks.created] == \
            [f"start:{a}:1@local", f"watch:{a}:1@local", f"stop:{a}:1@local"]
        assert _cli(env, "status", a)["result"]["runs"][0]["state"] == "exited"
    anyio.run(main)


def test_a_task_is_answered_by_a_new_server_process(env):
    a = _name(env, "r")

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", _start_args(a, 4), allow_claimed=True)
            t0 = time.monotonic()
            assert len(_kill_servers()) == 1  # mid-settle: its thread of library.start dies with it
        async with _client(env, ClientTasks()) as c:
            first = await get(c.session, created.task_id)
            if time.monotonic() - t0 < 3.5:
                assert first.status == "working" and "settling" in first.status_message, first
            got, _ = await poll(c.session, created.task_id)
            assert got.status == "completed" and not got.result["isError"], got
            doc = got.result["structuredContent"]  # the run's status, read on the target now
            assert doc["command"] == "status" and doc["result"]["runs"][0]["attempt"] == 1
            assert doc["result"]["runs"][0]["state"] == "running"
            stop = await c.session.call_tool("stop", {"name": a, "grace": 5}, allow_claimed=True)
            got, _ = await poll(c.session, stop.task_id)  # by the process that runs it: the stop's document
            assert got.status == "completed" and got.result["structuredContent"]["command"] == "stop", got
        async with _client(env, ClientTasks()) as c:  # and by one that did not: the run's status
            got, _ = await poll(c.session, stop.task_id)
            assert got.status == "completed", got
            assert got.result["structuredContent"]["result"]["runs"][0]["state"] == "exited"
            with pytest.raises(MCPError) as e:
                await get(c.session, f"start:{a}:7@local#t=1")
            assert e.value.code == INVALID_PARAMS and "no attempt 7" in str(e.value)
            with pytest.raises(MCPError) as e:
                await get(c.session, "not-a-task")
            assert e.value.code == INVALID_PARAMS and "not a runward task id" in str(e.value)
        # a task id is words a client can write: it passes the server's policy as the call would
        async with _client(env, ClientTasks(), ["--allow", "status"]) as c:
            with pytest.raises(MCPError) as e:
                await get(c.session, created.task_id)
            assert e.value.code == INVALID_PARAMS and "start tool is not allowed" in str(e.value), e.value
    anyio.run(main)


def test_a_start_with_ready_is_judged_by_its_log_after_a_restart(env):
    a = _name(env, "y")
    args = {"name": a, "on": "local", "settle": 0.5, "ready": "^model ready",
            "command": ["sh", "-c", "sleep 8; echo model ready; exec sleep 300"]}

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", args, allow_claimed=True)
            assert "r=%5Emodel+ready" in created.task_id, created.task_id  # the regex travels in the id
            _kill_servers()
        async with _client(env, ClientTasks()) as c:
            got, seen = await poll(c.session, created.task_id)
        # the header line carries the command, "model ready" included: not taken for the ready line
        assert "working" in seen and got.status == "completed" and not got.result["isError"], (seen, got.status_message)
        assert "logged a line matching '^model ready'" in got.status_message, got
    anyio.run(main)


def test_cancel_a_start_stops_its_attempt_and_a_watch_only_stops_waiting(env):
    a, b = _name(env, "c"), _name(env, "w")

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", _start_args(a, 60), allow_claimed=True)
            await c.session.send_request(CancelTask(params=TaskParams(task_id=created.task_id)), Ack)
            got, _ = await poll(c.session, created.task_id)
            assert got.status == "cancelled" and "verified dead" in got.status_message, got
            await c.call_tool("start", _start_args(b, 0.5))
            watch = await c.session.call_tool("watch", {"name": b, "for_s": 60}, allow_claimed=True)
            await c.session.send_request(CancelTask(params=TaskParams(task_id=watch.task_id)), Ack)
            got, _ = await poll(c.session, watch.task_id)
            assert got.status == "cancelled", got
        assert _cli(env, "status", a)["result"]["runs"][0]["state"] == "exited"
        assert _cli(env, "status", b)["result"]["runs"][0]["state"] == "running"  # only the waiting stopped
        # a start cancelled through a server process that did not create it: stopped all the same
        c2 = _name(env, "c")
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", _start_args(c2, 60), allow_claimed=True)
        async with _client(env, ClientTasks()) as c:
            await c.session.send_request(CancelTask(params=TaskParams(task_id=created.task_id)), Ack)
            got, _ = await poll(c.session, created.task_id)
            assert got.status == "cancelled", got
        assert _cli(env, "status", c2)["result"]["runs"][0]["state"] == "exited"
    anyio.run(main)


def test_a_client_without_the_extension_gets_the_plain_call_and_progress(env):
    a = _name(env, "p")

    async def main():
        async with _client(env, None) as c:
            progress: list = []

            async def on_progress(p, total, message):
                progress.append((p, total))
            res = await c.call_tool("start", _start_args(a, 2.5), progress_callback=on_progress)
            assert not res.is_error and _doc(res)["result"]["verified"] == ["alive_after_settle"]
            assert progress and progress[0][1] == 2.5, progress
    anyio.run(main)


def test_an_early_exit_is_a_completed_task_flagged_as_an_error_by_either_process(env):
    a, b = _name(env, "e"), _name(env, "f")
    early = {"on": "local", "settle": 5, "command": ["sh", "-c", "sleep 1; exit 3"]}

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", {"name": a, **early}, allow_claimed=True)
            got, _ = await poll(c.session, created.task_id)
            # the spec keeps `failed` for JSON-RPC errors: a verb's failure is a result with isError
            assert got.status == "completed" and got.result["isError"], got
            doc = got.result["structuredContent"]
            assert doc["error"]["type"] == "ExitedEarly" and doc["command"] == "start", doc
            created = await c.session.call_tool("start", {"name": b, **early}, allow_claimed=True)
            _kill_servers()
        async with _client(env, ClientTasks()) as c:
            got, _ = await poll(c.session, created.task_id)
        assert got.status == "completed" and got.result["isError"], got
        assert "exited during its settle period" in got.status_message, got
        assert got.result["structuredContent"]["result"]["runs"][0]["exit"]["code"] == 3
    anyio.run(main)


def test_a_task_in_a_container_over_ssh_is_answered_after_a_kill(env):
    """The id carries the whole hop chain (ssh://rw1/pct:200): the new process reads the run
    where it lives, through the same hops."""
    tb = testbed.require("ssh")
    testbed.require("pct")
    env["env"] = testbed.env(tb, dict(env["env"], RUNWARD_SSH_CONFIG=tb["ssh_config"]))
    a, ct = _name(env, "x"), "ssh://rw1/pct:200"

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", {**_start_args(a, 3), "on": ct}, allow_claimed=True)
            assert created.task_id.startswith(f"start:{a}:1@{ct}#"), created.task_id
            _kill_servers()
        async with _client(env, ClientTasks()) as c:
            got, _ = await poll(c.session, created.task_id)
            assert got.status == "completed" and not got.result["isError"], got
            doc = got.result["structuredContent"]
            assert doc["target"] == ct and doc["result"]["runs"][0]["state"] == "running", doc
            res = await c.call_tool("stop", {"name": a, "on": ct, "grace": 5})
            assert not res.is_error and _doc(res)["result"]["verified_dead"], _doc(res)
    try:
        anyio.run(main)
    finally:
        subprocess.run([sys.executable, "-m", "runward", "stop", a, "--on", ct, "--grace", "1"], cwd=env["dir"],
                       env=env["env"], capture_output=True, timeout=120)
        subprocess.run([sys.executable, "-m", "runward", "rm", a, "--on", ct, "--logs"], cwd=env["dir"],
                       env=env["env"], capture_output=True, timeout=120)


def test_task_ids_name_verb_run_attempt_and_target():
    from runward.mcp import tasks as mcptasks
    t = mcptasks.Tid("start", "train.v2", 3, "ssh://root@gpu1:2222/pct:200", 1796400000.5, 2.5, "step (\\d+)#x")
    assert str(t).startswith("start:train.v2:3@ssh://root@gpu1:2222/pct:200#")
    assert mcptasks.decode(str(t)) == t
    for bad in ("start:x:0@local#t=1", "exec:x:1@local#t=1", "start:x:1@#t=1", "start:x:1@local"):
        with pytest.raises(MCPError):
            mcptasks.decode(bad)


def _job_procs(cmd: bytes) -> list[int]:
    """Processes whose argv is exactly CMD's words, from /proc (not from runward)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:-1] == cmd.split():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_a_start_waiting_for_gpus_is_a_task_from_the_wait_on(env):
    """The handle comes while the GPU is still held (before attempt 1 exists): the target says
    a start waits to make it (status's gpu_wait), so another server process answers the task
    id too; once the holder ends, the task completes with the job verified alive. A second
    start cancelled by a stop during its wait never makes its attempt: the server that ran
    it answers with the start's own Cancelled, a new one with "never made"."""
    import fakegpu
    state = fakegpu.create_state(env["dir"] / "smi.json", gpus=2)
    env["env"] = fakegpu.env_with_standin(state, env["env"])
    a, b = _name(env, "g"), _name(env, "h")
    holder = subprocess.Popen(["sleep", "8"])
    fakegpu.attach(state, 0, holder.pid, 70000)
    cmd_a, cmd_b = f"sleep 301.{os.getpid()}", f"sleep 302.{os.getpid()}"

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", {"name": a, "command": cmd_a.split(), "on": "local",
                                                          "settle": 0.5, "gpus": [0], "wait_gpus_free": True},
                                                allow_claimed=True)
            assert isinstance(created, Created) and holder.poll() is None, "no handle until the GPU was free"
            assert created.task_id.startswith(f"start:{a}:1@local#"), created.task_id
            assert not _job_procs(cmd_a.encode()), "the job ran while GPU 0 was held"
            run = _cli(env, "status", a)["result"]["runs"][0]
            assert run["attempt"] is None and run["gpu_wait"]["attempt"] == 1 and run["gpu_wait"]["gpus"] == [0]
            listed = {r["name"]: r for r in _cli(env, "status")["result"]["runs"]}  # no name: listed too
            assert listed[a]["gpu_wait"]["attempt"] == 1 and listed[a]["state"] == "none", listed
            async with _client(env, ClientTasks()) as other:  # a process that did not make the task
                got = await get(other.session, created.task_id)
                assert got.status == "working" and "waiting for GPUs" in got.status_message, got
            got, seen = await poll(c.session, created.task_id, timeout=60)
            assert got.status == "completed" and not got.result["isError"], got
            assert holder.poll() is not None, "completed while the holder lived"
            doc = got.result["structuredContent"]
            assert doc["result"]["attempt"] == 1 and doc["result"]["gpu_wait"]["waited_s"] > 0
            assert _job_procs(cmd_a.encode()) == [doc["result"]["pid"]]
            # b waits behind a's job, which holds GPU 0 (the stand-in charges it), until stopped
            fakegpu.attach(state, 0, doc["result"]["pid"], 70000)
            created = await c.session.call_tool("start", {"name": b, "command": cmd_b.split(), "on": "local",
                                                          "settle": 0.5, "gpus": [0], "wait_gpus_free": True},
                                                allow_claimed=True)
            assert created.task_id.startswith(f"start:{b}:1@local#"), created.task_id
            stop = _cli(env, "stop", b, "--grace", "2")
            assert stop["ok"], stop
            got, _ = await poll(c.session, created.task_id, timeout=60)
            assert got.result["isError"] and got.result["structuredContent"]["error"]["type"] == "Cancelled", got
            assert not _job_procs(cmd_b.encode())
            # tasks/cancel during the wait: the start gives up, nothing ever runs
            d = _name(env, "i")
            waiting = await c.session.call_tool("start", {"name": d, "command": cmd_b.split(), "on": "local",
                                                          "settle": 0.5, "gpus": [0], "wait_gpus_free": True},
                                                allow_claimed=True)
            await c.session.send_request(CancelTask(params=TaskParams(task_id=waiting.task_id)), Ack)
            got, _ = await poll(c.session, waiting.task_id, timeout=60)
            assert got.status == "cancelled", got
            gone = _cli(env, "status", d)  # the first start gave up: no run, no record of a wait
            assert gone["error"]["type"] == "RunNotFound", gone
            assert not _job_procs(cmd_b.encode())
        async with _client(env, ClientTasks()) as c:
            got = await get(c.session, created.task_id)
            assert got.status == "completed" and got.result["isError"] and "never made" in got.status_message, got
            got = await get(c.session, waiting.task_id)
            assert got.status == "completed" and "never made" in got.status_message, got
    try:
        anyio.run(main)
    finally:
        holder.kill()
        holder.wait()


def test_a_task_says_what_happened_to_its_run(env):
    """A refused tasks/cancel (cancelling a start is a stop, which this policy refuses) changes
    nothing: the task stays working and completes, the job alive in /proc, as another server
    process says too. A task id naming a target runward.toml does not define is bad input
    (INVALID_PARAMS naming it, the server answering on), and one for a run that never existed
    is an error, not a completed task with a story of a GPU wait."""
    a, ghost = _name(env, "k"), _name(env, "ghost")
    cmd = f"sleep 303.{os.getpid()}"

    async def main():
        async with _client(env, ClientTasks(), ["--allow", "start,exec,status"]) as c:
            created = await c.session.call_tool("start", {"name": a, "command": cmd.split(), "on": "local",
                                                          "settle": 4}, allow_claimed=True)
            with pytest.raises(MCPError) as e:
                await c.session.send_request(CancelTask(params=TaskParams(task_id=created.task_id)), Ack)
            assert e.value.code == INVALID_PARAMS and "stop tool is not allowed" in str(e.value), e.value
            got = await get(c.session, created.task_id)
            assert got.status == "working", got
            got, seen = await poll(c.session, created.task_id)
            assert "cancelled" not in seen and got.status == "completed" and not got.result["isError"], (seen, got)
            assert _job_procs(cmd.encode()) == [got.result["structuredContent"]["result"]["pid"]]
        async with _client(env, ClientTasks()) as c:
            got = await get(c.session, created.task_id)
            assert got.status == "completed" and not got.result["isError"], got
            with pytest.raises(MCPError) as e:
                await get(c.session, f"start:{a}:1@gpu9#t=1")
            assert e.value.code == INVALID_PARAMS and "no target gpu9" in str(e.value), e.value
            with pytest.raises(MCPError) as e:
                await get(c.session, f"start:{ghost}:1@local#t=1&s=3")
            assert e.value.code == INVALID_PARAMS and "no such run" in str(e.value), e.value
            with pytest.raises(MCPError) as e:
                await c.session.send_request(CancelTask(params=TaskParams(task_id=f"start:{ghost}:1@local#t=1")), Ack)
            assert e.value.code == INVALID_PARAMS, e.value
            assert (await get(c.session, created.task_id)).status == "completed"  # still answering
        assert _cli(env, "status", ghost)["error"]["type"] == "RunNotFound"
        assert not (env["dir"] / "home" / "runs" / ghost).exists()
        assert _job_procs(cmd.encode())
    anyio.run(main)


def test_a_start_without_settle_is_judged_against_the_settle_runward_toml_gives_it(env):
    """A run runward.toml defines with settle = 5, started through MCP without a settle: the
    task's handle carried no settle, so a server process that did not create the task judged
    an exit at 1 s against 0 s, "alive after its settle period, and has ended since"."""
    a = _name(env, "t")
    (env["dir"] / "runward.toml").write_text(
        f'[runs.{a}]\ncommand = ["sh", "-c", "sleep 1; exit 3"]\nsettle = 5\n')

    async def main():
        async with _client(env, ClientTasks()) as c:
            created = await c.session.call_tool("start", {"name": a}, allow_claimed=True)
            _kill_servers()
        async with _client(env, ClientTasks()) as c:
            got, _ = await poll(c.session, created.task_id)
        assert got.status == "completed" and got.result["isError"], got
        assert "exited during its settle period" in got.status_message, got
    anyio.run(main)
