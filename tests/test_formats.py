"""String format grammars (grammars/formats.py) through llama.cpp's grammar engine: each format
against Python's own parsers where the standard library has one, reference checkers written from
the RFCs otherwise, and hand-picked valid and invalid strings."""

from __future__ import annotations

import datetime
import functools
import ipaddress
import json
import random
import re
import uuid

import pytest

from grammars.formats import FORMATS, _uri_budgets, format_grammar, format_length_range
from grammars.gbnf import GrammarBuilder, literal
from tests.grammar_support import _cache, _model, accepts


@functools.cache
def _grammar(name: str, min_length: int = 0, max_length: int | None = None) -> str:
    builder = GrammarBuilder()
    content = format_grammar(builder, name, min_length=min_length, max_length=max_length)
    return builder.render(literal('"') + " " + content + " " + literal('"'))


def _accepts(name: str, value: str, min_length: int = 0, max_length: int | None = None) -> bool:
    return accepts(_grammar(name, min_length, max_length), json.dumps(value))


def _check(name: str, valid: list[str], invalid: list[str]) -> None:
    for value in valid:
        assert _accepts(name, value), value
    for value in invalid:
        assert not _accepts(name, value), value


def test_names() -> None:
    assert FORMATS == {"date", "time", "date-time", "duration", "uuid", "email", "hostname", "ipv4", "ipv6", "uri"}
    with pytest.raises(KeyError):
        format_grammar(GrammarBuilder(), "color")
    with pytest.raises(KeyError):
        format_grammar(GrammarBuilder(), "color", max_length=10)
    with pytest.raises(KeyError):
        format_length_range("color")


def test_length_ranges() -> None:
    assert {name: format_length_range(name) for name in FORMATS} == {
        "date": (10, 10), "time": (9, 24), "date-time": (20, 35), "duration": (3, 62), "uuid": (36, 36),
        "email": (5, 304), "hostname": (1, 239), "ipv4": (7, 15), "ipv6": (2, 45), "uri": (2, None)}
    # the extremes are values
    extremes = {"time": ["00:00:00Z", "00:00:00.123456789+00:00"],
                "date-time": ["2024-01-01T00:00:00Z", "2024-01-01T00:00:00.123456789+00:00"],
                "duration": ["P1D", "P123456789Y123456789M123456789DT123456789H123456789M123456789S"],
                "ipv4": ["0.0.0.0", "255.255.255.255"], "ipv6": ["::", "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255"],
                "email": ["a@b.c", "a" * 64 + "@" + ".".join(["abcdefghijklmno"] * 15)],
                "hostname": ["a", ".".join(["abcdefghijklmno"] * 15)], "uri": ["a:"]}
    for name, values in extremes.items():
        low, high = format_length_range(name)
        assert [len(v) for v in values] == [low, high][: len(values)], name
        for value in values:
            assert _accepts(name, value), value


# --- date and time ----------------------------------------------------------------------------


def _is_date(value: str) -> bool:
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def test_date_calendar() -> None:
    for year in (1, 4, 100, 400, 1600, 1700, 1900, 1996, 2000, 2023, 2024, 2100, 2400, 9996, 9999):
        for month in range(14):
            for day in range(33):
                value = f"{year:04d}-{month:02d}-{day:02d}"
                assert _accepts("date", value) == _is_date(value), value


def test_date_leap_years() -> None:
    for year in range(10000):
        value = f"{year:04d}-02-29"
        assert _accepts("date", value) == _is_date(value), value


def test_date_shapes() -> None:
    _check("date", ["2024-01-01", "0001-01-01", "9999-12-31", "2000-02-29"], [
        "0000-01-01", "2024-1-01", "2024-01-1", "24-01-01", "12024-01-01", "2024/01/01", "2024-01-01T00:00:00Z",
        " 2024-01-01", "2024-01-01 ", "", "1900-02-29", "2023-02-29", "2024-04-31", "2024-13-01", "20240101",
    ])


# (fractional seconds: 1 to 9 digits, the documented narrowing)
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?(Z|[+-]([0-9]{2}):([0-9]{2}))")


