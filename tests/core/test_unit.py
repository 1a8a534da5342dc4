"""Pure-Python parts: formatting, result objects, events, probes that need no framework."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kerasmagic import events
from kerasmagic.probes import process as process_probe
from kerasmagic.probes.availability import Unavailable, guarded, to_jsonable
from kerasmagic.tables import Section, format_bytes, render_html, render_text

pytestmark = pytest.mark.unit


def test_format_bytes_units_and_signs():
    assert format_bytes(0) == "0 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(-5 * 2**20, signed=True) == "-5.00 MiB"
    assert format_bytes(2**20, signed=True) == "+1.00 MiB"
    assert format_bytes(None) == "—"
    assert format_bytes(Unavailable("no_device", "no GPU")) == "n/a (no GPU)"


def test_unavailable_is_falsy_and_serialises():
    value = Unavailable("not_imported", "TensorFlow is not imported")
    assert not value
    assert to_jsonable({"x": value, "t": (1, 2)}) == {
        "x": {"status": "unavailable", "reason": "not_imported", "detail": "TensorFlow is not imported"},
        "t": [1, 2],
    }
    assert str(value) == "n/a (TensorFlow is not imported)"


def test_guarded_turns_an_exception_into_a_reason():
    result = guarded(lambda: 1 / 0, "dividing")
    assert isinstance(result, Unavailable)
    assert "dividing" in str(result) and "ZeroDivisionError" in str(result)


def test_html_rendering_escapes_user_strings():
    section = Section("Models")
    section.add("<script>alert(1)</script>", "1 B", "held by <b>x</b>")
    html = render_html("t", [section])
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<b>x</b>" not in html
    assert "Models" in render_text("t", [section])


def test_events_reach_subscribers_and_a_broken_one_is_isolated():
    seen = []

    def broken(kind, payload):
        raise RuntimeError("frontend gone")

    stop_broken = events.subscribe(broken)
    stop = events.subscribe(lambda kind, payload: seen.append((kind, payload["n"])))
    try:
        events.publish("clear_tf", {"n": 1})
    finally:
        stop()
        stop_broken()
    events.publish("clear_tf", {"n": 2})
    assert seen == [("clear_tf", 1)]


def test_exact_peak_sees_a_freed_allocation():
    peak = process_probe.PeakRss()
    peak.start()
    block = bytearray(200 * 2**20)
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    del block
    top = peak.stop()
    assert top - peak.start_rss_bytes >= 190 * 2**20
    assert peak.method == ("exact" if sys.platform.startswith("linux") else "sampled")


def test_a_nested_measurement_does_not_erase_the_outer_peak():
    from kerasmagic import measure

    def touch(mib):
        block = bytearray(mib * 2**20)
        for offset in range(0, len(block), 4096):
            block[offset] = 1
        del block

    with measure("outer") as outer:
        touch(200)
        with measure("inner") as inner:
            touch(10)
    assert outer.rss_peak_above_start_bytes >= 190 * 2**20
    assert inner.rss_peak_above_start_bytes < 100 * 2**20


def test_import_does_not_load_a_framework_or_gpu_library():
    code = (
        "import sys, kerasmagic, kerasmagic.magics, kerasmagic.extension, kerasmagic.clean, kerasmagic.snapshot; "
        "print(sorted(m for m in ('tensorflow','keras','jax','torch','pynvml','numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_snapshot_without_frameworks_reports_process_memory_only():
    code = (
        "import sys, json, kerasmagic; s = kerasmagic.tf_mem(); d = s.to_dict(); "
        "print(json.dumps({'rss': d['process']['rss_bytes'], 'tf': d['tensorflow']['status'], "
        "'imported': 'tensorflow' in sys.modules, 'text': str(s)}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["rss"] > 10 * 2**20
    assert not data["imported"]
    assert "not imported" in json.dumps(data["tf"]) and "RSS" in data["text"]


def test_sampled_peak_where_the_kernel_cannot_reset_vmhwm(monkeypatch):
    monkeypatch.setattr(process_probe.PeakRss, "_exact", False)  # what start() caches off Linux
    peak = process_probe.PeakRss()
    peak.start()
    block = bytearray(200 * 2**20)
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    import time

    time.sleep(0.05)  # the sampler needs the allocation to live for a few of its 2 ms ticks
    del block
    top = peak.stop()
    assert peak.method == "sampled"
    assert top - peak.start_rss_bytes >= 190 * 2**20
    assert not [t for t in __import__("threading").enumerate() if t.name == "kerasmagic-peak-rss"]


def test_public_names_stay_functions_after_every_submodule_is_imported():
    """A submodule named like a public function would replace it on the package."""
    import importlib
    import pkgutil

    import kerasmagic

    for module in pkgutil.walk_packages(kerasmagic.__path__, "kerasmagic."):
        if not module.name.startswith(("kerasmagic.demo", "kerasmagic.isolation.child.worker")):
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as missing:  # built on an optional package (matplotlib)
                if (missing.name or "").startswith("kerasmagic"):
                    raise
    for name in ("tf_mem", "measure", "clear_tf", "fresh_model", "find_holders", "run_isolated"):
        assert callable(getattr(kerasmagic, name)) and not isinstance(getattr(kerasmagic, name), type(kerasmagic)), name
