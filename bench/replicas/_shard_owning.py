"""The dispatcher replicas as the daemon runs them, for ``bench/replicas/shard_bench.py`` (issue #27,
deliverable 2): of ``R`` live replicas only ``k = owner_count(R, base)`` own workers
(``scaler.replicas.owning_replicas``, rule 1: each owner keeps >= ``MIN_BASE_PER_OWNER`` base-type workers),
the others forward their queries to every owner in turn (rule 3).

The balancer in front deals the queries round robin over the ``R`` replicas (gRPC round_robin or
an NLB; DESIGN "Beyond one control host"): query ``i`` reaches replica ``i mod R`` and is matched by
that replica if it owns workers, else by the owner it forwards to. So each owner matches a fixed
set of residues ``i mod R`` (:func:`owner_dealing`), its share ``scaler.replicas.owning_replicas.arrival_shares``,
over the workers ``scaler.replicas.owner_assignment.assign`` gives it among the ``k`` owners.

Replica ids are ``r0 .. r{R-1}`` with ``r0`` the lease holder; a forwarder goes over the owners in id
order, as the daemon's ``scaler.replicas.apply_owners.forward_targets`` and ``dispatcher.forwarding`` do.
No I/O.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping, Sequence

from scaler.replicas.owning_replicas import OwningReplicas, arrival_shares, owning_replicas

#: the replica counts the owning rows show (issue #27: "1 shard against 2 and 4")
REPLICAS = (2, 4)


@dataclass(frozen=True)
class OwnerDealing:
    """Which replicas own workers and which queries each owner matches: owner ``j`` matches the
    queries ``i`` with ``i mod period`` in ``residues[j]``."""

    owning: OwningReplicas
    period: int
    residues: tuple[tuple[int, ...], ...]

    @property
    def shares(self) -> tuple[Fraction, ...]:
        """Each owner's share of the queries, in owner order."""
        return tuple(Fraction(len(r), self.period) for r in self.residues)

    @property
    def forwarded(self) -> Fraction:
        """The share of the queries that reach a replica owning no worker and take one more hop."""
        live = len(self.owning.owners) + len(self.owning.forward_to)
        return Fraction(len(self.owning.forward_to), live)


def replica_names(replicas: int) -> list[str]:
    return [f"r{i}" for i in range(replicas)]


def owner_dealing(replicas: int, base_workers: int) -> OwnerDealing:
    """The owners among ``replicas`` live replicas (``r0`` holding the lease) of a pool with
    ``base_workers`` base-type workers, and the residues of the queries each owner matches: query
    ``i`` reaches replica ``i mod R``; an owner matches it, a forwarder sends its ``q``-th query
    (``q = i div R``) to its owners in turn (rule 3), starting one owner further for each
    forwarder, so the period is ``R k``."""
    names = replica_names(replicas)
    owning = owning_replicas(names, names[0], base_workers)
    k = len(owning.owners)
    period = replicas * k
    fwd = [n for n in names if n in owning.forward_to]
    shard = []
    for i in range(period):
        n = names[i % replicas]
        if n in owning.owners:
            shard.append(owning.owners.index(n))
        else:
            to = owning.forward_to[n][(i // replicas + fwd.index(n)) % k]
            shard.append(owning.owners.index(to))
    residues = tuple(tuple(i for i in range(period) if shard[i] == j) for j in range(k))
    got = dict(zip(owning.owners, (Fraction(len(r), period) for r in residues)))
    if got != arrival_shares(owning):   # pragma: no cover - the dealing is rule 3's by construction
        raise AssertionError(f"dealing {got} is not rule 3's shares {arrival_shares(owning)}")
    return OwnerDealing(owning, period, residues)


def round_robin(shards: int) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """``shards`` shards each matching every ``shards``-th query (the plain shard rows)."""
    return shards, tuple((k,) for k in range(shards))


def canonical(period: int, residues: Sequence[Sequence[int]]) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """The same dealing at its shortest period (``4, ((0, 2), (1, 3))`` is ``2, ((0,), (1,))``), so
    two dealings that send every query to the same shard compare equal. Every residue belongs to
    exactly one shard (every replica owns workers or forwards)."""
    shard_of = [-1] * period
    for j, r in enumerate(residues):
        for x in r:
            shard_of[x] = j
    if -1 in shard_of or sum(len(r) for r in residues) != period:
        raise ValueError(f"not a dealing of every residue mod {period} to one shard: {residues}")
    d = next(d for d in range(1, period + 1) if period % d == 0 and all(shard_of[x] == shard_of[x % d] for x in range(period)))
    return d, tuple(tuple(x for x in range(d) if shard_of[x] == j) for j in range(len(residues)))


def shares_text(shares: Sequence[Fraction]) -> str:
    return " / ".join(str(s) for s in shares)


def owning_table(rows: list[dict], models: Mapping[str, float], pool_text: Callable[[Mapping[str, int]], str]) -> str:
    """The owning-replica rows: per ``R``, the owners ``k``, their shares of the queries, the share
    forwarded, the allowable throughput and its ratio to one shard; where the shares are uneven,
    the ratio the same ``k`` owners reach with the queries spread evenly over them."""
    head = "| model (QoS) | budget $/hr | Kairos pool (base) | " + " | ".join(
        f"R={r}: k | R={r}: owners' shares | R={r}: forwarded | R={r} q/s | R={r} ÷ 1" for r in REPLICAS) \
        + " | uneven shares: ÷ 1 if spread evenly over the k owners |"
    lines = [head, "|" + "---|" * (4 + 5 * len(REPLICAS))]
    for r in rows:
        one = r["shards"][1][0]
        cells, even = [], []
        for rep in REPLICAS:
            got = r["owning"][rep]
            d: OwnerDealing = got["dealing"]
            cells.append(f"{len(d.owning.owners)} | {shares_text(d.shares)} | {float(d.forwarded):.0%} | "
                         f"{got['qps']:.0f} | " + (f"{got['qps'] / one:.3f}" if one > 0 else "-"))
            if got.get("even_qps") is not None and one > 0:
                even.append(f"R={rep}: {got['even_qps'] / one:.3f}")
        lines.append(f"| {r['model']} ({models[r['model']]:g} ms) | {r['budget']:g} | {pool_text(r['pool'])} "
                     f"({r['pool'].get(r['base'], 0)} {r['base'].split('.')[0]}) | " + " | ".join(cells)
                     + f" | {', '.join(even) or '(even)'} |")
    return "\n".join(lines)


__all__ = ["REPLICAS", "OwnerDealing", "canonical", "owner_dealing", "owning_table", "replica_names",
           "round_robin", "shares_text"]
