"""The demos (``costscale demo``): one model, several, a pipeline, spot, replicas, and the sandbox."""
