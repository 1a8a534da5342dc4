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
