"""An object store in memory, for tests of what hosts share through it."""

from __future__ import annotations


class DictRoot:
    """A shared root in memory, with the object store's contract (create-only raw puts)."""

    url = "s3://bucket/prefix"

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_new(self, key: str, data: bytes) -> None:
        assert self.objects.setdefault(key, data) == data

    def put(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix.rstrip("/") + "/"))
