"""Per-process memos: a bounded, thread-safe LRU map that counts its hits and misses (the page
extraction memo and the open corpora share it)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = 0

    def get(self, key: str, valid: Callable[[V], bool] | None = None) -> V | None:
        """The value for ``key`` (a hit) unless absent or not ``valid`` any more (a miss)."""
        with self._lock:
            value = self._items.get(key)
            if value is not None and (valid is None or valid(value)):
                self._items.move_to_end(key)
                self._hits += 1
                return value
            self._misses += 1
            return None

    def put(self, key: str, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def info(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self._hits, "misses": self._misses, "size": len(self._items)}

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._hits = self._misses = 0
