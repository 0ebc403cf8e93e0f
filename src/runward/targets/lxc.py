"""The lxc hop: `lxc:NAME` (`lxc-attach -n NAME -- ARGV`)."""

KIND = "lxc"


def check(name: str) -> str | None:
    return None


def wrap(hop, inner: list[str]) -> list[str]:
    return ["lxc-attach", "-n", hop.name, "--", *inner]
