"""Trading accuracy for throughput (Proteus, SuperServe): the accuracy planner and its MILP, routing headroom, the round, adaptive batching, SlackFit."""
