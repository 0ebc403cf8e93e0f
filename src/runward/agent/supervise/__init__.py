"""The shim and what it keeps: the restart policy, health actions, progress, notify,
the GPU gates and barrier, and a multi-node run's peers."""
