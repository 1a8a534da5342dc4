"""The live protocol's JSON Schema (kerasmagic/live/protocol.schema.json) as the tests use it.

``jsonschema`` is a test dependency only: the kernel validates what it receives with the
small checks in ``kerasmagic/live/protocol.py``, which the tests hold to this schema.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PATH = Path(__file__).parents[2] / "kerasmagic" / "live" / "protocol.schema.json"
#: The schema's union per direction, as named in the fixtures and in ``protocol.validate``.
DIRECTION_DEFS = {"to_kernel": "FrontendMessage", "to_frontend": "KernelMessage"}


@cache
def schema() -> dict[str, Any]:
    """The schema as shipped in the package."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@cache
def validator(direction: str) -> Draft202012Validator:
    """A validator for one direction's messages (``to_kernel`` or ``to_frontend``)."""
    root = schema()
    return Draft202012Validator({
        "$schema": root["$schema"], "$id": root["$id"], "$defs": root["$defs"],
        "$ref": f"#/$defs/{DIRECTION_DEFS[direction]}",
    })


def message_defs(direction: str) -> dict[str, dict[str, Any]]:
    """``{method: its message schema}`` for every message of ``direction``."""
    defs = schema()["$defs"]
    names = [ref["$ref"].rsplit("/", 1)[1] for ref in defs[DIRECTION_DEFS[direction]]["anyOf"]]
    return {defs[name]["properties"]["method"]["const"]: defs[name] for name in names}


def errors(message: Any, direction: str) -> list[str]:
    """What is wrong with ``message`` per the schema, one line each (empty: valid)."""
    return [f"{'/'.join(map(str, e.absolute_path)) or '(message)'}: {e.message[:200]}"
            for e in validator(direction).iter_errors(message)]
