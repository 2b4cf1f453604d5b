"""Find the first timestamp on each log line, vectorized, in the formats that occur.

Formats (reference/formats.md): ISO 8601 and Python asctime (`2024-05-08 08:47:31,877`,
`[2026-03-03 12:11:38]` NCCL WARN, `2024-04-29T14:55:41,679700+02:00`), nvidia-smi
(`2024/01/05 10:11:12.345`), glog from c10 and torchrun (`E1206 18:44:12.715298746`,
`E0709 17:05:39.816000`, month*100+day, no year), ctime (`Fri Aug 30 11:43:09 2024`) and
syslog (`May 18 19:02:39`, no year). Lines with none keep a null time; nothing is
invented. Times without a zone are taken as UTC (logs rarely state their zone); an
explicit offset is applied. c10's 9-digit fraction is a monotonic clock, not wall time
(formats.md 2.1), so it is dropped: those lines are exact to the second only.
A year outside [MIN_YEAR, MAX_YEAR] is no timestamp a job wrote (year 0, 9999): null.
"""

from __future__ import annotations

import polars as pl

from forensics.schema import TIME

MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), start=1)}
DAYS_IN_MONTH = {1: 31, 2: 28, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}

ISO = (
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[ T_](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<f>\d{1,9}))?(?P<tz>Z|[+-]\d{2}:?\d{2})?"
)
SLASH = r"(?P<y>\d{4})/(?P<mo>\d{2})/(?P<d>\d{2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?:\.(?P<f>\d{1,9}))?"
GLOG = r"(?:^|[\[\s:])[IWEF](?P<md>\d{3,4}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\.(?P<f>\d{6,9})\b"
CTIME = r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>[A-Z][a-z]{2}) +(?P<d>\d{1,2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2}) (?P<y>\d{4})\b"
SYSLOG = r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<d>\d{1,2}) (?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})\b"
TIMESTAMP_WINDOW = 120
CLOCK = r"\d:\d\d:\d\d"  # every supported format carries a time of day
MIN_YEAR, MAX_YEAR = 1970, 2200
FORMATS = {"iso": ISO, "slash": SLASH, "glog": GLOG, "ctime": CTIME, "syslog": SYSLOG}


def _int(groups: pl.Expr, name: str) -> pl.Expr:
    return groups.struct.field(name).cast(pl.Int32, strict=False)


def _micros(fraction: pl.Expr) -> pl.Expr:
    """'877' -> 877000, '715298746' -> 715298 (first six digits, right-padded)."""
    return fraction.str.slice(0, 6).str.pad_end(6, "0").cast(pl.Int32, strict=False).fill_null(0)


def _month(name: pl.Expr) -> pl.Expr:
    return name.replace_strict(MONTHS, default=None, return_dtype=pl.Int32)


def _days_in_month(y: pl.Expr, mo: pl.Expr) -> pl.Expr:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    days = mo.replace_strict(DAYS_IN_MONTH, default=0, return_dtype=pl.Int32)
    return days + ((mo == 2) & leap).cast(pl.Int32)


def _full_date(groups: pl.Expr) -> pl.Expr:
    """A timestamp from named groups y, mo, d, h, mi, s and the fraction f."""
    parts = [_int(groups, name) for name in ("y", "mo", "d", "h", "mi", "s")]
    return _build(*parts, _micros(groups.struct.field("f")))


def _month_named(groups: pl.Expr, year: pl.Expr) -> pl.Expr:
    """A whole-second timestamp from a month name (group mon) and groups d, h, mi, s."""
    return _build(year, _month(groups.struct.field("mon")), *[_int(groups, n) for n in ("d", "h", "mi", "s")], pl.lit(0, pl.Int32))


def _build(y: pl.Expr, mo: pl.Expr, d: pl.Expr, h: pl.Expr, mi: pl.Expr, s: pl.Expr, us: pl.Expr) -> pl.Expr:
    """Datetime from components; null (never an error) for impossible dates like Feb 30."""
    valid = (
        y.is_between(MIN_YEAR, MAX_YEAR)
        & mo.is_between(1, 12)
        & d.is_between(1, _days_in_month(y, mo))
        & h.is_between(0, 23)
        & mi.is_between(0, 59)
        & s.is_between(0, 60)
    )

    def safe(part: pl.Expr, default: int) -> pl.Expr:
        # pl.datetime raises on invalid components even in rows a `when` discards.
        return pl.when(valid).then(part).otherwise(default)

    stamp = pl.datetime(
        safe(y, 1970),
        safe(mo, 1),
        safe(d, 1),
        safe(h, 0),
        safe(mi, 0),
        safe(s.clip(0, 59), 0),
        us,
        time_unit="us",
        time_zone="UTC",
    )
    return pl.when(valid).then(stamp)


