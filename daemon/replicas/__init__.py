"""The daemon as one replica of a cluster: heartbeat, demand items, the lease retried, shared workers."""
