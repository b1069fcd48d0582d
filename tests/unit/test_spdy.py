"""SPDY/3.1 framing for kubectl's port-forward tunnel (tinykube/spdy.py)."""

from __future__ import annotations

import struct
import zlib

import pytest

from tinykube import spdy


def test_dictionary_is_spdy3s() -> None:
    # Its length and zlib dictionary id (adler32), which a peer's zlib checks.
    assert len(spdy.DICTIONARY) == 1423
    assert zlib.adler32(spdy.DICTIONARY) == 3821447106
    assert spdy.DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.DICTIONARY.endswith(b"utf-,*,enq=0.")


def test_header_blocks_round_trip_across_one_compression_stream() -> None:
    client, server = spdy.HeaderCodec(), spdy.HeaderCodec()
    for i in range(3):
        headers = {"streamType": "data", "port": "8080", "requestID": str(i)}
        assert server.decode(client.encode(headers)) == {
            "streamtype": "data",
            "port": "8080",
            "requestid": str(i),
        }
    assert server.decode(client.encode({})) == {}


def test_a_block_from_another_stream_is_refused() -> None:
    with pytest.raises(spdy.ProtocolError, match="decompress"):
        spdy.HeaderCodec().decode(b"\x00garbage")


def test_frames_are_cut_from_pieces() -> None:
    codec = spdy.HeaderCodec()
    wire = (
        spdy.syn_stream(1, codec.encode({"streamtype": "error"}))
        + spdy.data(3, b"hello", fin=True)
        + spdy.control(spdy.PING, struct.pack(">I", 7))
    )
    reader = spdy.FrameReader()
    frames = []
    for i in range(len(wire)):
        frames += reader.feed(wire[i : i + 1])
    assert [f.control for f in frames] == [True, False, True]
    syn, data, ping = frames
    assert syn.type == spdy.SYN_STREAM and spdy.stream_id_of(syn) == 1
    assert spdy.HeaderCodec().decode(spdy.syn_stream_block(syn)) == {"streamtype": "error"}
    assert (data.stream_id, data.payload, data.fin) == (3, b"hello", True)
    assert ping.type == spdy.PING and ping.payload == b"\x00\x00\x00\x07"


def test_reply_reset_and_goaway_layouts() -> None:
    reply = spdy.syn_reply(5, b"BLOCK")
    assert reply[:4] == b"\x80\x03\x00\x02" and reply[4:8] == b"\x00\x00\x00\x09"
    assert reply[8:12] == b"\x00\x00\x00\x05" and reply[12:] == b"BLOCK"
    assert spdy.rst_stream(5, spdy.CANCEL)[8:] == b"\x00\x00\x00\x05\x00\x00\x00\x05"
    assert spdy.goaway(9)[2:4] == b"\x00\x07"
    assert spdy.data(1, b"", fin=True) == b"\x00\x00\x00\x01\x01\x00\x00\x00"


def test_other_versions_and_huge_frames_are_refused() -> None:
    with pytest.raises(spdy.ProtocolError, match="version 2"):
        spdy.FrameReader().feed(b"\x80\x02\x00\x01\x00\x00\x00\x00")
    with pytest.raises(spdy.ProtocolError, match="too large"):
        spdy.FrameReader().feed(b"\x00\x00\x00\x01\x00\xff\xff\xff")