def _is_time(value: str) -> bool:
    match = _TIME.fullmatch(value)
    if not match:
        return False
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    offset_ok = match[5] == "Z" or int(match[6]) <= 23 and int(match[7]) <= 59
    return hour <= 23 and minute <= 59 and second <= 59 and offset_ok


def test_time() -> None:
    rng = random.Random(7)
    values = {"00:00:00Z", "23:59:59Z", "12:30:00+05:30", "12:30:00.5-08:00", "01:02:03.123456789Z", "23:59:60Z",
              "24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00z", "12:00:00+24:00", "12:00:00+05:60",
              "12:00:00.Z", "12:00Z", "1:00:00Z", "12:00:00+0530", "12:00:00 Z", "T12:00:00Z", "12:00:00-00:00"}
    for _ in range(400):
        hour, minute, second = rng.randint(0, 25), rng.randint(0, 61), rng.randint(0, 61)
        fraction = rng.choice(["", ".0", ".25", "." + "9" * rng.randint(1, 12)])
        offset = rng.choice([
            "Z", f"+{rng.randint(0, 25):02d}:{rng.randint(0, 61):02d}", f"-{rng.randint(0, 25):02d}:30"
        ])
        values.add(f"{hour:02d}:{minute:02d}:{second:02d}{fraction}{offset}")
    for value in sorted(values):
        assert _accepts("time", value) == _is_time(value), value


def test_fraction_digits() -> None:
    for digits in range(1, 13):
        for name, prefix in (("time", ""), ("date-time", "2024-02-29T")):
            value = f"{prefix}12:00:00.{'0' * digits}Z"
            assert _accepts(name, value) == (digits <= 9), value
            assert _accepts(name, f"{prefix}23:59:59.{'9' * digits}+01:00") == (digits <= 9), value


def test_date_time() -> None:
    valid = ["2024-02-29T23:59:59Z", "1985-04-12T23:20:50.52Z", "1996-12-19T16:39:57-08:00",
             "0001-01-01T00:00:00+00:00"]
    invalid = ["2023-02-29T00:00:00Z", "2024-01-01 00:00:00Z", "2024-01-01t00:00:00Z", "2024-01-01T00:00:00",
               "2024-01-01T24:00:00Z", "2024-01-01", "00:00:00Z", "2024-01-01TZ"]
    _check("date-time", valid, invalid)
    for value in valid:
        date, _, time = value.partition("T")
        assert _is_date(date) and _is_time(time)
        datetime.datetime.fromisoformat(value)


# --- duration ---------------------------------------------------------------------------------

# (numbers of 1 to 9 digits, the documented narrowing)
_DURATION = re.compile(
    r"P(?!$)([0-9]{1,9}Y)?([0-9]{1,9}M)?([0-9]{1,9}D)?(T(?=[0-9])([0-9]{1,9}H)?([0-9]{1,9}M)?([0-9]{1,9}S)?)?"
    r"|P[0-9]{1,9}W")


def _random_duration(rng: random.Random) -> str:
    """Mostly well-formed durations, some with a component out of place."""
    def components(units: str) -> str:
        numbers = ["1", "23", "007", "", "123456789", "1234567890", "0" * rng.randint(1, 11)]
        return "".join(rng.choice(numbers) + unit for unit in units if rng.random() < 0.4)

    value = "P" + components("YMD")
    if rng.random() < 0.5:
        value += "T" + components("HMS")
    if rng.random() < 0.1:
        value = "P" + rng.choice(["", "2", "1Y"]) + "W"
    if rng.random() < 0.3:
        at = rng.randint(0, len(value))
        value = value[:at] + rng.choice("PTYMDWHS1") + value[at:]
    return value


def test_duration() -> None:
    valid = ["P1Y", "P1M", "P1D", "P1W", "PT1H", "PT1M", "PT1S", "P1Y2M3DT4H5M6S", "P1Y1D", "PT1H1S", "P0D",
             "PT36H", "P10Y10M", "P2MT30M", "P007D", "P1DT0S"]
    invalid = ["P", "PT", "P1YT", "1Y", "P1", "PT1D", "P1H", "P1S", "P1Y2W", "P1WT1H", "P1M1Y", "PT1S1M", "P1.5Y",
               "PT0.5S", "P-1D", "p1D", "P1d", "P1Y1Y", "PT1H1H", "P1DT", "P1D2H", "PW", "P1Y 2M", ""]
    _check("duration", valid, invalid)
    rng = random.Random(3)
    for _ in range(800):
        value = _random_duration(rng)
        assert _accepts("duration", value) == bool(_DURATION.fullmatch(value)), value


