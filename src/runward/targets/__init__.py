"""Target grammar and hops.

A target is a chain of hops: `local`, `ssh://[user@]host[:port]`, then container hops
`pct:ID`, `docker:NAME`, `podman:NAME`, `lxc:NAME`, joined with `/`
(`ssh://root@10.1.2.6:10638/pct:200`), or a container hop alone for this machine.

Each hop wraps an argv into the argv that runs it one level out; each kind is one small
module of this package (ssh.py, pct.py, docker.py, podman.py, lxc.py) with its wrap() and
the check of its name. Only the ssh hop turns an argv into a string (the remote user's
shell reads it), quoting every word once with POSIX rules; nobody writes nested quotes by
hand. docs/architecture.md shows how a hop is added.
"""

from __future__ import annotations

import re

from ..errors import BadInput
from . import ray, slurm, ssh
from .model import CONTAINER_HOPS, CONTAINER_KINDS, Hop, Target, CNAME_PAT
from .ssh import quote_argv  # re-exported: transport and the tests quote with it

# The schemes that hand a run to an engine (docs/architecture.md, "a new engine"): NAME -> its
# module, which parses the scheme, renders it, and adds its entry to every request.
ENGINES = {m.NAME: m for m in (slurm, ray)}
ENGINE_OPTION_KEYS = tuple(k for m in ENGINES.values() for k in m.OPTION_KEYS)  # runward.toml [targets.X] keys
# those of them that are seconds or a duration, as runward.toml writes them ("5m")
ENGINE_DURATION_KEYS = tuple(k for m in ENGINES.values() for k in getattr(m, "DURATION_KEYS", ()))


def engine_of(d: dict | None):
    """The engine's scheme module a request, result or attempt record names (its NAME key, as
    the agent's launchers.named reads it), None for a run the shim forked."""
    return next((m for n, m in ENGINES.items() if d and d.get(n)), None)


def engine_options(t: dict) -> dict:
    """The keys of a runward.toml [targets.X] section that are an engine's options."""
    return {k: t[k] for k in ENGINE_OPTION_KEYS if k in t}


def parse_target(text: str, *, label: str | None = None, home: str | None = None,
                 python: str | None = None, engine_options: dict | None = None) -> Target:
    """Parse the target grammar; BadInput names the part that is wrong. engine_options:
    runward.toml's options of an engine's target (ENGINE_OPTION_KEYS)."""
    if not isinstance(text, str) or not text.strip():
        raise BadInput("empty target", "use local, ssh://[user@]host[:port], or a container hop like podman:NAME")
    text = text.strip()
    for engine in ENGINES.values():
        if text.startswith(engine.SCHEME):
            return engine.parse(text, label=label, home=home, python=python, options=engine_options)
    if engine_options:
        engine = next(m for m in ENGINES.values() if set(engine_options) & set(m.OPTION_KEYS))
        raise BadInput(f"[targets.{label}] has {engine.LABEL} options ({', '.join(engine_options)}) but is not a "
                       f"{engine.SCHEME} target", f"write on = \"{engine.FORM}\", or remove them")
    if text == "local":
        return Target((), label=label, home=home, python=python)
    hops: list[Hop] = []
    rest = text
    if rest.startswith("ssh://"):
        rest = rest[len("ssh://"):]
        hostpart, _, rest = rest.partition("/")
        parsed = ssh.parse(hostpart)
        if parsed is None:
            raise BadInput(f"invalid ssh host {hostpart!r} in target {text!r}",
                           "write ssh://[user@]host[:port], e.g. ssh://root@10.1.2.6:10638")
        host, user, port = parsed
        if port is not None and not 0 < port < 65536:
            raise BadInput(f"invalid port {port} in target {text!r}", "ports are 1-65535")
        hops.append(Hop("ssh", host, user, port))
    elif "://" in rest:
        raise BadInput(f"unknown scheme in target {text!r}", " and ".join(["ssh://", *(m.SCHEME for m in ENGINES.values())]) + " are supported; containers are kind:NAME")
    for part in filter(None, rest.split("/")):
        kind, sep, name = part.partition(":")
        if not sep and part == text:  # a bare word: meant as a target's name
            raise BadInput(f"no target {text} (not a name of runward.toml's [targets], nor a target)",
                           "define [targets.NAME] in runward.toml, or give local, ssh://[user@]host[:port], "
                           "podman:NAME, ssh://host/pct:200")
        if kind == "ssh" and not hops:  # `ssh:/host`, `ssh:host`: the slashes short
            raise BadInput(f"invalid hop {part!r} in target {text!r}",
                           f"an ssh hop is written with two slashes: ssh://[user@]host[:port], e.g. "
                           f"ssh://{text.split(':', 1)[1].lstrip('/') or 'HOST'}")
        if not sep or kind not in CONTAINER_KINDS:
            raise BadInput(f"invalid hop {part!r} in target {text!r}",
                           f"a container hop is one of {', '.join(k + ':NAME' for k in CONTAINER_KINDS)}")
        if not re.match(CNAME_PAT, name):
            raise BadInput(f"invalid container name {name!r} in target {text!r}",
                           "container names are letters, digits, '_', '.', '-'")
        wrong = CONTAINER_HOPS[kind].check(name)
        if wrong:
            why, _, fix = wrong.partition("; ")
            raise BadInput(why, fix or None)
        hops.append(Hop(kind, name))
    if not hops:
        raise BadInput(f"invalid target {text!r}", "use local, ssh://host, or KIND:NAME")
    if any(h.kind == "ssh" for h in hops[1:]):
        raise BadInput(f"ssh hop after a container in {text!r}", "put the ssh hop first")
    return Target(tuple(hops), label=label, home=home, python=python)
