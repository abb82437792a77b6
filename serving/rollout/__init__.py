"""A weighted canary's decisions, pure: the evidence per version (evidence), the
verdict of one step (judge), the rollout's state machine (machine)."""
