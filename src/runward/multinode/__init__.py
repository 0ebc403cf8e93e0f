"""Runs over several nodes: start all or nothing, stop/status/logs/history over every node,
their deploy and checkpointed stop, the cross-node verdict, the bounded fan-out pool."""
