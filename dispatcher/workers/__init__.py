"""The dispatcher's workers: the registry, roles (park, model), variant placement, the per-worker channel."""
