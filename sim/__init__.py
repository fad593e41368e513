"""costscale: sim."""