def test_duration_digits() -> None:
    for before, unit in (("", "Y"), ("", "M"), ("", "W"), ("", "D"), ("T", "H"), ("T", "M"), ("T", "S")):
        for digits in range(1, 12):
            value = f"P{before}{'1' * digits}{unit}"
            assert _accepts("duration", value) == (digits <= 9), value
    assert _accepts("duration", "P999999999Y999999999M999999999DT999999999H999999999M999999999S")
    assert not _accepts("duration", "P999999999Y999999999M999999999DT999999999H999999999M0999999999S")


# --- uuid -------------------------------------------------------------------------------------


def _is_uuid(value: str) -> bool:
    if not re.fullmatch(r"[0-9a-fA-F-]{36}", value) or [len(p) for p in value.split("-")] != [8, 4, 4, 4, 12]:
        return False
    uuid.UUID(value)
    return True


def test_uuid() -> None:
    rng = random.Random(5)
    values = ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000",
              "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "{123e4567-e89b-12d3-a456-426614174000}",
              "123e4567e89b12d3a456426614174000", "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
              "123e4567-e89b-12d3-a456-42661417400", "123e4567-e89b-12d3-a456-4266141740000",
              "123e4567-e89b-12d3-a456_426614174000", "g23e4567-e89b-12d3-a456-426614174000",
              "123e4567-e89b12d3-a456-426614174000"]
    for _ in range(100):
        text = str(uuid.UUID(int=rng.getrandbits(128)))
        values += [text, text.upper(), "".join(c.upper() if rng.random() < 0.5 else c for c in text)]
    for value in values:
        assert _accepts("uuid", value) == _is_uuid(value), value


# --- IP addresses -----------------------------------------------------------------------------


def _is_ip(kind: type, value: str) -> bool:
    if "%" in value:  # scoped addresses are not in RFC 4291's text forms
        return False
    try:
        kind(value)
    except ValueError:
        return False
    return True


def test_ipv4() -> None:
    octets = ["0", "1", "9", "10", "99", "100", "199", "200", "249", "250", "255", "256", "300", "01", "001", "00",
              "1000", ""]
    rng = random.Random(4)
    values = {".".join(rng.choice(octets) for _ in range(4)) for _ in range(1500)}
    values |= {f"{a}.{b}.{c}.{d}" for a in octets[:4] for b in octets[8:12] for c in octets[10:] for d in octets[:3]}
    values |= {"1.2.3", "1.2.3.4.5", "1.2.3.4.", ".1.2.3.4", "1..2.3", "a.b.c.d", "1.2.3.4 ", "0x1.2.3.4"}
    for value in sorted(values):
        assert _accepts("ipv4", value) == _is_ip(ipaddress.IPv4Address, value), value


def _random_ipv6(rng: random.Random) -> str:
    groups = [format(rng.getrandbits(16), "x")[: rng.choice([1, 2, 3, 4, 4])] for _ in range(rng.randint(0, 9))]
    if rng.random() < 0.05:
        groups.append("12345")
    if rng.random() < 0.2:
        groups = [g.upper() for g in groups]
    tail = ""
    if rng.random() < 0.25:
        tail = ".".join(str(rng.choice([0, 1, 9, 10, 99, 192, 255, 256, rng.randint(0, 255)])) for _ in range(4))
        if rng.random() < 0.1:
            tail = "01." + tail.partition(".")[2]
    parts = groups + ([tail] if tail else [])
    if rng.random() < 0.7:
        at = rng.randint(0, len(parts))
        text = ":".join(parts[:at]) + "::" + ":".join(parts[at:])
        if rng.random() < 0.05:
            text += "::1"
    else:
        text = ":".join(parts)
    return text


