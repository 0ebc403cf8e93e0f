"""The pct hop: a Proxmox container, `pct:ID` (`pct exec ID -- env -i ... ARGV`, which is
lxc-attach underneath).

pct exec runs lxc-attach with the caller's environment and takes no option to clear it, so the
argv starts with `env -i` and the environment `lxc-attach --clear-env` gives (targets/lxc.py):
the container's own, never the operator's."""

KIND = "pct"
TOOL = "pct"  # run one level out: on the host, or in the container before it

# How this hop's failures read (transport/diagnosis.py asks each hop): the first words of its tool's
# own lines, lxc-attach's underneath it too (SAYS names the hop, LINE tells them from ssh's),
# the container absent and the container stopped (case ignored), and what a person runs to
# check and start it.
SAYS = r"pct|lxc-"
LINE = r"lxc-\w+: "
ABSENT = r"Configuration file '.*' does not exist|does not exist"
STOPPED = r"Failed to get init pid|not running"
CHECK = "pct status {name}; pct start {name}"
# lxc-attach --clear-env's own: container=lxc and lxc's default PATH
CLEAN_ENV = ("container=lxc", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")


def check(name: str) -> str | None:
    """What is wrong with this container name, or None."""
    return None if name.isdigit() else f"pct hop needs a numeric container id, got {name!r}; write pct:200"


def wrap(hop, inner: list[str]) -> list[str]:
    return ["pct", "exec", hop.name, "--", "env", "-i", *CLEAN_ENV, *inner]
