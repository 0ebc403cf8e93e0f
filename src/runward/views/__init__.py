"""How results read: rendering shared by verbs, and each subject's own view (an engine's, stall,
stacks, health, plot overlays, the top-level help)."""
