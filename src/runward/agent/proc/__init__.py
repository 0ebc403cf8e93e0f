"""The agent's processes: /proc read, signals and their fate, cgroups, a run's live members."""
