"""The pct hop: a Proxmox container, `pct:ID` (`pct exec ID -- ARGV`, which is lxc-attach
underneath)."""

KIND = "pct"


def check(name: str) -> str | None:
    """What is wrong with this container name, or None."""
    return None if name.isdigit() else f"pct hop needs a numeric container id, got {name!r}; write pct:200"


def wrap(hop, inner: list[str]) -> list[str]:
    return ["pct", "exec", hop.name, "--", *inner]
