"""Status shows which replica owns which worker (issue #27 deliverable 2): the facts a replica
gives, through the StatusReply message, to ``costscale status`` JSON and text, hand-built."""
from __future__ import annotations


from daemon.commands.status import replica_lines, status_dict
from dispatcher.proto import costscale_pb2 as pb
from dispatcher.api.status import ReplicaFacts


def _reply(replica: ReplicaFacts | None) -> pb.StatusReply:
    r = pb.StatusReply(cluster="ha", budget_per_hour=1.0)
    if replica is not None:
        r.replica.CopyFrom(pb.ReplicaStatus(id=replica.id, lease_holder=replica.lease_holder, live=list(replica.live),
                                            owners=dict(replica.owners), releasing=dict(replica.releasing),
                                            forwarding_to=replica.forwarding_to,
                                            owners_version=replica.owners_version))
    return r


def test_status_names_the_owner_of_each_worker_and_the_forwarding() -> None:
    facts = ReplicaFacts(id="host-b:50051", lease_holder=False, live=("host-a:50051", "host-b:50051"),
                         owners={"i-2": "host-a:50051", "i-1": "host-a:50051"}, releasing={"i-3": "host-a:50051"},
                         forwarding_to="10.0.0.11:50051", owners_version=7)
    s = status_dict(_reply(facts))
    assert s["replica"] == {"id": "host-b:50051", "lease_holder": False, "live": ["host-a:50051", "host-b:50051"],
                            "owners": {"i-1": "host-a:50051", "i-2": "host-a:50051"},
                            "releasing": {"i-3": "host-a:50051"}, "forwarding_to": "10.0.0.11:50051",
                            "owners_version": 7}
    assert replica_lines(s) == [
        "replica  host-b:50051: standby; forwards its queries to 10.0.0.11:50051; live: host-a:50051, host-b:50051; "
        "owners version 7",
        "  host-a:50051 owns i-1, i-2",
        "  i-3 moving to host-a:50051 (its old owner finishing its query)",
    ]


def test_a_single_dispatcher_shows_no_replica_section() -> None:
    s = status_dict(_reply(None))
    assert s["replica"] is None and replica_lines(s) == []
    holder = status_dict(_reply(ReplicaFacts(id="a:1", lease_holder=True, live=("a:1",), owners={"i-1": "a:1"})))
    assert replica_lines(holder)[0].startswith("replica  a:1: lease holder (runs the fleet loop); serves its queries itself")
