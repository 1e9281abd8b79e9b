"""app/media/fetch.py without a server: data: URIs, and which http(s) hosts may be fetched."""

from __future__ import annotations

import asyncio

import pytest

from app.media.fetch import DEFAULT_MEDIA, MediaError, MediaPolicy, media_bytes


def fetch(url: str, policy: MediaPolicy = DEFAULT_MEDIA) -> bytes:
    return asyncio.run(media_bytes(url, policy))


def test_data_uris_in_base64_and_percent_encoding() -> None:
    assert fetch("data:image/png;base64,aGVsbG8=") == b"hello"
    assert fetch("data:text/plain,hi%20there") == b"hi there"
    with pytest.raises(MediaError, match="no ','"):
        fetch("data:image/png;base64")
    with pytest.raises(MediaError, match="more than 10 bytes"):
        fetch("data:;base64," + "QUFB" * 100, MediaPolicy(max_bytes=10))


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]", "10.1.2.3", "192.168.0.1", "169.254.169.254",
                                  "0.0.0.0"])
def test_non_public_hosts_are_refused_before_any_connection(host) -> None:
    with pytest.raises(MediaError, match="loopback, private or link-local"):
        fetch(f"http://{host}:9/cat.png")  # port 9 (discard): nothing would answer anyway


@pytest.mark.parametrize(("url", "words"), [
    ("file:///etc/passwd", "file://"),
    ("mm_file://abc", "Files API"),
    ("gopher://example.com/", "must be a data: URI"),
    ("cat.png", "must be a data: URI"),
    ("http://", "no host"),
])
def test_other_urls_are_refused_with_the_reason(url, words) -> None:
    with pytest.raises(MediaError, match=words):
        fetch(url)
