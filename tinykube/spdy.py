"""SPDY/3.1 framing, as much as kubectl's port-forward speaks (moby/spdystream over
golang.org/x/net's version-3 framer): the frames, and header blocks compressed with zlib over
the protocol's fixed dictionary, one compression stream per direction per connection.

Frames (all integers big-endian):
- control: 1 bit set, 15 bits version (3), 16 bits type, 8 bits flags, 24 bits length, data.
  SYN_STREAM (1): stream id, associated stream id, priority and slot, header block;
  SYN_REPLY (2): stream id, header block; RST_STREAM (3): stream id, status; SETTINGS (4);
  PING (6): an id echoed back; GOAWAY (7): last stream id, status; HEADERS (8): stream id,
  header block; WINDOW_UPDATE (9): stream id, delta.
- data: 1 bit clear, 31 bits stream id, 8 bits flags (FIN 0x01), 24 bits length, data.
A header block, uncompressed, is a count of pairs then each name and value with 32-bit lengths.

`FrameReader` cuts frames out of a byte stream (the WebSocket tunnel carries the connection's
bytes in arbitrary pieces); `HeaderCodec` is one direction's compression state. Pure code.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 3
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9

FLAG_FIN = 0x01
# RST_STREAM statuses.
PROTOCOL_ERROR = 1
INVALID_STREAM = 2
REFUSED_STREAM = 3
CANCEL = 5
INTERNAL_ERROR = 6

MAX_DATA = 0xFFFFFF
# The most a peer may put in one frame before the connection is refused as garbage.
MAX_FRAME = 1024 * 1024

# SPDY/3's header compression dictionary (draft 3, section 2.6.10.1): these words, each with
# its length as 4 bytes big-endian, then a run of common header values.
_DICTIONARY_WORDS = (
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
)
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = (
    b"".join(struct.pack(">I", len(w)) + w.encode() for w in _DICTIONARY_WORDS)
    + _DICTIONARY_TAIL.encode()
)


class ProtocolError(ValueError):
    """The peer sent something that is not SPDY/3."""


@dataclass(frozen=True)
class Frame:
    """One frame: `control` with its `type`, or data (type 0) for `stream_id`."""

    control: bool
    type: int
    flags: int
    payload: bytes
    stream_id: int = 0  # data frames; control frames carry theirs in the payload

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class FrameReader:
    """Frames out of a byte stream fed in pieces."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self.buffer += data
        frames: list[Frame] = []
        while len(self.buffer) >= 8:
            first, flags_length = struct.unpack_from(">II", self.buffer)
            length = flags_length & 0xFFFFFF
            if length > MAX_FRAME:
                raise ProtocolError(f"frame of {length} bytes is too large")
            if len(self.buffer) < 8 + length:
                break
            payload = bytes(self.buffer[8 : 8 + length])
            del self.buffer[: 8 + length]
            flags = flags_length >> 24
            if first & 0x80000000:
                version = (first >> 16) & 0x7FFF
                if version != VERSION:
                    raise ProtocolError(f"SPDY version {version} is not supported (3 is)")
                frames.append(Frame(True, first & 0xFFFF, flags, payload))
            else:
                frames.append(Frame(False, 0, flags, payload, stream_id=first & 0x7FFFFFFF))
        return frames


class HeaderCodec:
    """One direction's header compression: `encode` for what we send, `decode` for what we
    receive (each a zlib stream over the dictionary, flushed per block)."""

    def __init__(self) -> None:
        self._compress = zlib.compressobj(level=9, zdict=DICTIONARY)
        self._decompress = zlib.decompressobj(zdict=DICTIONARY)

    def encode(self, headers: dict[str, str]) -> bytes:
        raw = struct.pack(">I", len(headers))
        for name, value in headers.items():
            n, v = name.lower().encode(), value.encode()
            raw += struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v
        return self._compress.compress(raw) + self._compress.flush(zlib.Z_SYNC_FLUSH)

    def decode(self, block: bytes) -> dict[str, str]:
        """Names lowercased; a repeated name's values joined by NUL, as SPDY's."""
        try:
            raw = self._decompress.decompress(block)
        except zlib.error as exc:
            raise ProtocolError(f"header block does not decompress: {exc}") from exc
        try:
            (count,) = struct.unpack_from(">I", raw)
            offset = 4
            headers: dict[str, str] = {}
            for _ in range(count):
                (n,) = struct.unpack_from(">I", raw, offset)
                name = raw[offset + 4 : offset + 4 + n].decode().lower()
                offset += 4 + n
                (v,) = struct.unpack_from(">I", raw, offset)
                value = raw[offset + 4 : offset + 4 + v].decode()
                offset += 4 + v
                headers[name] = value
        except (struct.error, UnicodeDecodeError) as exc:
            raise ProtocolError(f"malformed header block: {exc}") from exc
        return headers


def control(type_: int, payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, type_, (flags << 24) | len(payload)) + payload


def data(stream_id: int, payload: bytes, *, fin: bool = False) -> bytes:
    flags = FLAG_FIN if fin else 0
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


def syn_reply(stream_id: int, block: bytes, *, fin: bool = False) -> bytes:
    return control(SYN_REPLY, struct.pack(">I", stream_id) + block, FLAG_FIN if fin else 0)


def syn_stream(stream_id: int, block: bytes, *, fin: bool = False) -> bytes:
    """A SYN_STREAM (the client's; tests use it)."""
    payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + block
    return control(SYN_STREAM, payload, FLAG_FIN if fin else 0)


def rst_stream(stream_id: int, status: int) -> bytes:
    return control(RST_STREAM, struct.pack(">II", stream_id, status))


def goaway(last_stream_id: int, status: int = 0) -> bytes:
    return control(GOAWAY, struct.pack(">II", last_stream_id, status))


def stream_id_of(frame: Frame) -> int:
    """The stream a control frame names (SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS,
    WINDOW_UPDATE)."""
    if len(frame.payload) < 4:
        raise ProtocolError(f"control frame type {frame.type} too short")
    return int(struct.unpack_from(">I", frame.payload)[0] & 0x7FFFFFFF)


def syn_stream_block(frame: Frame) -> bytes:
    if len(frame.payload) < 10:
        raise ProtocolError("SYN_STREAM too short")
    return frame.payload[10:]
