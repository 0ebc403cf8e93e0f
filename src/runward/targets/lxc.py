"""The lxc hop: `lxc:NAME` (`lxc-attach -n NAME --clear-env -- ARGV`).

lxc-attach keeps the caller's environment by default: the operator's variables (a token, their
PATH, a HOME that does not exist in the container) would reach the agent and the job.
--clear-env gives the container's own (PATH, container=lxc); the agent fills in the login's
HOME, USER, LOGNAME and SHELL from the container's passwd (agent/ops/start.build_env), as
`docker exec` gives a job the container's environment."""

KIND = "lxc"
TOOL = "lxc-attach"  # run one level out: on the host, or in the container before it

# How this hop's failures read (transport/diagnosis.py asks each hop): the first words of its tool's
# own lines (SAYS names the hop, LINE tells them from ssh's), the container absent and the
# container stopped (case ignored), and what a person runs to check and start it.
SAYS = r"lxc-"
LINE = r"lxc-\w+: "
ABSENT = r"does not exist|doesn't exist"
STOPPED = r"Failed to get init pid|not running"
CHECK = "lxc-info -n {name}; lxc-start -n {name}"
# lxc-attach says "Failed to get init pid" for a container that is stopped and for one that
# does not exist alike (lxc 5/6): where its words say stopped, lxc-info, run where lxc-attach
# runs, tells them apart ("NAME doesn't exist", exit 1; a stopped one answers its state).
EXISTS = ["lxc-info", "-n", "{name}"]


def check(name: str) -> str | None:
    return None


def wrap(hop, inner: list[str]) -> list[str]:
    return ["lxc-attach", "-n", hop.name, "--clear-env", "--", *inner]
