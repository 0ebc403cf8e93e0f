"""The podman hop: `podman:NAME` (`podman exec -i NAME ARGV`, docker's command line)."""

KIND = "podman"
TOOL = "podman"  # run one level out: on the host, or in the container before it

# How this hop's failures read (transport/diagnosis.py asks each hop): the first words of its tool's
# own lines (SAYS names the hop, LINE tells them from ssh's), the container absent and the
# container stopped (case ignored), and what a person runs to check and start it.
SAYS = r"Error|podman"
LINE = r"Error[: ]|OCI runtime|crun: |runc: "
ABSENT = r"no such container|unknown container|not found: container"
STOPPED = r"container state improper|not running"
CHECK = "podman ps -a | grep {name}; podman start {name}"


def check(name: str) -> str | None:
    return None


def wrap(hop, inner: list[str]) -> list[str]:
    return ["podman", "exec", "-i", hop.name, *inner]
