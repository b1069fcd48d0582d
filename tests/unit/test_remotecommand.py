"""The exec/attach/port-forward channel framing (tinykube/remotecommand.py)."""

from __future__ import annotations

import json

import pytest

from tinykube import remotecommand as rc


def test_frames_carry_the_channel_byte_first() -> None:
    assert rc.frame(rc.STDOUT, b"hi") == b"\x01hi"
    assert rc.frame(rc.ERROR) == b"\x03"
    assert rc.parse(b"\x00abc") == (0, b"abc")
    assert rc.parse(b"\xff\x00") == (rc.CLOSE, b"\x00")
    with pytest.raises(ValueError, match="channel byte"):
        rc.parse(b"")


def test_protocols_prefer_v5() -> None:
    assert rc.EXEC_PROTOCOLS == ("v5.channel.k8s.io", "v4.channel.k8s.io")
    assert rc.PORT_FORWARD_PROTOCOLS == ("v4.channel.k8s.io",)


def test_v5_close_signal_names_one_stream() -> None:
    assert rc.close_signal(b"\x00") == rc.STDIN
    for bad in (b"", b"\x00\x01"):
        with pytest.raises(ValueError):
            rc.close_signal(bad)


def test_exit_status_is_kubes_non_zero_exit_code() -> None:
    status = json.loads(rc.exit_status(3, ["sh", "-c", "exit 3"]))
    assert status["status"] == "Failure"
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"] == {"causes": [{"reason": "ExitCode", "message": "3"}]}
    assert "exited with 3" in status["message"]
    assert rc.exit_code_of(rc.exit_status(3, ["x"])) == 3
    assert rc.exit_code_of(rc.success_status()) == 0
    assert json.loads(rc.success_status()) == {"metadata": {}, "status": "Success"}


def test_error_status_is_an_internal_error_without_exit_code() -> None:
    raw = rc.error_status('exec: "nope": executable file not found in $PATH')
    status = json.loads(raw)
    assert (status["status"], status["reason"], status["code"]) == ("Failure", "InternalError", 500)
    assert status["message"].startswith("Internal error occurred: exec:")
    assert rc.exit_code_of(raw) is None


def test_resize_messages() -> None:
    assert rc.parse_resize(b'{"Width":80,"Height":24}') == (80, 24)
    assert rc.parse_resize(b'{"Width":100}') == (100, 0)
    assert rc.resize_message(91, 33) == b'\x04{"Width": 91, "Height": 33}'
    assert rc.parse_resize(rc.parse(rc.resize_message(91, 33))[1]) == (91, 33)
    for bad, needle in (
        (b"not json", "JSON"),
        (b"[1, 2]", "object"),
        (b'{"Width": -1}', "Width"),
        (b'{"Height": 70000}', "Height"),
        (b'{"Width": "80"}', "Width"),
        (b'{"Width": true}', "Width"),
    ):
        with pytest.raises(ValueError, match=needle):
            rc.parse_resize(bad)


def test_port_forward_channels_and_prefix() -> None:
    assert rc.port_channels(0) == (0, 1)
    assert rc.port_channels(2) == (4, 5)
    assert rc.port_prefix(8080) == b"\x90\x1f"
    assert int.from_bytes(rc.port_prefix(443), "little") == 443


def test_ports_parameter() -> None:
    assert rc.parse_ports(["8080", "9090,53"]) == [8080, 9090, 53]
    with pytest.raises(ValueError, match='"http"'):
        rc.parse_ports(["http"])
    with pytest.raises(ValueError, match="65535"):
        rc.parse_ports(["70000"])
    with pytest.raises(ValueError, match="> 0"):
        rc.parse_ports(["0"])
