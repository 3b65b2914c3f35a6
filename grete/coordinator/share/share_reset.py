"""``share.auto.offset.reset`` (KIP-932, KIP-1106): where a share partition starts the first time a
group fetches it: ``earliest``, ``latest`` or ``by_duration:<ISO-8601 duration>`` (the first record no
older than that). Durations are read as Java's ``Duration.parse`` reads them (PnDTnHnMn.nS, letters
in either case, signed parts); a negative one is refused, as Kafka 4.3.1 refuses it."""

from __future__ import annotations

import re

EARLIEST, LATEST, BY_DURATION = "earliest", "latest", "by_duration"
INVALID_MESSAGE = ("Invalid value `{value}` for configuration share.auto.offset.reset. The value must be either "
                   "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")

_DURATION = re.compile(r"([-+]?)P(?:([-+]?[0-9]+)D)?"
                       r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
                       re.IGNORECASE)


def parse_reset(value: str) -> tuple[str, int] | None:
    """(strategy, duration in ms: 0 unless by_duration), or None when Kafka refuses the value."""
    if value in (EARLIEST, LATEST):
        return value, 0
    prefix = BY_DURATION + ":"
    if not value.startswith(prefix):
        return None
    ms = duration_ms(value[len(prefix):])
    return (BY_DURATION, ms) if ms is not None and ms >= 0 else None


def duration_ms(text: str) -> int | None:
    match = _DURATION.fullmatch(text)
    if match is None:
        return None
    sign, days, t_part, hours, minutes, seconds, fraction = match.groups()
    if (t_part is not None and t_part.upper() == "T") or all(x is None for x in (days, hours, minutes, seconds)):
        return None  # "P", "PT" and "P1DT" are not durations
    total_ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
    sec_ms = int(seconds or 0) * 1000
    frac_ms = int((fraction or "").ljust(3, "0")[:3]) if fraction else 0
    sec_ms += -frac_ms if (seconds or "").startswith("-") else frac_ms
    total_ms += sec_ms
    return -total_ms if sign == "-" else total_ms