def _offset_minutes(tz: pl.Expr) -> pl.Expr:
    digits = tz.str.replace(":", "", literal=True)
    sign = pl.when(digits.str.starts_with("-")).then(-1).otherwise(1)
    hours = digits.str.slice(1, 2).cast(pl.Int32, strict=False)
    minutes = digits.str.slice(3, 2).cast(pl.Int32, strict=False)
    return (sign * (hours * 60 + minutes)).fill_null(0)


def _format_time(name: str, groups: pl.Expr, year: int) -> pl.Expr:
    """The datetime one format's extracted groups spell, or null."""
    if name == "iso":
        return _full_date(groups) - pl.duration(minutes=_offset_minutes(groups.struct.field("tz").fill_null("")))
    if name == "slash":
        return _full_date(groups)
    if name == "glog":
        month_day = _int(groups, "md")
        fraction = groups.struct.field("f")
        # 9 digits: c10's monotonic nanoseconds, not wall time -> second precision only.
        micros = pl.when(fraction.str.len_chars() == 9).then(pl.lit(0, pl.Int32)).otherwise(_micros(fraction))
        return _build(
            pl.lit(year, pl.Int32),
            month_day // 100,
            month_day % 100,
            _int(groups, "h"),
            _int(groups, "mi"),
            _int(groups, "s"),
            micros,
        )
    if name == "ctime":
        return _month_named(groups, _int(groups, "y"))
    return _month_named(groups, pl.lit(year, pl.Int32))  # syslog: the year is not in the line


def times_of(texts: pl.Series, default_year: int) -> pl.Series:
    """First recognizable timestamp of each text, as UTC Datetime(us), or null.

    Formats are tried in FORMATS order, each only on the lines no earlier format dated:
    a log mostly in one format pays for one regex, not five. Only the first
    TIMESTAMP_WINDOW characters are searched (stamps sit at the front, behind launcher
    prefixes), and only lines holding a clock time (`hh:mm:ss`) are searched at all.
    """
    head = pl.col("text").str.slice(0, TIMESTAMP_WINDOW)
    remaining = pl.DataFrame({"text": texts}).with_row_index("_row").filter(head.str.contains(CLOCK))
    dated = []
    for name, regex in FORMATS.items():
        if remaining.is_empty():
            break
        timed = remaining.with_columns(_groups=head.str.extract_groups(regex)).with_columns(
            _time=_format_time(name, pl.col("_groups"), default_year).cast(TIME)
        )
        dated.append(timed.filter(pl.col("_time").is_not_null()).select("_row", "_time"))
        remaining = timed.filter(pl.col("_time").is_null()).select("_row", "text")
    found = pl.concat(dated) if dated else pl.DataFrame(schema={"_row": pl.UInt32, "_time": TIME})
    rows = pl.DataFrame({"_row": pl.arange(0, texts.len(), eager=True).cast(pl.UInt32)})
    return rows.join(found, on="_row", how="left").sort("_row")["_time"].alias(texts.name)


def plausible(time: pl.Expr) -> pl.Expr:
    """`time`, or null when its year is outside [MIN_YEAR, MAX_YEAR] (no job wrote it)."""
    return pl.when(time.dt.year().is_between(MIN_YEAR, MAX_YEAR)).then(time)


def line_time(text: pl.Expr, default_year: int) -> pl.Expr:
    """Expression: the first recognizable timestamp in `text` as UTC Datetime(us), or null.

    `default_year` fills formats that carry no year (glog, syslog); pick it from the
    incident's own full timestamps (see `infer_year`).
    """
    return text.map_batches(lambda s: times_of(s, default_year), return_dtype=TIME, is_elementwise=True)


def infer_year(texts: pl.Series, fallback: int) -> int:
    """The most common 4-digit year among full timestamps, for formats that omit it."""
    years = texts.str.extract(r"\b((?:19|20)\d\d)[-/]\d{2}[-/]\d{2}[ T_]\d{2}:").drop_nulls()
    if years.is_empty():
        return fallback
    return int(years.mode().sort()[0])
