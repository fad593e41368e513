"""A record a loop appends to for as long as the daemon runs: the latest items only, and how many
there ever were, so a reader that remembers a count (``daemon.observe.status_feed``) gets exactly the items
appended since. A daemon runs for months; its loops' records must not grow with it."""
from __future__ import annotations

from collections import deque
from typing import Generic, Iterable, Iterator, TypeVar

T = TypeVar("T")

#: items each record keeps
KEEP = 1000


class Recent(Generic[T]):
    """The latest ``keep`` items appended, and :attr:`total`, how many were appended in all."""

    def __init__(self, keep: int = KEEP) -> None:
        self._items: deque[T] = deque(maxlen=keep)
        self.total = 0

    def append(self, item: T) -> None:
        self._items.append(item)
        self.total += 1

    def __iadd__(self, items: Iterable[T]) -> "Recent[T]":
        for x in items:
            self.append(x)
        return self

    def since(self, seen: int) -> list[T]:
        """The items appended after the first ``seen`` (those still kept)."""
        new = min(self.total - seen, len(self._items))
        return list(self._items)[len(self._items) - new:] if new > 0 else []

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return list(self._items) == (list(other) if isinstance(other, (list, Recent)) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self._items))


__all__ = ["KEEP", "Recent"]
