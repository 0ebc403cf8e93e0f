"""runward: verified lifecycle for long-running jobs on local, SSH and container targets.

The Python API (docs/api.md): `runward.Target`, one function per verb (`runward.start`,
`runward.stop`, `runward.status`, ...) returning typed results whose `.to_json()` is the
CLI's `--json` document. The names in __all__ are stable; everything else is private. They
are loaded on first use (library.py), so `import runward` and `runward --help` stay light.
"""
__version__ = "0.1.0"

__all__ = ["Target", "Result", "StartResult", "StopResult", "RestartResult", "StatusResult", "LogsResult",
           "WatchResult", "Failed", "start", "stop", "restart", "status", "logs", "watch", "push", "deploy",
           "gpus", "ps", "kill", "exec", "lint_command", "doctor", "named_targets", "history", "compare",
           "stacks", "rm", "prune", "pull", "plot",
           "__version__"]
# lint and targets are runward's subpackages: `runward.lint` must stay the package (an
# attribute of the same name would be replaced by it on its first import), hence the names.


def __getattr__(name: str):
    if name in __all__:
        from . import library
        return getattr(library, name)
    raise AttributeError(f"module 'runward' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
