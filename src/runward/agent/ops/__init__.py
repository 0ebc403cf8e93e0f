"""The agent's operations, one module per family of verbs; main.py's table says which
function serves which op, and imports its module only when that op is asked for."""


def launcher_ops(name):
    """An engine's launcher ops (ops/NAME.py: start, stop, status_of), for the launcher
    core/launchers.py names; imported only when a request or an attempt is that engine's."""
    return __import__(name, globals(), None, ["start"], 1)


def node_ops(name):
    """An engine's ops on a node that is not its head (ops/NAMEnode.py: check), for the
    launcher core/launchers.py names; ImportError where the engine has none."""
    return __import__(name + "node", globals(), None, ["check"], 1)
