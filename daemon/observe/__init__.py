"""What the daemon shows: status feed, Prometheus metrics, audit events, bounded records, systemd notifications."""
