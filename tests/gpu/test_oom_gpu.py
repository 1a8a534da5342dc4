"""A real GPU out-of-memory error with torch and with JAX: the error shown first, then what holds
GPU memory (the framework's own allocator view, NVML, the 1 GiB tensor and its holder ``kept``)
and the remedy, each figure checked against the framework's own reading (tests/gpu/session_oom.py)."""

from __future__ import annotations

import re

import pytest
from gpu_suite import part, run_session, skip_unless

from kerasmagic.tables import format_bytes

pytestmark = pytest.mark.gpu

GiB = 2**30


def _explained(record: dict) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", record["text"])
    error = text.find(record["error_class"])
    explanation = text.find(f"kerasmagic: cell [{record['execution_count']}] ran out of GPU memory")
    assert 0 <= error < explanation, text  # the original error first, whole, then ours
    return text[explanation:]


@pytest.fixture(scope="module")
def torch_seen(gpu_facts):
    skip_unless(gpu_facts, "torch")
    return run_session("session_oom.py", "oom_torch", {"KERASMAGIC_OOM_FRAMEWORK": "torch"})


@pytest.fixture(scope="module")
def jax_seen(gpu_facts):
    skip_unless(gpu_facts, "jax")
    return run_session("session_oom.py", "oom_jax", {"KERASMAGIC_OOM_FRAMEWORK": "jax",
                                                     "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})


def test_torch_out_of_memory_is_explained_below_its_error(torch_seen):
    record = part(torch_seen, "torch")
    assert (record["error_class"], record["error_module"].split(".")[0]) == ("OutOfMemoryError", "torch")
    explained = _explained(record)
    assert explained.startswith(f"kerasmagic: cell [{record['execution_count']}] ran out of GPU memory on cuda:0 "
                                "(torch OutOfMemoryError); it asked for "), explained
    # torch's own view, as torch read it right after the error.
    assert (f"{format_bytes(record['allocated'])} allocated" in explained
            and f"{format_bytes(record['reserved'])} reserved" in explained), explained
    assert record["allocated"] >= GiB  # kept's 1 GiB is still allocated: the error freed nothing of it
    assert re.search(r"\[1073741824\] on cuda:0\s+1\.00 GiB\s+kept", explained), explained
    # Named only because deleting it is proven to free the tensor (issue 29), with the figure.
    assert re.search(r"`%clear_tf kept` frees (at least )?1\.00 GiB \(measured now\)", explained), explained
    assert re.search(r"GPU 0\s+\S+ \S+ of \S+ \S+\s+NVML; this kernel", explained), explained


def test_jax_out_of_memory_is_explained_below_its_error(jax_seen):
    record = part(jax_seen, "jax")
    assert record["error_class"] in ("XlaRuntimeError", "JaxRuntimeError"), record
    assert record["error_message"].startswith("RESOURCE_EXHAUSTED"), record
    explained = _explained(record)
    assert f"(JAX {record['error_class']}); it asked for 1.00 TiB" in explained.splitlines()[0], explained
    assert f"{format_bytes(record['in_use'])} in use" in explained, explained  # JAX's own figure
    assert record["in_use"] >= GiB
    assert re.search(r"\[268435456\] on \S+\s+1\.00 GiB\s+kept", explained), explained
    # Named only because deleting it is proven to free the tensor (issue 29), with the figure.
    assert re.search(r"`%clear_tf kept` frees (at least )?1\.00 GiB \(measured now\)", explained), explained
    # XLA_PYTHON_CLIENT_PREALLOCATE=false: the pool grew on demand, and the remedy says so.
    assert "keeps what it once needed: XLA_PYTHON_CLIENT_ALLOCATOR=platform" in explained, explained
