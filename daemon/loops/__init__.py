"""The daemon's loops around the fleet tick: the model loop, its accuracy and pipeline rounds, the pick confirmer, what the fleet loop last did."""
