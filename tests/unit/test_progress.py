"""The progress lines of `make bench`, `make load` and `make fuzz` (tests/support/progress.py), on a fake
clock: the ETA, the formatting and the rate limit, without a single sleep."""

from __future__ import annotations

import io

import pytest

from tests.support.progress import Progress, Ticker, clock_text, eta_s


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def progress(
    total: float = 200, *, every_s: float = 5.0, unit: str = "seeds"
) -> tuple[Progress, FakeClock, io.StringIO]:
    clock, out = FakeClock(), io.StringIO()
    return Progress("fuzz", total, unit=unit, every_s=every_s, out=out, clock=clock), clock, out


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0:00"),
        (59.4, "0:59"),
        (61, "1:01"),
        (600, "10:00"),
        (3599, "59:59"),
        (3600, "1:00:00"),
        (7384, "2:03:04"),
        (-3, "0:00"),
    ],
)
def test_clock_text(seconds: float, text: str) -> None:
    assert clock_text(seconds) == text


def test_eta_is_the_rest_at_the_rate_so_far() -> None:
    assert eta_s(done=50, total=200, elapsed_s=60) == pytest.approx(180)
    assert eta_s(done=200, total=200, elapsed_s=60) == 0
    assert eta_s(done=0, total=200, elapsed_s=60) is None, "no rate before the first item"
    assert eta_s(done=10, total=0, elapsed_s=60) is None
    assert eta_s(done=10, total=20, elapsed_s=0) is None
    assert eta_s(done=0.0001, total=600, elapsed_s=0.0001) is None, "a sliver of progress gives no rate"
    assert eta_s(done=1, total=1000, elapsed_s=2) == pytest.approx(1998)


def test_line_shows_done_total_share_elapsed_eta_and_note() -> None:
    p, clock, _ = progress()
    assert p.line() == "fuzz: 0/200 seeds (0%), 0:00 elapsed, ETA ?"
    clock.now += 90
    p.done = 50
    p.note = "0 failing"
    assert p.line() == "fuzz: 50/200 seeds (25%), 1:30 elapsed, ETA 4:30 - 0 failing"


def test_fractional_totals_read_naturally() -> None:
    p, clock, _ = progress(total=12.5, unit="s")
    clock.now += 5
    p.done = 2.5
    assert p.line() == "fuzz: 2.5/12.5 s (20%), 0:05 elapsed, ETA 0:20"


def test_updates_print_at_most_once_per_interval() -> None:
    p, clock, out = progress(every_s=5)
    p.advance()  # the first update always prints
    for _ in range(40):  # 40 seeds in 4 s: nothing more
        clock.now += 0.1
        p.advance()
    assert len(lines(out)) == 1
    clock.now += 1.0  # 5 s after the first line
    p.advance()
    assert len(lines(out)) == 2
    assert lines(out)[-1].startswith("fuzz: 42/200 seeds (21%), 0:05 elapsed, ETA ")
    p.set(43, note="0 failing")
    assert len(lines(out)) == 2, "a note alone does not beat the rate limit"


def test_done_never_passes_the_total() -> None:
    p, _, _ = progress(total=3)
    for _ in range(5):
        p.advance()
    assert p.done == 3
    p.set(10)
    assert p.done == 3


def test_finish_always_prints_the_total_time() -> None:
    p, clock, out = progress(total=4)
    p.advance()
    clock.now += 1
    p.advance(3)
    assert len(lines(out)) == 1, "rate limited"
    clock.now += 125
    p.finish(note="0 failing")
    assert lines(out)[-1] == "fuzz: 4/4 seeds in 2:06 - 0 failing"


def test_ticker_samples_then_prints_on_its_interval() -> None:
    p, clock, out = progress(total=300, unit="s", every_s=10)
    samples: list[float] = []

    def sample() -> tuple[float, str]:
        samples.append(clock.now)
        return clock.now - 1000, f"{len(samples)} samples"

    ticker = Ticker(p, sample=sample)
    assert ticker.every_s == 10
    clock.now += 10
    assert ticker.tick() is True, "the first tick prints"
    clock.now += 4
    assert ticker.tick() is False, "sampled, but within the interval"
    clock.now += 6
    assert ticker.tick() is True
    assert lines(out) == [
        "fuzz: 10/300 s (3%), 0:10 elapsed, ETA 4:50 - 1 samples",
        "fuzz: 20/300 s (7%), 0:20 elapsed, ETA 4:40 - 3 samples",
    ]
    assert samples == [1010.0, 1014.0, 1020.0]


def test_ticker_thread_stops_when_the_block_ends() -> None:
    p, _, _ = progress()
    with Ticker(p, every_s=3600) as ticker:
        assert ticker._thread is not None and ticker._thread.is_alive()
    assert not ticker._thread.is_alive()
