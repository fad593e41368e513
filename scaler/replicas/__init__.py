"""Several control hosts: the cluster lease, replica membership and heartbeats, which replica owns which worker, the handoff, the DynamoDB items they share."""
