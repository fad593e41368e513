"""Demand forecasts (issue #39): per-model minute histories, the forecasters, the lead (pure)."""
