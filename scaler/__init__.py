"""costscale: scaler."""
