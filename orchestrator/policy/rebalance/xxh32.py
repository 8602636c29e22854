"""XXH32 (xxHash, 32 bits), in pure Python: the hash HAProxy's ``xxh32`` converter computes.

A user's bucket is ``xxh32(user id) mod bucket_count`` so that an HAProxy frontend
(``url_param(user),url_dec(1),xxh32,mod(N)``) and the Python lab put every user in the same
bucket. The standard library has no XXH32; the reference algorithm is short, and a user id
is a few bytes, so one call costs about 2 us (tests/policy/test_buckets.py checks it against
the published test vectors, tests/lab/haproxy/ against a real HAProxy).
"""

from __future__ import annotations

import struct

__all__ = ["xxh32"]

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M = 0xFFFFFFFF
_WORDS = struct.Struct("<4I")
_WORD = struct.Struct("<I")


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * _P2) & _M, 13) * _P1 & _M


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (an unsigned 32-bit int), as in the xxHash reference."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        while i + 16 <= n:
            a, b, c, d = _WORDS.unpack_from(data, i)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        (k,) = _WORD.unpack_from(data, i)
        h = _rotl((h + k * _P3) & _M, 17) * _P4 & _M
        i += 4
    while i < n:
        h = _rotl((h + data[i] * _P5) & _M, 11) * _P1 & _M
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M
    h ^= h >> 13
    h = h * _P3 & _M
    h ^= h >> 16
    return h
