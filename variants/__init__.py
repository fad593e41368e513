"""costscale: variants."""
