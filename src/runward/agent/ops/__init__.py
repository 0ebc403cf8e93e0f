"""The agent's operations, one module per family of verbs; main.py's table says which
function serves which op, and imports its module only when that op is asked for."""
