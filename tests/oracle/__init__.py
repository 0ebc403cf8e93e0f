"""The model-based oracle (issue 26): hypothesis stateful testing over real targets. See
docs/testing.md. Modules: job (the job it runs), truth (ground truth from /proc and files),
world (targets, session, the CLI), model (what should be), machine (rules and invariants),
soak (the scripts/oracle entry)."""
