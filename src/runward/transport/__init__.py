"""How a request reaches the agent: the hop chain's argv, ssh multiplexing, the spawned
agent process, the resident agent's route and relay, and a failed call's diagnosis."""
