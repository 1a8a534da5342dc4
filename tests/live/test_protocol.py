"""The shared JSON fixtures against the Python side of the protocol (jest checks the same files)."""

import json
from pathlib import Path

import pytest

from kerasmagic.live import protocol

pytestmark = pytest.mark.unit

FIXTURES = sorted((Path(__file__).parents[1] / "protocol_fixtures").glob("*.json"))


def test_there_are_fixtures_for_every_method():
    methods = {json.loads(p.read_text())["data"].get("method") for p in FIXTURES}
    expected = set(protocol._TO_KERNEL) | set(protocol._TO_FRONTEND)
    assert expected <= methods


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture(path):
    fixture = json.loads(path.read_text())
    if fixture["valid"]:
        assert protocol.validate(fixture["data"], fixture["direction"]) is fixture["data"]
    else:
        with pytest.raises(protocol.ProtocolError):
            protocol.validate(fixture["data"], fixture["direction"])
    if "metadata" in fixture:
        protocol.check_version(fixture["metadata"]["protocol_version"])


def test_version_check_refuses_other_major_and_missing():
    protocol.check_version("1.9.3")
    for bad in ("2.0.0", "0.9.0", None, "garbage", 1):
        with pytest.raises(protocol.ProtocolError) as info:
            protocol.check_version(bad)
        assert info.value.code == "protocol_mismatch"
        assert "upgrade" in str(info.value)


def test_error_codes():
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.validate("not an object")
    assert info.value.code == "bad_message"
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.validate({"method": "explode"})
    assert (info.value.code, info.value.request_method) == ("unknown_method", "explode")


def test_error_messages_cut_echoed_values():
    huge = "m" * 10_000_000
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.validate({"method": huge})
    message, method = str(info.value), info.value.request_method
    assert len(message) < 200 and message.endswith("… (10000000 characters)"), message[:300]
    assert message.startswith("unknown method '" + "m" * 80 + "'")
    assert len(method) < 200 and method.startswith("m" * 80) and "(10000000 characters)" in method
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.validate({"method": "clear", "request_id": [huge] * 1000})
    assert len(str(info.value)) < 200, str(info.value)[:300]
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.check_version(huge)
    assert len(str(info.value)) < 500 and "(10000000 characters)" in str(info.value)
    # Short values are echoed as before.
    assert protocol.echo("explode") == "'explode'"
    assert protocol.echo(10**400) == "an integer of about 401 digits"
    assert len(protocol.echo({"k" * 500: list(range(10_000))})) <= 81


def test_numbers_too_large_for_a_double_are_bad_values_not_crashes():
    for value in (10**400, -(10**400), 10**5000):
        with pytest.raises(protocol.ProtocolError) as info:
            protocol.validate({"method": "configure", "interval_s": value})
        assert info.value.code == "bad_message" and len(str(info.value)) < 200
        with pytest.raises(protocol.ProtocolError) as info:
            protocol.validate({"method": "open", "interval_s": value})
        assert (info.value.code, info.value.request_method) == ("bad_message", "open")
    with pytest.raises(protocol.ProtocolError):
        protocol.validate({"method": "hello", "protocol_version": "1.0.0", "package_version": "0",
                           "pid": 10**400, "interval_s": 1.0, "ts": 1.0}, "to_frontend")


def test_version_check_refuses_odd_versions_with_its_own_error():
    for bad in ("1" * 5000, "1" * 5000 + ".0.0", "\u00b9.0.0", "\u0661.0.0", "", ".1", ["1.0.0"], {"v": 1},
                10**400, 1.0):
        with pytest.raises(protocol.ProtocolError) as info:
            protocol.check_version(bad)
        assert info.value.code == "protocol_mismatch", bad
        assert len(str(info.value)) < 500
