"""The Ray target: `ray://[user@]head[:sshport]`, or `ray://local` when the CLI runs on the
head (or in its network namespace, as the test cluster's runs do: docs/testbed.md).

Not a hop that wraps argv: the agent runs on the head (reached by the ssh hop, or here), and
its ops/ray.py submits the run as a Ray job through the dashboard's Jobs REST API, which
listens on the head (the common case: not exposed beyond it). runward.toml's [targets.X]
`dashboard` (the API's URL as seen from the head, default http://127.0.0.1:8265) and
`resources` (the job's entrypoint resources, e.g. {fake_gpu = 1}, which place its driver)
go with every request as its "ray" entry: the agent's launcher of that name
(agent/core/launchers.py) starts and stops the run. docs/ray.md; the engine seam:
docs/architecture.md, "a new engine"."""

from __future__ import annotations

import math
import re
import sys

from ..errors import BadInput
from .model import Target, head_hops

NAME = "ray"          # the request's and the attempt record's key; the agent's launcher; the view's ENGINE
LABEL = "Ray"
SCHEME = "ray://"
FORM = "ray://HEAD"
NODE_CHECK = True  # the agent's node_check stops the job's processes on a node not the head (agent/ops/raynode.py; transport/nodeagents.py)
HERE = SCHEME + "local"  # this host as the target: `status NAME` asked here without --on says it, as the start did
OPTION_KEYS = ("dashboard", "resources", "node_ssh", "pending_timeout")  # runward.toml's [targets.X] keys (docs/ray.md)
DURATION_KEYS = ("pending_timeout",)  # seconds or a duration ("5m"), made seconds by spec/config.py
DASHBOARD = "http://127.0.0.1:8265"
_URL_PAT = r"^https?://[A-Za-z0-9_.:\[\]-]{1,253}(:[0-9]{1,5})?/?$"
_RES_PAT = r"^[A-Za-z0-9_.:/-]{1,64}$"


def parse(text: str, *, label=None, home=None, python=None, options=None) -> Target:
    """A Target for `ray://HEAD`: an ssh hop to the head (none for local)."""
    hostpart = text[len(SCHEME):].rstrip("/")
    fix = "write ray://[user@]head[:sshport], or ray://local on the head"
    if not hostpart or "/" in hostpart:
        raise BadInput(f"invalid Ray target {text!r}", fix)
    t = Target(head_hops(hostpart, text, "head", fix), label=label, home=home, python=python)
    t.engine = sys.modules[__name__]
    t.engine_spec = check_options(options or {}, label or text)
    return t


def check_options(opts: dict, where: str) -> dict:
    """dashboard: an http(s) URL with no path; resources: a table of names to positive numbers;
    pending_timeout: seconds, how long past the start's watch a job Ray keeps PENDING is waited
    for before it is given up (an autoscaler's nodes take minutes; absent: the agent's default,
    ops/ray.py PENDING_S)."""
    out = {"dashboard": DASHBOARD, "resources": {}}
    for k, v in opts.items():
        if k not in OPTION_KEYS:
            raise BadInput(f"[targets.{where}] unknown Ray option {k!r}", f"options: {', '.join(OPTION_KEYS)}")
        if k == "node_ssh":
            out[k] = check_node_ssh(v, where)
        elif k == "pending_timeout":
            out[k] = _pending_timeout(v, where)
        elif k == "dashboard":
            if not isinstance(v, str) or not re.match(_URL_PAT, v):
                raise BadInput(f"[targets.{where}] invalid dashboard {v!r}",
                               'the Jobs API\'s address as seen from the head, e.g. dashboard = "http://127.0.0.1:8265"')
            out[k] = v.rstrip("/")
        else:
            ok = isinstance(v, dict) and all(isinstance(n, str) and re.match(_RES_PAT, n) and not isinstance(c, bool)
                                             and isinstance(c, (int, float)) and c > 0 for n, c in v.items())
            if not ok:
                raise BadInput(f"[targets.{where}] invalid resources {v!r}",
                               "a table of Ray resource names to amounts, e.g. resources = {fake_gpu = 1}")
            reserved = sorted(set(v) & {"CPU", "GPU", "memory"})
            if reserved:  # Ray takes the submission, then fails the job for them: refused before anything runs
                raise BadInput(f"[targets.{where}] resources names {', '.join(reserved)}: Ray takes no "
                               "CPU, GPU or memory among a job's entrypoint resources",
                               "--gpus N asks Ray for N GPUs; leave CPU and memory out (custom resources, "
                               "e.g. {fake_gpu = 1}, place the driver)")
            out[k] = dict(v)
    return out


def check_node_ssh(v, where: str) -> dict:
    """node_ssh: a table of a node's address (as Ray lists it) to the ssh target that reaches
    the agent there (transport/nodeagents.py; default ssh://USER@ADDRESS, USER the head's).
    Not `nodes`: another engine's option already has that name (a node count)."""
    from .ssh import parse as parse_ssh
    fix = 'a table of node addresses to ssh targets, e.g. node_ssh = {"10.0.0.7" = "ssh://gpu7"}'
    if not isinstance(v, dict):
        raise BadInput(f"[targets.{where}] invalid node_ssh {v!r}", fix)
    for addr, on in v.items():
        hop = parse_ssh(on[len("ssh://"):]) if isinstance(on, str) and on.startswith("ssh://") else None
        if hop is None or not 0 < (hop[2] or 22) < 65536:
            raise BadInput(f"[targets.{where}] node_ssh: {addr!r} = {on!r} is not an ssh target", fix)
    return dict(v)


def _pending_timeout(v, where: str) -> float:
    """Seconds: runward.toml's duration ("5m") is made seconds where the file is read
    (spec/config.py, DURATION_KEYS), as a run's are; what is left a word says none."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise BadInput(f"[targets.{where}] invalid pending_timeout {v!r}: not a number of seconds or a duration",
                       'how long past the start\'s watch a job Ray keeps PENDING is waited for, e.g. '
                       'pending_timeout = "5m"')
    return float(v)


def render(target: Target) -> str:
    """ray://HEAD, HEAD `local` when no ssh hop reaches the head."""
    return SCHEME + (str(target.hops[0])[len("ssh://"):] if target.hops else "local")


def keeps_job(res: dict) -> bool:
    """Whether Ray still keeps the job a stop's result is of (PENDING, RUNNING): the head's
    verdict on it then stands, whatever the nodes' agents found."""
    return res.get("ray_state") in ("PENDING", "RUNNING")


def request(target, req: dict) -> dict:
    """Every request to a Ray target carries its dashboard and resources: the agent's start
    submits with them (its stop and status read the job from the run's records)."""
    req[NAME] = {k: v for k, v in target.engine_spec.items() if k != "node_ssh"}  # the CLI's, for its hops
    return req
