"""The docker hop: `docker:NAME` (`docker exec -i NAME ARGV`; -i keeps stdin open, which
carries the agent and its request)."""

KIND = "docker"
TOOL = "docker"  # run one level out: on the host, or in the container before it

# How this hop's failures read (transport/diagnosis.py asks each hop): the first words of its tool's
# own lines (SAYS names the hop, LINE tells them from ssh's), the container absent and the
# container stopped (case ignored), and what a person runs to check and start it.
SAYS = r"Error|docker"
LINE = r"Error[: ]|Error response from daemon|OCI runtime|runc: "
ABSENT = r"No such container"
STOPPED = r"is not running|cannot exec in a stopped|is paused"
CHECK = "docker ps -a | grep {name}; docker start {name}"


def check(name: str) -> str | None:
    return None


def wrap(hop, inner: list[str]) -> list[str]:
    return ["docker", "exec", "-i", hop.name, *inner]
