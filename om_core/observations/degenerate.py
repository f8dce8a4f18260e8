"""Detecting model output that loops (§5.8) and capping absurdly long lines.

Cheap models sometimes fall into a repetition loop and emit the same content until they hit the output
limit. Such output must never be appended to memory: the Observer retries once and then fails the cycle,
and the Reflector counts the attempt as a failed compression. A legitimate but repetitive summary (say, 30
identical "build → ok" lines from one tool loop) must still pass, which is why the checks look at how much
text the repetition costs, not merely whether something repeats.

Three independent strategies, any of which marks the text degenerate:

- A (sampled windows): many 200-character samples of the substantive text are exact repeats;
- B (duplicate long lines): most substantive lines repeat an earlier one;
- C (short-line loops): short lines repeating inside one run add up to more than 10 000 characters.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass

#: Texts shorter than this are never degenerate: a loop needs room to show itself.
MIN_DEGENERATE_CHARS = 2_000
#: A repeated run costing at most this many characters is treated as a faithful summary, not a loop.
COLLAPSE_BUDGET_CHARS = 10_000
#: Lines at least this long (stripped) are "substantive"; shorter ones are looked at by strategy C.
SUBSTANTIVE_LINE_CHARS = 24
#: Lines longer than this are cut by `sanitize_lines` and ignored by strategy A.
MAX_LINE_CHARS = 10_000
TRUNCATION_SUFFIX = " … [truncated]"

WINDOW_CHARS = 200
WINDOW_SAMPLES = 50
MIN_WINDOWS = 5
WINDOW_DUPLICATE_SHARE = 0.4
MIN_LONG_LINES = 20
LONG_LINE_DUPLICATE_SHARE = 0.5
SHORT_LOOP_CHARS = 10_000

_SNIPPET_CHARS = 160


@dataclass(frozen=True)
class _Finding:
    strategy: str
    detail: str


def is_degenerate(text: str) -> bool:
    """True when `text` looks like a repetition loop rather than real output (§5.8)."""
    return bool(_findings(text, stop_at_first=True))


def degenerate_diagnosis(text: str) -> str | None:
    """A one-line description of why `text` is degenerate, for logs; None when it is not.

    Names every strategy that fired with its measurements and shows the head and tail of the output, so an
    `OBSERVER_DEGENERATE` failure can be understood without storing the whole (huge) output.
    """
    findings = _findings(text, stop_at_first=False)
    if not findings:
        return None
    fired = "; ".join(f"strategy {finding.strategy}: {finding.detail}" for finding in findings)
    head = _snippet(text[:_SNIPPET_CHARS])
    tail = _snippet(text[-_SNIPPET_CHARS:])
    return f"{fired}; total {len(text)} chars, {text.count(chr(10)) + 1} lines; head={head!r}; tail={tail!r}"


def sanitize_lines(text: str) -> str:
    """Cut every line longer than 10 000 characters and mark the cut.

    One runaway line (a base64 blob, a looping sentence without newlines) would otherwise dominate the
    token count of the whole log. The cut never lands inside a grapheme cluster.
    """
    lines = text.split("\n")
    if all(len(line) <= MAX_LINE_CHARS for line in lines):
        return text
    return "\n".join(_cap_line(line) for line in lines)


def _cap_line(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return line[: safe_cut_index(line, MAX_LINE_CHARS)] + TRUNCATION_SUFFIX


def safe_cut_index(text: str, limit: int) -> int:
    """The largest index ≤ `limit` at which `text` can be cut without splitting a character cluster.

    Python strings hold code points, so a proper surrogate pair is already one character; what can still be
    split are lone surrogates (from badly decoded input) and clusters built from several code points:
    combining marks, variation selectors, emoji modifiers and tags, zero-width joiner sequences and
    regional-indicator flag pairs.
    """
    if limit >= len(text):
        return len(text)
    cut = max(limit, 0)
    while cut > 0 and _joins_previous(text, cut):
        cut -= 1
    return cut


def _joins_previous(text: str, index: int) -> bool:
    """True when the character at `index` belongs to the same cluster as the one before it."""
    before, here = text[index - 1], text[index]
    if 0xD800 <= ord(before) <= 0xDBFF and 0xDC00 <= ord(here) <= 0xDFFF:
        return True
    if before == "\u200d" or _is_extender(here):
        return True
    if _is_regional_indicator(here) and _is_regional_indicator(before):
        # Flags are pairs: cutting is safe only after an even number of indicators.
        run = 0
        i = index - 1
        while i >= 0 and _is_regional_indicator(text[i]):
            run += 1
            i -= 1
        return run % 2 == 1
    return False


def _is_extender(char: str) -> bool:
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Me", "Mc")
        or code == 0x200D
        or 0xFE00 <= code <= 0xFE0F
        or 0xE0100 <= code <= 0xE01EF
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
    )


def _is_regional_indicator(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF


def _findings(text: str, *, stop_at_first: bool) -> list[_Finding]:
    if len(text) < MIN_DEGENERATE_CHARS:
        return []
    lines = _collapse_summarised_runs(text.split("\n"))
    findings: list[_Finding] = []
    for strategy in (_sampled_windows, _duplicate_long_lines, _short_line_loops):
        finding = strategy(lines)
        if finding is not None:
            findings.append(finding)
            if stop_at_first:
                break
    return findings


def _collapse_summarised_runs(lines: list[str]) -> list[str]:
    """Replace a run of identical lines by one line when that run is an affordable one-off.

    A run is collapsed only if it is the only run of that line in the text and costs at most 10 000
    characters; a real loop either is longer or comes back later.
    """
    runs: list[tuple[str, int]] = []
    for line in lines:
        if runs and runs[-1][0] == line:
            runs[-1] = (line, runs[-1][1] + 1)
        else:
            runs.append((line, 1))
    runs_per_line = Counter(line for line, _ in runs)
    collapsed: list[str] = []
    for line, count in runs:
        if runs_per_line[line] == 1 and count * (len(line) + 1) <= COLLAPSE_BUDGET_CHARS:
            collapsed.append(line)
        else:
            collapsed.extend([line] * count)
    return collapsed


def _sampled_windows(lines: list[str]) -> _Finding | None:
    text = "\n".join(
        line for line in lines if len(line.strip()) >= SUBSTANTIVE_LINE_CHARS and len(line) <= MAX_LINE_CHARS
    )
    if len(text) < MIN_DEGENERATE_CHARS:
        return None
    step = max(1, len(text) // WINDOW_SAMPLES)
    seen: set[str] = set()
    windows = duplicates = 0
    for start in range(0, len(text) - WINDOW_CHARS + 1, step):
        window = text[start : start + WINDOW_CHARS]
        windows += 1
        if window in seen:
            duplicates += 1
        else:
            seen.add(window)
    if windows <= MIN_WINDOWS:
        return None
    share = duplicates / windows
    if share <= WINDOW_DUPLICATE_SHARE:
        return None
    return _Finding(
        "A (sampled windows)",
        f"{duplicates}/{windows} windows of {WINDOW_CHARS} chars repeat (share {share:.2f} > "
        f"{WINDOW_DUPLICATE_SHARE}); substantive text {len(text)} chars, step {step}",
    )


def _duplicate_long_lines(lines: list[str]) -> _Finding | None:
    long_lines = [line for line in lines if len(line.strip()) >= SUBSTANTIVE_LINE_CHARS]
    if len(long_lines) < MIN_LONG_LINES:
        return None
    repeats = len(long_lines) - len(set(long_lines))
    share = repeats / len(long_lines)
    if share <= LONG_LINE_DUPLICATE_SHARE:
        return None
    return _Finding(
        "B (duplicate long lines)",
        f"{repeats}/{len(long_lines)} lines of ≥ {SUBSTANTIVE_LINE_CHARS} chars repeat an earlier line "
        f"(share {share:.2f} > {LONG_LINE_DUPLICATE_SHARE}); most repeated: {_most_repeated(long_lines)!r}",
    )


def _short_line_loops(lines: list[str]) -> _Finding | None:
    worst_chars = 0
    worst_line = ""
    for run in _short_line_runs(lines):
        counts = Counter(run)
        chars = sum(len(line) + 1 for line in run if counts[line] > 1) - 1
        if chars > worst_chars:
            worst_chars, worst_line = chars, _most_repeated(run)
        if chars > SHORT_LOOP_CHARS:
            return _Finding(
                "C (short-line loop)",
                f"{chars} chars of repeated short lines in one run of {len(run)} short lines "
                f"(> {SHORT_LOOP_CHARS}); most repeated: {worst_line!r}",
            )
    return None


def _short_line_runs(lines: list[str]) -> list[list[str]]:
    """Short lines grouped by contiguous run; only a substantive line ends a run.

    Blank lines, lone XML tags and `Date:` headers are neither counted nor run breakers: a loop interleaved
    with them is still one loop.
    """
    runs: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        stripped = line.strip()
        if len(stripped) >= SUBSTANTIVE_LINE_CHARS:
            if current:
                runs.append(current)
            current = []
        elif stripped and not _is_lone_tag(stripped) and not stripped.startswith("Date:"):
            current.append(line)
    if current:
        runs.append(current)
    return runs


def _is_lone_tag(stripped: str) -> bool:
    if not (stripped.startswith("<") and stripped.endswith(">")):
        return False
    inner = stripped[1:-1].removeprefix("/")
    return bool(inner) and all(ch.isalnum() or ch in "-_:" for ch in inner)


def _most_repeated(lines: list[str]) -> str:
    line, _ = Counter(lines).most_common(1)[0]
    return line[:80]


def _snippet(text: str) -> str:
    return " ".join(text.split())
