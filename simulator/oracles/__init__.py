"""Oracles to judge policies by: an upper bound on the prefix hit rate of a request set
(:mod:`.prefix_bound`) and a clairvoyant autoscaler (:mod:`.clairvoyant`)."""
