"""The Slurm target: `slurm://[user@]login-host[:port]/PARTITION`, or `slurm://local/PARTITION`
when the CLI runs on a login node.

Not a hop that wraps argv: the agent runs on the login host (reached by the ssh hop, or here),
and its ops/slurm.py submits the job there with sbatch. The target carries the partition and
runward.toml's sbatch options ([targets.X] account, time, gpus, nodes, ntasks_per_node, srun,
extra), which go with every request as its "slurm" entry: the agent's launcher of that name
(agent/core/launchers.py) starts and stops the run. docs/slurm.md; the engine seam:
docs/architecture.md, "a new engine"."""

from __future__ import annotations

import re
import sys

from ..errors import BadInput
from .model import Target, head_hops

NAME = "slurm"        # the request's and the attempt record's key; the agent's launcher; the view's ENGINE
LABEL = "Slurm"
SCHEME = "slurm://"
FORM = "slurm://LOGIN/PARTITION"
# runward.toml's [targets.X] keys that are sbatch options (docs/slurm.md)
OPTION_KEYS = ("account", "time", "gpus", "nodes", "ntasks_per_node", "srun", "extra")
_PART_PAT = r"^[A-Za-z0-9_.-]{1,64}$"
_VALUE_PAT = r"^[A-Za-z0-9_.:,=/+-]{1,128}$"


def parse(text: str, *, label=None, home=None, python=None, options=None) -> Target:
    """A Target for `slurm://HOST/PARTITION`: an ssh hop to the login host (none for local)."""
    rest = text[len(SCHEME):]
    hostpart, _, part = rest.partition("/")
    fix = "write slurm://[user@]login-host[:port]/PARTITION, or slurm://local/PARTITION on a login node"
    if not part:
        raise BadInput(f"no Slurm partition in target {text!r}", fix)
    if not re.match(_PART_PAT, part):
        raise BadInput(f"invalid Slurm partition {part!r} in target {text!r}", "partition names are letters, "
                       "digits, '_', '.', '-' (`sinfo -s` lists them)")
    t = Target(head_hops(hostpart, text, "login host", fix), label=label, home=home, python=python)
    t.engine = sys.modules[__name__]
    t.engine_spec = {"partition": part, "options": check_options(options or {}, label or text)}
    return t


def check_options(opts: dict, where: str) -> dict:
    """runward.toml's sbatch options, checked: values are words sbatch takes (no spaces, no
    shell: they go to sbatch as argv, never through a shell); extra is a list of options."""
    out = {}
    for k, v in opts.items():
        if k not in OPTION_KEYS:
            raise BadInput(f"[targets.{where}] unknown Slurm option {k!r}", f"options: {', '.join(OPTION_KEYS)}")
        if k == "extra":
            if not isinstance(v, list) or not all(isinstance(a, str) and a.startswith("-") for a in v):
                raise BadInput(f"[targets.{where}] extra must be a list of sbatch options",
                               'extra = ["--cpus-per-task=2", "--mem=4G"]')
        elif k == "srun":
            if not isinstance(v, bool):
                raise BadInput(f"[targets.{where}] srun must be true or false", "srun = true")
        elif isinstance(v, bool) or not re.match(_VALUE_PAT, str(v)):
            raise BadInput(f"[targets.{where}] invalid {k} {v!r}", f"write {k} as sbatch takes it, e.g. time = \"1:00:00\"")
        out[k] = v
    if "nodes" in out and not str(out["nodes"]).isdigit():
        raise BadInput(f"[targets.{where}] nodes must be a number", "nodes = 2")
    return out


def render(target: Target) -> str:
    """slurm://HOST/PARTITION, HOST `local` when no ssh hop reaches the login node."""
    host = str(target.hops[0])[len("ssh://"):] if target.hops else "local"
    return f"{SCHEME}{host}/{target.engine_spec['partition']}"


def request(target, req: dict) -> dict:
    """Every request to a Slurm target carries its partition and options: the agent's start
    submits with them (its stop and status read the job from the run's records)."""
    req[NAME] = target.engine_spec
    return req
