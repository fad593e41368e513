"""costscale: daemon."""
