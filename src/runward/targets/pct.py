"""The pct hop: a Proxmox container, `pct:ID` (`pct exec ID -- env -i ... ARGV`, which is
lxc-attach underneath).

pct exec runs lxc-attach with the caller's environment and takes no option to clear it, so the
argv starts with `env -i` and the environment `lxc-attach --clear-env` gives (targets/lxc.py):
the container's own, never the operator's."""

KIND = "pct"
# lxc-attach --clear-env's own: container=lxc and lxc's default PATH
CLEAN_ENV = ("container=lxc", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")


def check(name: str) -> str | None:
    """What is wrong with this container name, or None."""
    return None if name.isdigit() else f"pct hop needs a numeric container id, got {name!r}; write pct:200"


def wrap(hop, inner: list[str]) -> list[str]:
    return ["pct", "exec", hop.name, "--", "env", "-i", *CLEAN_ENV, *inner]
