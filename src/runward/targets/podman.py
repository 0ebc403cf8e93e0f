"""The podman hop: `podman:NAME` (`podman exec -i NAME ARGV`, docker's command line)."""

KIND = "podman"


def check(name: str) -> str | None:
    return None


def wrap(hop, inner: list[str]) -> list[str]:
    return ["podman", "exec", "-i", hop.name, *inner]
