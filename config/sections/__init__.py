"""The config's sections beside the top-level schema: dispatcher, loop intervals, lease, spot, pipelines, security, batch-size distributions."""
