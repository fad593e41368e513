"""Spot capacity (SpotHedge): the market decisions, the fleet tick's spot hooks, interruption notices."""
