"""Out of memory, explained below the error, in a real InteractiveShell (IPython 9, and Colab's 7.34
in .venv-colab): a real TensorFlow ResourceExhaustedError; torch's and JAX's errors and GPU
figures stand in for the GPU this machine lacks (tests/gpu/test_oom_gpu.py runs them for real)."""

from __future__ import annotations

import re
import sys
import types
from types import SimpleNamespace

import pytest

from kerasmagic import oom

from gpu_recorded import h200_session
from shell_helpers import run

pytestmark = pytest.mark.shell

MIB = 2**20
GIB = 2**30


def _plain(text: str) -> str:
    """Without colour codes: IPython 7.34 colours its tracebacks whatever ``shell.colors`` says."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _error_then_explanation(shown: str) -> tuple[int, int]:
    error = shown.find("Error")
    explanation = shown.find("kerasmagic: cell [")
    return error, explanation


@pytest.mark.frameworks
def test_a_real_tensorflow_oom_is_followed_by_what_holds_memory_and_the_remedy(shell, capsys):
    run(shell, "import numpy as np, tensorflow as tf\nbig = np.ones(16 * 2**20 // 8)")
    capsys.readouterr()
    # 2**38 floats: 1 TiB, which no allocator here can give (a real OOM of TensorFlow's CPU allocator).
    result = shell.run_cell("def grow():\n    return tf.zeros((2**38,), tf.float32)\nhuge = grow()",
                            store_history=True)
    shown = _plain(capsys.readouterr().out)
    # The user's error is the cell's, untouched, with its own traceback shown first.
    error = result.error_in_exec
    assert type(error).__name__ == "ResourceExhaustedError" and type(error).__module__.startswith("tensorflow")
    assert not result.success
    assert "ResourceExhaustedError" in shown and "OOM when allocating tensor" in shown, shown
    assert "grow()" in shown  # the traceback's own frames are there
    first_error, explanation = shown.find("ResourceExhaustedError"), shown.find("kerasmagic: cell [")
    assert 0 <= first_error < explanation, shown
    title = shown[explanation:].splitlines()[0]
    assert title == (f"kerasmagic: cell [{result.execution_count}] ran out of memory on CPU:0 (TensorFlow "
                     "ResourceExhaustedError); it asked for 1.00 TiB. What holds it, and what frees it:"), title
    assert re.search(r"ndarray\[2097152\]\s+16\.0 MiB\s+big", shown), shown
    assert "kernel RSS" in shown
    # The remedy is proven: deleting `big` frees its 16 MiB, measured when the error was explained.
    assert "`%clear_tf big` frees 16.0 MiB (measured now): it deletes only those names" in shown, shown
    # The report did not keep the error: the last exception is IPython's alone.
    assert "huge" not in shell.user_ns


def test_other_errors_get_no_explanation(shell, capsys):
    class XlaRuntimeError(RuntimeError):
        pass

    XlaRuntimeError.__module__ = "jaxlib._jax"
    shell.user_ns["XlaRuntimeError"] = XlaRuntimeError
    for cell in ("1 / 0", "raise MemoryError()", "raise XlaRuntimeError('INVALID_ARGUMENT: bad shapes')"):
        result = shell.run_cell(cell, store_history=True)
        assert result.error_in_exec is not None
        assert "kerasmagic:" not in capsys.readouterr().out, cell


def _torch_oom_class():
    # torch's own class: torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same object).
    return type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})


class _CudaTensor:
    """What the holder search reads of a torch tensor on a GPU (tensor_nbytes, tensor_device)."""

    __module__ = "torch"
    shape = (256, 2**20)
    device = "cuda:0"

    def nelement(self):
        return 256 * 2**20

    def element_size(self):
        return 4


def test_torch_oom_names_torch_cache_the_gpu_tensors_and_their_holders(shell, capsys, monkeypatch):
    from gpu_stand_ins import use_recorded

    moment = use_recorded(monkeypatch, "torch", "1 GiB more allocated and freed (cached)")
    shell.user_ns.update(OutOfMemoryError=_torch_oom_class(), weights=[_CudaTensor()], on_cpu=bytearray(10))
    result = shell.run_cell(
        "raise OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.2 GiB is free.')", store_history=True)
    shown = _plain(capsys.readouterr().out)
    error, explanation = _error_then_explanation(shown)
    assert 0 <= error < explanation, shown
    assert f"cell [{result.execution_count}] ran out of GPU memory on cuda:0 (torch OutOfMemoryError); it asked " \
           "for 20.0 GiB" in shown, shown
    torch_reading = moment["torch"]
    assert re.search(r"torch cuda:0\s+2\.00 GiB allocated\s+3\.00 GiB reserved \(1\.00 GiB held, unused\)", shown)
    assert torch_reading["reserved"] - torch_reading["allocated"] == GIB  # the row is the stand-in's reading
    assert re.search(r"GPU 0\s+3\.98 GiB of 79\.6 GiB\s+NVML; this kernel 3\.51 GiB", shown), shown
    assert re.search(r"_CudaTensor\[256, 1048576\] on cuda:0\s+1\.00 GiB\s+weights\[0\]", shown), shown
    assert "`%clear_tf weights` frees 1.00 GiB (measured now)" in shown, shown
    assert "torch's cache keeps 1.00 GiB of cuda:0 reserved but unused: `%clear_tf` hands it back" in shown
    assert "on_cpu" not in shown  # a GPU ran out: host objects are not what holds it


def test_jax_oom_names_its_preallocated_pool(shell, capsys, monkeypatch):
    from gpu_stand_ins import use_recorded

    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    use_recorded(monkeypatch, "jax default preallocation", "512 MiB array")

    class JaxRuntimeError(RuntimeError):
        pass

    JaxRuntimeError.__module__ = "jax.errors"
    shell.user_ns["JaxRuntimeError"] = JaxRuntimeError
    result = shell.run_cell("raise JaxRuntimeError('RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                            "68719476736 bytes.')", store_history=True)
    shown = _plain(capsys.readouterr().out)
    error, explanation = _error_then_explanation(shown)
    assert 0 <= error < explanation, shown
    assert f"cell [{result.execution_count}] ran out of GPU memory (JAX JaxRuntimeError); it asked for 64.0 GiB" \
        in shown, shown
    assert re.search(r"JAX gpu:0\s+512 MiB in use\s+of a 59\.4 GiB pool, limit 59\.4 GiB", shown), shown
    assert "JAX took its whole pool on gpu:0 when it started (preallocation)" in shown, shown


def test_a_wrapped_oom_is_found_through_its_cause():
    inner = _torch_oom_class()("CUDA out of memory. Tried to allocate 2.00 MiB")
    try:
        try:
            raise inner
        except RuntimeError as exc:
            raise ValueError("training failed") from exc
    except ValueError as outer:
        found = oom.recognise(outer)
    assert found is not None and (found.framework, found.asked_bytes) == ("torch", 2 * MIB)


def test_the_hook_comes_and_goes_with_the_extension(shell):
    hooks = shell.events.callbacks["post_run_cell"]
    assert hooks.count(oom._post_run_cell) == 1
    shell.run_line_magic("load_ext", "kerasmagic")
    assert shell.events.callbacks["post_run_cell"].count(oom._post_run_cell) == 1
    shell.run_line_magic("unload_ext", "kerasmagic")
    try:
        assert oom._post_run_cell not in shell.events.callbacks["post_run_cell"]
    finally:
        shell.run_line_magic("load_ext", "kerasmagic")


# ---- what a real GPU said (benchmarks/results/h200-2026-11-28) ------------------------------------------------


def _jax_error_class(record: dict) -> type:
    """The class JAX raised on the H200, by its recorded name and module (``jax.errors.JaxRuntimeError``)."""
    return type(record["error_class"], (RuntimeError,), {"__module__": record["error_module"]})


class ArrayImpl:
    """What the holder search reads of a JAX array on a GPU (tensor_nbytes, tensor_device): the H200's
    ``kept = jnp.ones((2**28,), jnp.float32)``, 1 GiB on gpu:0."""

    __module__ = "jaxlib._jax"
    shape = (2**28,)
    nbytes = 2**30

    def devices(self):
        return [SimpleNamespace(platform="gpu", id=0)]  # a set in JAX; its devices are hashable there


def _use_recorded_jax_pool(monkeypatch, record: dict) -> None:
    from gpu_stand_ins import use_jax

    use_jax(monkeypatch, {"bytes_in_use": record["in_use"], "pool_bytes": record["pool"],
                          "bytes_limit": record["limit"]})


def test_jax_real_out_of_memory_message_gives_the_size_it_asked_for(shell, capsys, monkeypatch):
    # JAX 0.11.2 on the H200 wrote "allocate 1.00TiB" (XLA's HumanReadableNumBytes), not "N bytes".
    record = h200_session("oom_jax")["jax"]
    assert "allocate 1.00TiB with allocator GPU_0_bfc" in record["error_message"]
    found = oom.recognise(_jax_error_class(record)(record["error_message"]))
    assert found is not None and found.asked_bytes == 2**40 and found.on_gpu
    _use_recorded_jax_pool(monkeypatch, record)
    shell.user_ns[record["error_class"]] = _jax_error_class(record)
    result = shell.run_cell(f"raise {record['error_class']}({record['error_message']!r})", store_history=True)
    explained = _plain(capsys.readouterr().out)
    explained = explained[explained.find("kerasmagic: cell ["):]
    # What tests/gpu/test_oom_gpu.py asks of the same message on the GPU.
    assert f"(JAX {record['error_class']}); it asked for 1.00 TiB" in explained.splitlines()[0], explained
    assert f"cell [{result.execution_count}] ran out of GPU memory" in explained.splitlines()[0]
    assert re.search(r"JAX gpu:0\s+1\.00 GiB in use\s+of a 1\.00 GiB pool, limit 105 GiB", explained), explained


@pytest.mark.parametrize(("said", "size"), [
    ("512B", 512), ("1.5KiB", 1536), ("18.09GiB", int(18.09 * GIB)), ("63.97GiB", int(63.97 * GIB)),
    ("1.00TiB", 2**40), ("85899345920 bytes.", 85899345920),
])
def test_jax_sizes_are_read_in_every_form_xla_writes(said, size):
    # tsl's HumanReadableNumBytes: "<n>B" below 1 KiB, "%.1fKiB", then "%.2f" MiB..EiB, no space; the
    # older allocator adapter: "N bytes." (sizes taken from JAX users' reports of real errors).
    error = type("JaxRuntimeError", (RuntimeError,), {"__module__": "jax.errors"})(
        f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {said} [executable_name='jit_train_step']")
    found = oom.recognise(error)
    assert found is not None and found.asked_bytes == size



def test_a_tensor_is_held_once_by_its_name_where_a_module_global_aliases_the_namespace(shell, capsys, monkeypatch):
    # tests/gpu/session_oom.py keeps `ns = shell.user_ns` as a global of its __main__ (not the shell's
    # namespace there): the H200's explanation listed `kept, __main__.ns['kept']`.
    record = h200_session("oom_jax")["jax"]
    assert "kept, __main__.ns['kept']" in record["text"]  # what the GPU run showed
    script = types.ModuleType("__main__")
    script.ns = shell.user_ns
    monkeypatch.setitem(sys.modules, "__main__", script)
    _use_recorded_jax_pool(monkeypatch, record)
    shell.user_ns.update(kept=ArrayImpl(), **{record["error_class"]: _jax_error_class(record)})
    shell.run_cell(f"raise {record['error_class']}({record['error_message']!r})", store_history=True)
    explained = _plain(capsys.readouterr().out)
    (row,) = [line for line in explained.splitlines() if "ArrayImpl[268435456] on gpu:0" in line]
    assert re.fullmatch(r"\s*ArrayImpl\[268435456\] on gpu:0\s+1\.00 GiB\s+kept", row), row
    # The remedy names the one holder, once, with what deleting it frees (proven before it is shown).
    assert "`%clear_tf kept` frees 1.00 GiB (measured now)" in explained, explained
