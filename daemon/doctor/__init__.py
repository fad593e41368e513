"""costscale doctor: pre-flight checks that spend nothing, one module per area (account, launch, network, services)."""
