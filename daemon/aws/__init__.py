"""The daemon's AWS wiring: region prices, the cluster lease and its fence, the cluster token, spot prices and interruption warnings."""
