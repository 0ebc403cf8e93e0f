"""The docker hop: `docker:NAME` (`docker exec -i NAME ARGV`; -i keeps stdin open, which
carries the agent and its request)."""

KIND = "docker"


def check(name: str) -> str | None:
    return None


def wrap(hop, inner: list[str]) -> list[str]:
    return ["docker", "exec", "-i", hop.name, *inner]
