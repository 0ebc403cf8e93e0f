"""What a target is: Hop (one link of the chain) and Target (the chain, its label, home,
interpreter and, for an engine's scheme, that engine and what its scheme read), how each is
written and how an argv is wrapped through them. The grammar that reads a target string is
__init__.py's parse_target (and an engine's scheme module, __init__.ENGINES); both build
these, so they live here, below both (no import cycle between the package and its engines)."""

from __future__ import annotations

from ..errors import BadInput
from . import docker, lxc, pct, podman, ssh

# The container hops, by the kind written in a target (`KIND:NAME`).
CONTAINER_HOPS = {m.KIND: m for m in (pct, docker, podman, lxc)}
CONTAINER_KINDS = tuple(CONTAINER_HOPS)
CNAME_PAT = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


class Hop:
    """One link of a target chain. (Plain class, not a dataclass: dataclasses costs the CLI
    ~8 ms of start-up through `inspect`.)"""
    __slots__ = ("kind", "name", "user", "port")

    def __init__(self, kind: str, name: str, user: str | None = None, port: int | None = None):
        self.kind = kind      # ssh | pct | docker | podman | lxc
        self.name = name      # host for ssh, container name or id otherwise
        self.user = user
        self.port = port

    def __eq__(self, other) -> bool:
        return isinstance(other, Hop) and (self.kind, self.name, self.user, self.port) == (
            other.kind, other.name, other.user, other.port)

    def __hash__(self) -> int:
        return hash((self.kind, self.name, self.user, self.port))

    def __repr__(self) -> str:
        return f"Hop({str(self)!r})"

    def __str__(self) -> str:
        if self.kind == "ssh":
            s = self.name
            if self.user:
                s = f"{self.user}@{s}"
            if self.port:
                s = f"{s}:{self.port}"
            return f"ssh://{s}"
        return f"{self.kind}:{self.name}"

    def wrap(self, argv: list[str], ssh_base: list[str] | None = None) -> list[str]:
        """The argv that runs `argv` through this hop."""
        if self.kind == "ssh":
            return ssh.wrap(self, argv, ssh_base)
        return CONTAINER_HOPS[self.kind].wrap(self, argv)

    def ssh_argv(self, base: list[str], options: list[str], remote: str | None = None) -> list[str]:
        return ssh.argv(self, base, options, remote)


class Target:
    __slots__ = ("hops", "label", "home", "python", "engine", "engine_spec")

    def __init__(self, hops: tuple[Hop, ...] = (), label: str | None = None, home: str | None = None,
                 python: str | None = None):
        self.hops = tuple(hops)
        self.label = label    # the name it was given in runward.toml, if any
        self.home = home      # state dir on the target (None: the agent's default)
        self.python = python  # the far side's interpreter (None: python3 from the remote PATH)
        self.engine = None       # the engine's scheme module (targets/NAME.py) that runs the job; None: the shim's fork
        self.engine_spec = None  # what that scheme read (target and runward.toml); it goes with every request

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and (self.hops, self.home, _engine_key(self)) == (
            other.hops, other.home, _engine_key(other))

    def __hash__(self) -> int:
        return hash((self.hops, self.home, _engine_key(self)))

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    @property
    def is_local(self) -> bool:
        return not self.hops

    def __str__(self) -> str:
        if self.engine is not None:
            return self.engine.render(self)
        return "/".join(str(h) for h in self.hops) if self.hops else "local"

    def display(self) -> str:
        return f"{self.label} ({self})" if self.label and self.label != str(self) else str(self)

    def host_prefix(self) -> "Target":
        """The target up to (and including) the last ssh hop: where the container's host lives."""
        idx = max((i for i, h in enumerate(self.hops) if h.kind == "ssh"), default=-1)
        return Target(self.hops[: idx + 1], home=None, python=self.python)

    def wrap(self, argv: list[str], ssh_base: list[str] | None = None, tagged: bool = False) -> list[str]:
        """tagged: an ssh hop followed by a container hop has its remote shell say its pid and
        start time first (ssh.TAG), so that the CLI can end that hop's command on the host
        when it gives the call up (diagnosis.end_far): sshd never signals it."""
        for i in reversed(range(len(self.hops))):
            hop = self.hops[i]
            if tagged and hop.kind == "ssh" and i + 1 < len(self.hops) and self.hops[i + 1].kind != "ssh":
                argv = ssh.wrap(hop, argv, ssh_base, tagged=True)
            else:
                argv = hop.wrap(argv, ssh_base)
        return argv

    def hop_names(self) -> list[str]:
        return ["local", *(str(h) for h in self.hops)]


def head_hops(hostpart: str, text: str, what: str, fix: str) -> tuple[Hop, ...]:
    """The hops to an engine's host (where its jobs are submitted and its agent runs):
    none for `local`, else one ssh hop of `[user@]host[:port]`; BadInput names WHAT."""
    if hostpart == "local":
        return ()
    parsed = ssh.parse(hostpart)
    if parsed is None:
        raise BadInput(f"invalid {what} {hostpart!r} in target {text!r}", fix)
    host, user, port = parsed
    if port is not None and not 0 < port < 65536:
        raise BadInput(f"invalid port {port} in target {text!r}", "ports are 1-65535")
    return (Hop("ssh", host, user, port),)


def _engine_key(t: Target):
    """What tells two targets of an engine apart besides their hops (a partition, say)."""
    return t.engine.render(t) if t.engine is not None else None
