"""How the pool moves: one fleet tick, its decisions in order, parking, worker assignment, budget-ordered transitions and the actuator that applies them with write-ahead intents."""
