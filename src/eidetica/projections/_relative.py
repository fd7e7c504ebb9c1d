"""The question's own time: ``now`` checked, and the dates a query names resolved against it.

``check_now`` takes what the API accepts for ``now`` (an aware datetime, a naive one read as
UTC, an ISO 8601 string on the wire) and returns an aware UTC datetime. ``query_windows``
finds the periods a query names, absolute ("in July 2023", ``_ranking.time_windows``) and
relative to ``now`` ("yesterday", "last week", "3 days ago", "last Saturday", "in March": the
most recent March not after ``now``), and returns them as ``_ranking`` windows with the query
stripped of them: they are matched against message times, not as words.

A relative window is a day range ``(year, month, day, span, 0)``: ``span`` days from that date.
It reaches up to ``now``'s day, since what happened "last week" is told in a message written
then or since; a day "N days ago" also counts a day either side (people round).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from ..errors import InvalidInput
from ._ranking import time_windows

__all__ = ["check_now", "query_windows", "relative_windows"]

Window = tuple[int, int, int, int, int]

_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
        "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3, "couple of": 2, "few": 3}
_N = r"(?P<n>\d{1,3}|a couple of|couple of|a few|few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WD = r"(?P<wd>" + "|".join(_WEEKDAYS) + r")"
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
# slack either side of "N <unit>s ago", in days: people round ("two months ago" is seldom 60 days)
_SLACK = {"day": 1, "week": 3, "month": 10, "year": 45}
_REL = [re.compile(p, re.IGNORECASE) for p in (
    rf"\b{_N} (?P<unit>day|week|month|year)s? ago\b",
    rf"\b(?:in |during |over |within )?the (?:past|last) {_N} (?P<unit2>day|week|month|year)s?\b",
    r"\b(?:in |during |over )?(?:the )?(?P<which>last|past|previous) (?P<per>weekend|week|month|year)\b",
    rf"\b(?:on )?last {_WD}\b",
    r"\bthe day before yesterday\b",
    r"\b(?P<day>yesterday)\b",
)]
# Only phrases about the past: "this weekend", "tonight", "on Monday" in a question to a memory
# are mostly plans (LongMemEval's preference questions: "my visit to the music store this
# weekend"), and a window there would put that day's chatter above the evidence.


def check_now(value: Any, field: str = "now") -> dt.datetime | None:
    """``now`` as an aware UTC datetime (None stays None): a datetime (naive = UTC) or an ISO 8601 string."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidInput(field, "must be a datetime or an ISO 8601 date-time string", value) from None
    if not isinstance(value, dt.datetime):  # a date alone is not a moment: refused rather than guessed
        raise InvalidInput(field, "must be a datetime or an ISO 8601 date-time string", value)
    moment: dt.datetime = value
    if moment.utcoffset() is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    try:
        return moment.astimezone(dt.timezone.utc)
    except (OverflowError, ValueError):
        raise InvalidInput(field, "is out of range", value) from None


def _span(start: dt.date, end: dt.date) -> Window:
    """The days from ``start`` to ``end`` (both included) as a window."""
    end = max(start, end)
    return (start.year, start.month, start.day, (end - start).days + 1, 0)


def _number(text: str) -> int:
    text = text.lower()
    return int(text) if text.isdigit() else _NUM.get(text, 1)


def _one(m: re.Match[str], today: dt.date) -> Window | None:
    """The window of one relative phrase (see the module docstring), or None for no period."""
    g = {k: v for k, v in m.groupdict().items() if v is not None}
    text = m.group(0).lower()
    if "unit" in g:  # "3 days ago": that day, give or take
        unit = g["unit"].lower()
        back = _number(g["n"]) * _UNIT_DAYS[unit]
        slack = _SLACK[unit]
        return _span(today - dt.timedelta(days=back + slack), min(today, today - dt.timedelta(days=back - slack - 1)))
    if "unit2" in g:  # "the past 3 weeks": up to today
        return _span(today - dt.timedelta(days=_number(g["n"]) * _UNIT_DAYS[g["unit2"].lower()]), today)
    if "per" in g:
        per = g["per"].lower()
        if g["which"].lower() == "past" and per != "weekend":  # "the past month": the last 30 days, not a calendar month
            return _span(today - dt.timedelta(days=_UNIT_DAYS[per]), today)
        if per == "weekend":  # the last Saturday and Sunday before today (this one, on a Sunday)
            return _span(today - dt.timedelta(days=(today.weekday() - 5) % 7 or 7), today)
        if per == "week":  # from last week's Monday
            return _span(today - dt.timedelta(days=today.weekday() + 7), today)
        if per == "month":  # from last month's first day
            return _span((today.replace(day=1) - dt.timedelta(days=1)).replace(day=1), today)
        return _span(dt.date(today.year - 1, 1, 1), today)
    if "wd" in g:  # the most recent such weekday before today, told of then or since
        back = (today.weekday() - _WEEKDAYS.index(g["wd"].lower())) % 7 or 7
        return _span(today - dt.timedelta(days=back), today)
    if text.endswith("before yesterday"):
        return _span(today - dt.timedelta(days=2), today)
    if "day" in g:  # yesterday
        return _span(today - dt.timedelta(days=1), today)
    return None


def relative_windows(query: str, now: dt.datetime) -> tuple[tuple[Window, ...], str]:
    """Periods relative to ``now`` a query names ("last week", "3 days ago", ...), and the query without them."""
    today = now.date()
    out: list[Window] = []
    rest = query
    for pat in _REL:
        cut: list[tuple[int, int]] = []
        for m in pat.finditer(rest):
            w = _one(m, today)
            if w is not None:
                out.append(w)
                cut.append(m.span())
        for a, b in reversed(cut):
            rest = rest[:a] + " " + rest[b:]
    return tuple(out), " ".join(rest.split())


def query_windows(query: str, now: dt.datetime | None) -> tuple[tuple[Window, ...], str]:
    """Every period a query names, relative ones resolved against ``now`` (default: the wall clock).

    A month named without a year ("in March") is the most recent such month not after an
    explicit ``now``; without one, that month of any year (the store may hold any years).
    """
    explicit = now is not None
    now = now or dt.datetime.now(dt.timezone.utc)
    rel, rest = relative_windows(query, now)
    absolute, rest2 = time_windows(rest) if re.search(r"\w", rest) else ((), rest)
    if explicit:
        absolute = tuple((now.year - (mon > now.month), mon, day, span, late) if year == 0 and mon else
                         (year, mon, day, span, late) for year, mon, day, span, late in absolute)
    stripped = rest2 if re.search(r"\w", rest2) else query
    return rel + absolute, stripped
