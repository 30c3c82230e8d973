"""Control plane: rollouts, trajectories, policy endpoint, LLM gateway, metrics."""