def test_ipv6() -> None:
    rng = random.Random(6)
    values = {_random_ipv6(rng) for _ in range(3000)}
    values |= {"::", "::1", "1::", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1::8", "1:2:3:4:5:6:7::8",
               "1:2:3:4:5:6:7:8::", "::ffff:192.168.1.1", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4",
               "::1.2.3.4", "1::1.2.3.4", "1:2:3:4:5::1.2.3.4", "1:2:3:4:5:6::1.2.3.4", ":::", "1:::2", ":1::",
               "1::2::3", "fe80::1%eth0", "FE80::ABCD", "fe80::AbCd", "12345::", "1:2:3:4:5:6:7", ":", "",
               "::ffff:1.2.3", "::1.2.3.4:5", "0000:0000:0000:0000:0000:0000:0000:0000", "1.2.3.4"}
    for value in sorted(values):
        assert _accepts("ipv6", value) == _is_ip(ipaddress.IPv6Address, value), value


# --- hostname and email -----------------------------------------------------------------------

_LABEL = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


def _is_hostname(value: str) -> bool:
    """RFC 1123 hostnames."""
    return 0 < len(value) <= 253 and all(_LABEL.fullmatch(label) for label in value.split("."))


def _within_units(value: str) -> bool:
    """The documented narrowing: each label costs ceil((len + 1) / 16) of 15 units."""
    return sum(-(-(len(label) + 1) // 16) for label in value.split(".")) <= 15


def _random_label(rng: random.Random) -> str:
    length = rng.choice([1, 2, 3, 5, 15, 16, 17, 31, 32, 47, 48, 62, 63, 64, 70])
    label = "".join(rng.choice("abcXYZ019-") for _ in range(length))
    if rng.random() < 0.6:
        label = "a" + label[1:-1] + "Z" if length > 1 else "a"
    return label


def test_hostname() -> None:
    valid = ["localhost", "example.com", "www.example.co.uk", "a", "a-b.c", "xn--bcher-kva.example", "1.2.3.4",
             "a" * 63, "a" * 63 + "." + "b" * 63 + "." + "c" * 63, ".".join(["abcdefghijklmno"] * 15), "A0-9z.COM"]
    invalid = ["", "-a.com", "a-.com", "a..com", ".a.com", "a.com.", "a_b.com", "a" * 64, "ex ample.com", "é.com",
               "a.-b", "a@b", "a/b"]
    _check("hostname", valid, invalid)
    rng = random.Random(8)
    for _ in range(600):
        value = ".".join(_random_label(rng) for _ in range(rng.randint(1, 8)))
        accepted = _accepts("hostname", value)
        assert not accepted or _is_hostname(value), value
        assert accepted == (_is_hostname(value) and _within_units(value)), value


def test_email() -> None:
    valid = ["a@b.co", "john.doe@example.com", "x+tag@mail.example.org", "!#$%&'*+/=?^_`{|}~-@example.com",
             "a.b.c@d-e.f", "a" * 64 + "@example.com", "user@" + ".".join(["abcdefghijklmno"] * 15), "A@B.C"]
    invalid = ["", "a", "a@", "@b.co", "a@b", "a@localhost", ".a@b.co", "a.@b.co", "a..b@c.co", "a b@c.co",
               'a"b@c.co', "a\\b@c.co", "a@b..co", "a@-b.co", "a@b.co.", "a@@b.co", "a" * 65 + "@example.com",
               "a@[1.2.3.4]", '"quoted"@example.com', "a@b_c.com", "é@b.co", "a\n@b.co", "a@b.co "]
    _check("email", valid, invalid)


# --- uri --------------------------------------------------------------------------------------

_PCT = r"%[0-9a-fA-F]{2}"
_UNRESERVED_SUB = r"[a-zA-Z0-9\-._~!$&'()*+,;=]"
_PCHAR = rf"(?:{_UNRESERVED_SUB}|[:@]|{_PCT})"
_URI = re.compile(
    rf"[a-zA-Z][a-zA-Z0-9+\-.]*:"
    rf"(?://(?:(?:{_UNRESERVED_SUB}|:|{_PCT})*@)?(?:\[(?P<ip>[^\]]*)\]|(?:{_UNRESERVED_SUB}|{_PCT})*)(?::[0-9]*)?"
    rf"(?:/{_PCHAR}*)*"
    rf"|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*|)"
    rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
)  # RFC 3986 absolute URI whose host is a registered name or "[" IPv6address "]", as a regular expression


def _is_uri(value: str) -> bool:
    match = _URI.fullmatch(value)
    return bool(match) and (match["ip"] is None or _is_ip(ipaddress.IPv6Address, match["ip"]))


def test_uri() -> None:
    valid = ["http://example.com", "https://example.com/path/to?q=1&r=2#frag", "mailto:user@example.com",
             "urn:isbn:0451450523", "file:///etc/hosts", "ftp://user:pass@ftp.example.com:21/x", "foo:", "a+b-c.d:x",
             "http://h:/", "tel:+1-816-555-1212", "http://example.com/%20a%C3%A9", "x:/", "x://",
             "data:text/plain;base64,SGVsbG8=", "http://a/b?c?d/e#f?g/h", "news:comp.infosystems.www.servers.unix"]
    invalid = ["", "example.com", "//example.com", "/path", "1http://x", "http://exa mple.com", "http://x/%zz",
               "http://x/%4", 'http://x/"', "http://x/\\", "http://x/\n", "http://x/a b", "http://x#a#b",
               "http://x/<>", "http://x/{}", "http://x/^", "http://x/|", ":x", "ht_tp://x", "é:x"]
    _check("uri", valid, invalid)
    for value in valid:
        assert _is_uri(value), value
    rng = random.Random(9)
    alphabet = ["a", "Z", "0", ":", "/", "//", "?", "#", "@", "%", "%2f", "%g", ".", "-", "+", "~", "!", "'", "[",
                " ", '"', "\\", "é", "http:", "x:", "]", "[::1]", "[1:2::3]"]
    for _ in range(1500):
        scheme = rng.choice(["http:", "x:", "a1+.-:", "", "1a:", "http://", "h://u@", "h://h:8", "h://[", "h://u@["])
        value = scheme + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10)))
        assert _accepts("uri", value) == _is_uri(value), value


