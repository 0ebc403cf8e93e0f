"""What a person or runward.toml asked, checked before any request: the declared options,
runward.toml, input values, restart's merged spec, supervision and health settings."""
