"""runward: verified lifecycle for long-running jobs on local, SSH and container targets."""
__version__ = "0.1.0"