def test_uri_ip_literal() -> None:
    valid = ["http://[2001:db8::1]:80/", "http://[::1]/", "http://[::]", "https://[::ffff:192.0.2.1]:8443/a?b#c",
             "http://user@[fe80::1]/", "x://[1:2:3:4:5:6:7:8]", "ldap://[2001:db8::7]/c=GB?objectClass?one",
             "http://[ABCD:EF01::1]"]
    invalid = ["http://[1.2.3.4]/", "http://[::1", "http://::1]/", "http://[]/", "http://[v1.fe]/",
               "http://[::g]/", "http://[1::2::3]/", "http://[fe80::1%25eth0]/", "http://[::1]x/", "http://a[::1]/",
               "http://[[::1]]/", "x:[::1]", "http://[::1]:8a/", "http://[1:2:3:4:5:6:7:8:9]/"]
    _check("uri", valid, invalid)
    for value in valid:
        assert _is_uri(value), value
    for value in invalid:
        assert not _is_uri(value), value
    rng = random.Random(10)
    for _ in range(300):
        value = f"http://[{_random_ipv6(rng)}]/"
        assert _accepts("uri", value) == _is_uri(value), value


# --- length bounds ----------------------------------------------------------------------------


def _plain(name: str) -> str:
    builder = GrammarBuilder()
    return builder.render(format_grammar(builder, name))


def test_redundant_bounds_give_the_plain_grammar() -> None:
    cases = [("date", 10, 10), ("date", 0, 100), ("uuid", 36, 36), ("uuid", 1, None), ("time", 9, 24),
             ("date-time", 0, 35), ("duration", 3, 62), ("ipv4", 7, 15), ("ipv6", 0, 45), ("ipv6", 2, 100),
             ("hostname", 1, 253), ("hostname", 0, 239), ("email", 5, 320), ("email", 0, 304), ("uri", 1, None),
             ("uri", 2, None)]
    for name, low, high in cases:
        builder = GrammarBuilder()
        assert builder.render(format_grammar(builder, name, min_length=low, max_length=high)) == _plain(name), name


