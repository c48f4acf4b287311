"""The per-process memo: bounded LRU, counted hits and misses, entries that stop being valid."""

from deepresearch_dagster.core.memo import Memo


def test_least_recently_used_goes_first_and_every_lookup_is_counted():
    memo: Memo[int] = Memo(2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1  # "a" is now the most recent
    memo.put("c", 3)
    assert memo.get("b") is None and memo.get("a") == 1 and memo.get("c") == 3
    assert memo.info() == {"hits": 3, "misses": 1, "size": 2}
    memo.clear()
    assert memo.info() == {"hits": 0, "misses": 0, "size": 0}


def test_an_entry_that_is_no_longer_valid_is_a_miss():
    memo: Memo[tuple[str, int]] = Memo(4)
    memo.put("folder", ("state-1", 7))
    assert memo.get("folder", lambda e: e[0] == "state-2") is None
    assert memo.get("folder", lambda e: e[0] == "state-1") == ("state-1", 7)
    assert memo.info()["misses"] == 1
