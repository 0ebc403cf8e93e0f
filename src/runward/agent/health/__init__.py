"""The agent's judges of a run's health: stall and straggler, root cause across ranks,
stack captures and their grouping."""
