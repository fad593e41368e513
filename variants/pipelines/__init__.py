"""Multi-model pipelines (Loki): inputs, the two-step planner, MostAccurateFirst routing, the model loop's round."""
