"""The Ray test cluster (scripts/ray-testbed) as the Ray tests reach it: its record, the CLI
in its network namespace, Ray's own word on a job (ground truth beside /proc), an MCP server
there, and the shape of a document (what the CLI's, the library's and MCP's share)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import CLI, marked, wait_for

RAY_DIR = os.environ.get("RUNWARD_RAY") or "/tmp/runward-ray"
# a job whose child escapes Ray's snapshot of the driver's tree: a new session, double forked
ESCAPING = 'echo hello; setsid sh -c "(exec sleep 901 &)"; exec sleep 300'


def ray_testbed() -> dict:
    """ray.json of scripts/ray-testbed, or a skip that says why there is none."""
    try:
        with open(os.path.join(RAY_DIR, "ray.json")) as f:
            tb = json.load(f)
    except (OSError, ValueError):
        pytest.skip(f"no Ray testbed ({RAY_DIR}/ray.json): run `scripts/ray-testbed up` as root")
    if os.geteuid() != 0:
        pytest.skip("the Ray testbed lives in a network namespace: run the tests as root")
    if subprocess.run(["scripts/ray-testbed", "status"], cwd=os.path.dirname(os.path.dirname(__file__)),
                      capture_output=True).returncode != 0:
        pytest.skip("the Ray testbed does not answer (`scripts/ray-testbed status`): `scripts/ray-testbed up`")
    return tb


class NetnsCLI(CLI):
    """runward's CLI run on the head: inside the cluster's network namespace."""

    def __init__(self, base: CLI, netns: str):
        super().__init__(base.home, base.cwd)
        self.netns = netns

    def argv(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, sys.executable, "-m", "runward", *args]


@pytest.fixture
def tb():
    return ray_testbed()


@pytest.fixture
def rcli(cli, tb):
    return NetnsCLI(cli, tb["netns"])


def ray_job(tb: dict, sid: str) -> dict | None:
    """Ray's own record of a job (GET /api/jobs/ID, from inside the namespace)."""
    code = ("import json, sys, urllib.request, urllib.error\n"
            "try: print(urllib.request.urlopen(sys.argv[1] + '/api/jobs/' + sys.argv[2], timeout=10).read().decode())\n"
            "except urllib.error.HTTPError: print('null')")
    out = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code, tb["dashboard"], sid],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def ray_jobs(tb: dict) -> list:
    """Ray's own job list (GET /api/jobs/, from inside the namespace)."""
    code = "import sys, urllib.request\nprint(urllib.request.urlopen(sys.argv[1] + '/api/jobs/', timeout=10).read().decode())"
    out = subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code, tb["dashboard"]],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def mcp_calls(rcli, tb: dict, calls: list, after=None) -> dict:
    """Each (tool, args) of CALLS through one `runward mcp` server in the cluster's namespace:
    tool -> (is_error, its JSON document); AFTER(tool, docs) runs after each call."""
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    docs = {}

    async def main():
        params = StdioServerParameters(command="ip", args=["netns", "exec", tb["netns"], sys.executable, "-m",
                                                           "runward", "mcp"], env=rcli.env, cwd=str(rcli.cwd))
        with open(rcli.cwd / "mcp-server.stderr", "a") as err:
            async with stdio_client(params, errlog=err) as (r, w):
                async with ClientSession(r, w) as s:
                    with anyio.fail_after(120):
                        await s.initialize()
                        for tool, args in calls:
                            res = await s.call_tool(tool, args)
                            docs[tool] = (res.is_error, json.loads(res.content[0].text))
                            if after:
                                after(tool, docs)
    anyio.run(main)
    return docs


def recorded(path: str) -> list[tuple[int, int]]:
    """The (pid, start time) pairs scripts/ray-testbed wrote of a node's daemons."""
    with open(path) as f:
        return [(int(p), int(t)) for p, t in (line.split() for line in f if line.strip())]


def second_node(tb: dict) -> str:
    """The node id of the cluster's live node that is not the head (the one with fake_gpu):
    a node that died (a restart of the head or of this node) stays listed, DEAD."""
    code = ("import json, sys, urllib.request\n"
            "doc = json.load(urllib.request.urlopen(sys.argv[1] + '/nodes?view=summary', timeout=10))\n"
            "print([n['raylet']['nodeId'] for n in doc['data']['summary'] if not n['raylet'].get('isHeadNode')\n"
            "       and n['raylet']['state'] == 'ALIVE'][0])")
    return subprocess.run(["ip", "netns", "exec", tb["netns"], sys.executable, "-c", code, tb["dashboard"]],
                          capture_output=True, text=True, check=True).stdout.strip()


def ray_cli(tb: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", tb["netns"], tb["ray"], "job", *args, "--address", tb["dashboard"]],
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0"))


def escapee(marker: str) -> int:
    """The pid of the double-forked `sleep 901` carrying the marker, once it is there."""
    def find():
        procs = marked(marker)
        return next((p for p in procs if open(f"/proc/{p}/cmdline", "rb").read().startswith(b"sleep\x00901")), None)
    return wait_for(find, timeout=20, what="the escaped child")


def _shape(doc):
    """A document's keys, recursively (list items by their first), values by type: what the
    MCP server's and the library's documents share with the CLI's, where pids and times differ.
    An exit's own keys are left out: they say how the job ended (Ray's driver_exit_code is a
    code or a signal, by whose signal reached the driver first), in any document."""
    if isinstance(doc, dict):
        return {k: "dict" if k == "exit" and isinstance(v, dict) else _shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_shape(doc[0])] if doc else []
    return type(doc).__name__