def test_impossible_bounds_raise() -> None:
    cases = [("uuid", 0, 10), ("uuid", 37, None), ("uuid", 30, 35), ("date", 11, 20), ("date", 0, 9),
             ("time", 10, 10), ("time", 25, None), ("time", 0, 8), ("date-time", 0, 19), ("duration", 0, 2),
             ("duration", 63, 100), ("ipv4", 0, 6), ("ipv4", 16, 20), ("ipv6", 0, 1), ("ipv6", 46, None),
             ("hostname", 0, 0), ("email", 0, 4), ("uri", 0, 1), ("email", 305, None), ("hostname", 240, 300),
             ("uri", 10, 5), ("time", 20, 15)]
    for name, low, high in cases:
        with pytest.raises(ValueError, match="no `"):
            format_grammar(GrammarBuilder(), name, min_length=low, max_length=high)


def test_unsupported_minimum_raises() -> None:
    for name, low, high in [("uri", 3, None), ("uri", 10, 2083), ("email", 6, 254), ("email", 6, None),
                            ("hostname", 2, 253), ("hostname", 4, None)]:
        with pytest.raises(ValueError, match="not supported"):
            format_grammar(GrammarBuilder(), name, min_length=low, max_length=high)


def _sample(name: str, rng: random.Random) -> list[str]:
    """Values of `name` of many lengths, and some non-values."""
    values = {"ipv4": ["1.2.3.4", "0.0.0.0", "9.8.7.6", "1.1.1.01", "255.255.255.255"],
              "ipv6": ["::", "::1", "1::", "1:2::", "a:b::c", "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
                       "ffff:ffff:ffff:ffff:ffff::255.255.255.255", "ffff:ffff:ffff:ffff:ffff:ffff:1.255.255.255",
                       "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]}.get(name, [])
    for _ in range(250):
        if name in ("time", "date-time"):
            fraction = rng.choice(["", "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 10)))])
            offset = rng.choice(["Z", "+05:30", "-23:59", "+24:00", ""])
            value = f"{rng.randint(0, 24):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{fraction}{offset}"
            values.append(value if name == "time" else rng.choice(["2024-02-29T", "2023-02-29T"]) + value)
        elif name == "duration":
            values.append(_random_duration(rng))
        elif name == "ipv4":
            values.append(".".join(str(rng.choice([0, 9, 10, 99, 100, 255, 256, rng.randint(0, 255)])) for _ in range(4)))
        else:
            values.append(_random_ipv6(rng))
    return values


def _is_value(name: str, value: str) -> bool:
    if name == "time":
        return _is_time(value)
    if name == "date-time":
        date, _, time = value.partition("T")
        return _is_date(date) and _is_time(time)
    if name == "duration":
        return bool(_DURATION.fullmatch(value))
    return _is_ip(ipaddress.IPv4Address if name == "ipv4" else ipaddress.IPv6Address, value)


def test_exact_bounds() -> None:
    """time, date-time, duration, ipv4 and ipv6 within bounds: exactly their values of those lengths."""
    cases = {"time": [(0, 9), (9, 9), (10, 14), (0, 18), (15, 20), (20, None)],
             "date-time": [(0, 20), (0, 25), (21, 30), (31, None)],
             "duration": [(0, 4), (0, 10), (6, 12), (0, 20), (20, None), (0, 61)],
             "ipv4": [(0, 7), (9, 11), (12, 15), (15, None)],
             "ipv6": [(0, 2), (0, 10), (3, 16), (0, 30), (12, 39), (40, None)]}
    rng = random.Random(11)
    for name, bounds in cases.items():
        values = _sample(name, rng)
        for low, high in bounds:
            top = high if high is not None else 1000
            accepted = 0
            for value in values:
                expected = _is_value(name, value) and low <= len(value) <= top
                assert _accepts(name, value, low, high) == expected, (name, low, high, value)
                accepted += expected
            assert accepted >= 3, (name, low, high)


def test_fixed_length_bounds() -> None:
    assert _accepts("uuid", "123e4567-e89b-12d3-a456-426614174000", 36, 36)
    assert _accepts("date", "2024-02-29", 1, 10)


_ALPHABET = [chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\']


@functools.cache
def _char_tokens() -> dict[str, int]:
    tokens = {c: _model().tokenize(c, add_special=False, parse_special=False) for c in _ALPHABET}
    return {c: t[0] for c, t in tokens.items() if len(t) == 1}


def _walk(grammar: str, rng: random.Random, bias: dict[str, int]) -> list[str]:
    """Write a text under `grammar` character by character (picking among the allowed ones,
    weighted by `bias`) until no character is allowed; every prefix the grammar may end at."""
    model, tokens = _model(), _char_tokens()
    state = _cache().get(grammar).start()
    text, ends = "", []
    try:
        while True:
            if state.allows(model.eos_token_id):
                ends.append(text)
            # a weight of 1000 or more is a priority: the first such character allowed is taken
            choice = next((c for c in sorted(bias, key=bias.__getitem__, reverse=True)
                           if bias[c] >= 1000 and state.allows(tokens[c])), None)
            if choice is None:
                allowed = [c for c, token in tokens.items() if state.allows(token)]
                if not allowed:
                    break
                choice = rng.choices(allowed, [bias.get(c, 1) for c in allowed])[0]
            state.accept(tokens[choice])
            text += choice
    finally:
        state.close()
    assert ends and ends[-1] == text  # no dead end
    return ends


def _content(name: str, low: int, high: int | None) -> str:
    builder = GrammarBuilder()
    return builder.render(format_grammar(builder, name, min_length=low, max_length=high))


_BIASES = [{}, {"a": 900}, {"a": 900, "%": 90, "/": 30}, {"a": 300, "/": 150, "@": 15, "[": 60, ".": 30, ":": 30},
           {"1": 50, ":": 20, "a": 50, ".": 20}]


def _walks(name: str, low: int, high: int | None, walks: int, seed: int,
           biases: list[dict[str, int]] = _BIASES) -> list[str]:
    """Every value reached by random walks under the bounded grammar, checked to be valid and
    within the bounds."""
    checks = {"uri": _is_uri, "email": _is_email, "hostname": _is_hostname}
    check = checks.get(name) or functools.partial(_is_value, name)
    rng = random.Random(seed)
    grammar = _content(name, low, high)
    found = []
    for i in range(walks):
        for value in _walk(grammar, rng, biases[i % len(biases)]):
            assert low <= len(value) <= (high if high is not None else len(value)), (name, low, high, value)
            assert check(value), (name, value)
            found.append(value)
    return found


def test_walks_stay_within_bounds() -> None:
    """Texts written under the grammar, as a model would, are values within the bounds (the
    runaway guards keep the unbounded formats finite too)."""
    for name, low, high in [("time", 0, None), ("duration", 0, None), ("duration", 0, 20), ("duration", 8, 25),
                            ("ipv6", 0, 30), ("ipv6", 20, 39), ("time", 12, 16), ("date-time", 0, 30),
                            ("hostname", 0, 30), ("hostname", 0, 100), ("hostname", 0, 7), ("email", 0, 30),
                            ("email", 0, 254), ("email", 0, 9), ("uri", 0, 30), ("uri", 0, 12), ("uri", 0, 100)]:
        found = _walks(name, low, high, 10, 12)
        assert max(len(v) for v in found) >= 0.85 * (high or 0)
    assert max(len(v) for v in _walks("time", 0, None, 5, 13)) <= 24


def test_pydantic_http_url() -> None:
    """HttpUrl: {"type": "string", "format": "uri", "minLength": 1, "maxLength": 2083}."""
    _walks("uri", 1, 2083, 6, 14)  # values within the bounds, all of them
    # one character after another as long as it can: the longest plain texts the budgets allow
    greedy = [{"a": 10**9, "?": 10**6, "#": 10**3}, {"/": 10**12, "a": 10**9, "?": 10**6, "#": 10**3},
              {"a": 10**9, "%": 10**8, "?": 10**6, "#": 10**3}]
    assert max(len(v) for v in _walks("uri", 1, 2083, 3, 15, greedy)) >= 1800
    valid = ["https://example.com", "http://localhost:8000/api/v1/items?id=3&sort=desc#top", "https://a.b/%7Euser/",
             "http://user:pw@[2001:db8::1]:80/x", "mailto:someone@example.com", "https://example.com/" + "a" * 800,
             "https://example.com/?q=" + "b" * 400, "https://example.com/#" + "c" * 200,
             "https://" + "h" * 200 + ".com/", "https://example.com/" + "%20" * 250, "x:" + "p" * 1100]
    invalid = ["", "a", "example.com", "https://example.com/" + "a" * 2064, "x:" + "p" * 2082,
               "https://" + "h" * 300 + ".com/", "https://example.com/?q=" + "b" * 600, "http://x:123456/"]
    for value in valid:
        assert _accepts("uri", value, 1, 2083), value
    for value in invalid:
        assert not _accepts("uri", value, 1, 2083), value


def test_uri_budgets_fit() -> None:
    for high in range(2, 5000):
        budget = _uri_budgets(high)
        authority = 2 + budget["userinfo"] + budget["host"] + budget["port"] + budget["path"]
        assert authority <= budget["hier"] or budget["hier"] < 2
        assert min(budget.values()) >= 0 and budget["scheme"] >= 1 and budget["port"] <= 6
        assert budget["scheme"] + 1 + budget["hier"] + budget["query"] + budget["fragment"] == high


def test_short_uri() -> None:
    valid = ["https://example.com/abc", "http://example.com", "mailto:someone@example.com", "x:", "mailto:" + "b" * 23,
             "urn:isbn:0451450523", "https://[::1]/", "ftp://a.b/%20%21", "https://[2001:db8::1]", "h://"]
    invalid = ["https://example.com/abcdefghijk", "a:" + "b" * 29, "mailto:" + "b" * 24, "https://[2001:db8:1:2:3:4:5:6]/"]
    for value in valid:
        assert len(value) <= 30 and _accepts("uri", value, 0, 30), value
    for value in invalid:
        assert _is_uri(value) and not _accepts("uri", value, 0, 30), value
    assert _accepts("uri", "a:", 0, 2) and not _accepts("uri", "a:/", 0, 2) and not _accepts("uri", "ab:", 0, 2)


_LOCAL = re.compile(r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*")


def _is_email(value: str) -> bool:
    local, _, domain = value.rpartition("@")
    return (bool(_LOCAL.fullmatch(local)) and len(local) <= 64 and "." in domain and _is_hostname(domain)
            and len(value) <= 254 + 64)


def test_short_email() -> None:
    valid = ["a@b.co", "john.doe@example.com", "x+tag@example.org", "a@b.c", "abcdefghijklmn@abcdefghij.com",
             "a.b@c.d.e.f.g.h"]
    invalid = ["abcdefghijklmno@example.com", "john.doe@exampleexample.com", "a" * 20 + "@b.co"]
    for value in valid:
        assert len(value) <= 30 and _accepts("email", value, 0, 30), value
    for value in invalid:
        assert _is_email(value) and not _accepts("email", value, 0, 30), value
    assert _accepts("email", "a@b.c", 0, 5) and not _accepts("email", "ab@c.d", 0, 5)
    assert _accepts("email", "a" * 64 + "@example.com", 5, 254)
    assert not _accepts("email", "a" * 64 + "@" + "b" * 190 + ".com", 5, 254)


def test_short_hostname() -> None:
    for high in (1, 2, 5, 30, 100, 238):
        found = _walks("hostname", 0, high, 3, high)
        assert max(len(v) for v in found) >= 0.9 * high
    assert _accepts("hostname", "example.com", 0, 11) and not _accepts("hostname", "example.com", 0, 10)
    assert _accepts("hostname", "a", 0, 1) and not _accepts("hostname", "ab", 0, 1)
    for value in ["www.example.co.uk", "a-b.c", "localhost", "a.b.c.d.e.f.g.h.i.j"]:
        assert _accepts("hostname", value, 0, 30), value
    assert not _accepts("hostname", "a" * 31, 0, 30)
