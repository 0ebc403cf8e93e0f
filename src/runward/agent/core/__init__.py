"""The agent's base, below every other folder of it: the wire (JSON, the reply line,
AgentFailure), the home and a run's records, the blob and its bootstrap, /proc as it is read
(a process's identity), secrets, the launchers' registry, the resident. Nothing here imports
proc/, health/, supervise/, ops/ or the entry (main.py, __main__.py): tests/test_layout.py."""
