"""costscale: dispatcher."""
