"""Latency profiles of the config's models: measured, estimated, probed on instances, refreshed on drift."""
