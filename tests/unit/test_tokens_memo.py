"""Remembered counts: answers come back without counting again, least recently used go first, and long
strings are always counted."""

from __future__ import annotations

from om_core.tokens.memo import MAX_REMEMBERED_CHARS, RememberedCounts


def test_a_string_is_counted_once_and_then_remembered() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    remembered = RememberedCounts(count)
    assert [remembered("a b c"), remembered("a b c"), remembered("d e")] == [3, 3, 2]
    assert calls == ["a b c", "d e"]
    assert (remembered.hits, remembered.misses) == (1, 2)


def test_the_least_recently_used_count_goes_first() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    remembered = RememberedCounts(count, max_entries=2)
    for text in ("one", "two", "one", "three", "one", "two"):
        remembered(text)
    # "two" was least recently used when "three" came, so it is counted again at the end; "one" never is.
    assert calls == ["one", "two", "three", "two"]
    assert len(remembered) == 2


def test_long_strings_are_counted_every_time_and_not_kept() -> None:
    calls: list[int] = []

    def count(text: str) -> int:
        calls.append(len(text))
        return 1

    remembered = RememberedCounts(count)
    long = "x" * (MAX_REMEMBERED_CHARS + 1)
    remembered(long)
    remembered(long)
    assert calls == [len(long), len(long)]
    assert len(remembered) == 0
