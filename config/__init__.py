"""costscale: config."""
