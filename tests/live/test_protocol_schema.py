"""The live protocol's one schema: the fixtures, the kernel's own messages and the
hand-written checks in kerasmagic/live/protocol.py all held to protocol.schema.json."""

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from protocol_schema import SCHEMA_PATH, errors, message_defs, schema

from kerasmagic.live import protocol

FIXTURES = sorted((Path(__file__).parents[1] / "protocol_fixtures").glob("*.json"))


@pytest.mark.unit
def test_the_schema_is_valid_draft_2020_12_of_this_protocol_version():
    Draft202012Validator.check_schema(schema())
    assert schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema()["x-protocol-version"] == protocol.PROTOCOL_VERSION


@pytest.mark.unit
def test_the_schema_ships_in_the_package():
    import importlib.resources

    shipped = importlib.resources.files("kerasmagic.live") / "protocol.schema.json"
    assert json.loads(shipped.read_text(encoding="utf-8")) == json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@pytest.mark.unit
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fixture_against_the_schema(path):
    fixture = json.loads(path.read_text())
    found = errors(fixture["data"], fixture["direction"])
    if fixture["valid"]:
        assert found == []
    else:
        assert found, f"{path.name} is marked invalid but the schema accepts it"


@pytest.mark.unit
@pytest.mark.parametrize("direction", ["to_kernel", "to_frontend"])
def test_the_kernels_checks_know_the_schemas_methods_and_fields(direction):
    """protocol.validate's tables name exactly the schema's methods, required and optional fields."""
    tables = {"to_kernel": protocol._TO_KERNEL, "to_frontend": protocol._TO_FRONTEND}[direction]
    defs = message_defs(direction)
    assert sorted(tables) == sorted(defs)
    for method, message in defs.items():
        required, optional = tables[method]
        wanted = set(message["required"]) - {"method"}
        assert set(required) == wanted, method
        assert set(optional) == set(message["properties"]) - wanted - {"method"}, method


@pytest.mark.unit
def test_a_wrong_value_fails_the_schema_where_it_fails_the_kernels_checks():
    """The schema is not merely permissive: each required field of each fixture-covered
    message, replaced by a value of the wrong kind, fails both."""
    for path in FIXTURES:
        fixture = json.loads(path.read_text())
        if not fixture["valid"]:
            continue
        data, direction = fixture["data"], fixture["direction"]
        message = message_defs(direction)[data["method"]]
        for name in message["required"]:
            if name == "method" or set(message["properties"][name]) <= {"description"}:
                continue  # the method itself, and a field of any value (an event's payload)
            spoiled = {**data, name: ["not", "this"]}
            assert errors(spoiled, direction), (path.name, name)
            with pytest.raises(protocol.ProtocolError):
                protocol.validate(spoiled, direction)
            missing = {k: v for k, v in data.items() if k != name}
            assert errors(missing, direction), (path.name, name)


@pytest.mark.kernel
def test_a_real_kernels_messages_follow_the_schema(kernel):
    """What a kernel sends a 1.6 frontend (hello, history, facts, sample, jobs, leak watch, cell
    runs, a clear's result and event, an error) against the schema, and the kernel's checks."""
    kernel.execute("%load_ext kerasmagic")
    comm_id = kernel.open_comm(protocol_version=protocol.PROTOCOL_VERSION)
    kernel.comm_data(comm_id, "cell_growth")
    kernel.execute("x = bytearray(4 << 20)")
    kernel.comm_data(comm_id, "cell_run")
    kernel.send_comm(comm_id, {"method": "clear", "request_id": "c-1"})
    kernel.comm_data(comm_id, "clear_result")
    kernel.send_comm(comm_id, {"method": "explode"})
    kernel.comm_data(comm_id, "error")
    kernel.send_comm(comm_id, {"method": "refresh"})
    kernel.comm_data(comm_id, "isolated_jobs", timeout=30)
    messages = [m["content"]["data"] for m in kernel.comm_messages(comm_id)]
    seen = {m["method"] for m in messages}
    assert {"hello", "history", "facts", "sample", "isolated_jobs", "cell_growth", "cell_run",
            "clear_result", "event", "error"} <= seen, seen
    for message in messages:
        assert errors(message, "to_frontend") == [], message["method"]
        protocol.validate(message, "to_frontend")
    kernel.close_comm(comm_id)
    kernel.execute("%unload_ext kerasmagic")
