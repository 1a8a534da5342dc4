"""Out of memory, explained: when a cell fails because TensorFlow, torch or JAX ran out of (GPU)
memory, say what holds that memory and what frees it, right below the original error.

Recognised without importing any framework, by the exception's class name, module and message
(walking ``__cause__``/``__context__``, as a wrapper may re-raise):

- TensorFlow: ``tensorflow.python.framework.errors_impl.ResourceExhaustedError`` ("OOM when
  allocating tensor with shape[...] ... on .../device:GPU:0"), on a GPU or on the CPU;
- torch: ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` is the same class), and
  the ``RuntimeError("CUDA out of memory...")`` of torch before 1.13;
- JAX: ``XlaRuntimeError`` / ``JaxRuntimeError`` whose message starts ``RESOURCE_EXHAUSTED``.

The hook is IPython's ``post_run_cell`` event reading ``result.error_in_exec``: IPython has shown
the error with its own traceback by then (on IPython 9 and on Colab's 7.34 alike, checked in real
shells), so the explanation comes after it and hides nothing; IPython's one custom-exception slot
(``set_custom_exc``) would replace the traceback display instead, and is the user's to take.

What holds the memory comes from the probes (NVML per device, and each framework's own allocator
view: TensorFlow in use, torch allocated/reserved, JAX in use/pool/limit) and from the holder
search (``collect_heavy``): models and large tensors with the names that keep them, the failed
call's frames included (the error keeps them alive until the next one).
"""

from __future__ import annotations

import logging
import math
import re
import sys
from dataclasses import dataclass
from typing import Any

from .holders import collect_heavy, tensor_device
from .probes import jax_devices as jax_probe
from .probes import process as process_probe
from .probes.availability import guarded
from .probes.sample import gpu_part, jax_part, tf_part, torch_part
from .remedies import Proof, prove
from .tables import Report, Section, format_bytes

__all__ = ['OomReport', 'OutOfMemory', 'explain', 'recognise', 'start', 'stop']

logger = logging.getLogger(__name__)

#: Bytes per element of the dtypes TensorFlow names in "OOM when allocating tensor ... and type X".
_TF_DTYPE_BYTES = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int16": 2,
                   "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1, "complex64": 8,
                   "complex128": 16}
#: Other processes holding more than this share of a GPU are worth a line (another kernel, a server).
_OTHERS_SHARE = 0.10
#: A framework's pool keeping at least this much unused is worth a remedy of its own.
_POOL_WORTH_BYTES = 64 * 2**20
#: Models and large objects listed, largest first.
_LISTED = 8


@dataclass(frozen=True)
class OutOfMemory:
    """An out-of-memory error a framework raised, as recognised from its class and message.

    Example:
        >>> oom = recognise(RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has ..."))
        >>> oom.framework, oom.device, oom.asked_bytes == 20 * 2**30
        ('torch', 'cuda:0', True)
    """

    framework: str  # TensorFlow, torch, JAX
    error: str  # the class's name, e.g. ResourceExhaustedError
    device: str | None  # GPU:0, cuda:0, gpu:0, CPU:0; None where the message names none
    asked_bytes: int | None  # what the failed allocation asked for, where the message says
    message: str  # the error's first line, cut to 300 characters

    @property
    def on_gpu(self) -> bool:
        """Whether the memory that ran out is a GPU's (an unnamed device counts as one for torch and JAX)."""
        if self.device is None:
            return self.framework in ("torch", "JAX")
        return not self.device.upper().startswith("CPU")


def _first_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= 300 else line[:299] + "…"


#: The units frameworks write sizes in: torch "Tried to allocate 279.60 GiB"; XLA (JAX) "allocate
#: 1.00TiB" as tsl's HumanReadableNumBytes writes it (binary units, no space: "512B", "1.5KiB",
#: "18.09GiB", up to "EiB"; never "KB" or "GB") and, in its older allocator adapter, "allocate 1024 bytes".
_UNIT = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
_SIZE = r"([\d.]+) ?(" + "|".join(_UNIT) + r")\b"


def _asked_bytes(lead: str, text: str) -> int | None:
    """The size after ``lead`` in an error message, in bytes (``"allocate"``, ``"1.00TiB"`` → 2**40);
    None where the message gives none. Rounded as the message is: XLA prints two decimals.

    Example:
        >>> _asked_bytes("allocate", "Out of memory while trying to allocate 1.00TiB with allocator GPU_0_bfc")
        1099511627776
        >>> _asked_bytes("allocate", "Out of memory while trying to allocate 1024 bytes.")
        1024
    """
    found = re.search(re.escape(lead) + " " + _SIZE, text)
    if found is None:
        return None
    try:
        return int(float(found.group(1)) * _UNIT[found.group(2)])
    except ValueError:  # "1.2.3": not a number after all
        return None


def _recognise_one(exc: BaseException) -> OutOfMemory | None:
    kind = type(exc)
    name, root = kind.__name__, (kind.__module__ or "").split(".", 1)[0]
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises is not ours to explain
        return None
    if root == "tensorflow" and (name == "ResourceExhaustedError" or "OOM when allocating" in text):
        device = re.search(r"device:([A-Z]+:\d+)", text)
        asked = None
        shape = re.search(r"OOM when allocating tensor with shape\[([\d,\s]*)\] and type (\w+)", text)
        if shape and shape.group(2) in _TF_DTYPE_BYTES:
            dims = [int(d) for d in shape.group(1).replace(" ", "").split(",") if d]
            asked = math.prod(dims) * _TF_DTYPE_BYTES[shape.group(2)]
        return OutOfMemory("TensorFlow", name, device.group(1) if device else None, asked, _first_line(text))
    torch_oom = root == "torch" and name == "OutOfMemoryError"
    # torch before 1.13 raised a plain RuntimeError; the driver's own "CUDA error: out of memory" too.
    old_torch = name == "RuntimeError" and ("CUDA out of memory" in text or "CUDA error: out of memory" in text)
    if torch_oom or old_torch:
        gpu = re.search(r"GPU (\d+) has ", text)
        return OutOfMemory("torch", name, f"cuda:{gpu.group(1)}" if gpu else None,
                           _asked_bytes("Tried to allocate", text), _first_line(text))
    if root in ("jax", "jaxlib") and name in ("XlaRuntimeError", "JaxRuntimeError") and (
            text.lstrip().startswith("RESOURCE_EXHAUSTED")):
        device = re.search(r"\b(gpu|cuda|tpu):(\d+)", text, re.IGNORECASE)
        return OutOfMemory("JAX", name, f"{device.group(1).lower()}:{device.group(2)}" if device else None,
                           _asked_bytes("allocate", text), _first_line(text))
    return None


def recognise(exc: BaseException | None) -> OutOfMemory | None:
    """The out-of-memory error in ``exc`` or the exceptions it was raised from; None if there is none.

    Judged by class name, module and message: no framework is imported to ask.

    Example:
        >>> recognise(ValueError("shapes do not match")) is None
        True
        >>> class XlaRuntimeError(RuntimeError): pass
        >>> XlaRuntimeError.__module__ = "jaxlib._jax"
        >>> recognise(XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1024 bytes."))
        ... # doctest: +ELLIPSIS
        OutOfMemory(framework='JAX', error='XlaRuntimeError', device=None, asked_bytes=1024, message=...)
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 10:
        seen.add(id(exc))
        found = _recognise_one(exc)
        if found is not None:
            return found
        exc = exc.__cause__ or exc.__context__
    return None


# ---- what holds the memory -----------------------------------------------------------------------------


def _devices(part: Any) -> dict[str, dict[str, Any]]:
    devices = part.get("devices") if isinstance(part, dict) else None
    return devices if isinstance(devices, dict) else {}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _holder_text(where: str) -> str:
    """A holder as a user reads it: the last exception's frames said in a few words."""
    if where.startswith("last exception"):
        local = re.search(r"frame (\S+) local ('[^']*')", where)
        return f"the error's frame {local.group(1)} local {local.group(2)}" if local else "the last error"
    return where


def _names_to_clear(holders: list[Any]) -> list[str]:
    names: list[str] = []
    for holder in holders:
        if holder.kind not in ("variable", "history"):
            continue
        root = holder.where.split("[", 1)[0].split(".", 1)[0]
        if root.isidentifier() and root not in names:
            names.append(root)
    return names


class OomReport(Report):
    """What holds memory when a cell ran out of it, and what frees it (printed below the error).

    ``to_dict()``: ``framework``, ``error``, ``device``, ``asked_bytes``, ``gpus`` (NVML per
    device), ``allocators`` (each framework's view), ``objects`` (models and large tensors, each
    with ``holders``), ``remedies``.

    Example:
        >>> report = explain(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), shell=None)
        >>> print(report)                   # doctest: +SKIP
        kerasmagic: torch ran out of GPU memory (cuda:?) ...
    """

    def __init__(self, oom: OutOfMemory, cell: str, gpus: list[dict[str, Any]], allocators: list[tuple[str, str, str]],
                 host: list[tuple[str, str, str]], objects: list[dict[str, Any]], remedies: list[str],
                 evidence: dict[str, Any] | None = None) -> None:
        self.oom = oom
        #: What the first remedy frees, measured when the error was explained (``Proof.to_dict()``).
        self.evidence = evidence
        self.cell = cell
        self.gpus = gpus
        self.allocators = allocators
        self.host = host
        self.objects = objects
        self.remedies = remedies

    def _title(self) -> str:
        where = "GPU memory" if self.oom.on_gpu else "memory"
        device = f" on {self.oom.device}" if self.oom.device else ""
        asked = f"; it asked for {format_bytes(self.oom.asked_bytes)}" if self.oom.asked_bytes else ""
        return (f"kerasmagic: {self.cell} ran out of {where}{device} ({self.oom.framework} "
                f"{self.oom.error}){asked}. What holds it, and what frees it:")

    def _sections(self) -> list[Section]:
        sections = []
        memory = Section("GPU memory now" if self.oom.on_gpu else "Memory now")
        for gpu in self.gpus:
            used = f"{format_bytes(gpu['used_bytes'])} of {format_bytes(gpu['total_bytes'])}"
            memory.add(f"GPU {gpu['index']}", used, f"NVML; this kernel {format_bytes(gpu.get('process_used_bytes'))}")
        for row in [*self.allocators, *([] if self.oom.on_gpu else self.host)]:
            memory.add(*row)
        if not memory.rows:
            memory.notes.append("no allocator figures here (no NVIDIA driver, or the framework keeps none)")
        sections.append(memory)
        held = Section("Models and large tensors, and who holds them")
        for item in self.objects:
            held.add(item["label"], format_bytes(item["bytes"]), ", ".join(item["holders"][:4])
                     + (f" and {len(item['holders']) - 4} more" if len(item["holders"]) > 4 else ""))
        if not held.rows:
            held.notes.append("none reachable from the notebook (variables, Out[], histories, the last error)")
        sections.append(held)
        remedy = Section("What frees it")
        remedy.notes.extend(self.remedies)
        sections.append(remedy)
        return sections

    def to_dict(self) -> dict[str, Any]:
        return {
            "framework": self.oom.framework, "error": self.oom.error, "device": self.oom.device,
            "asked_bytes": self.oom.asked_bytes, "message": self.oom.message, "on_gpu": self.oom.on_gpu,
            "gpus": [dict(g) for g in self.gpus],
            "allocators": [{"label": a, "value": b, "source": c} for a, b, c in self.allocators],
            "objects": [dict(o) for o in self.objects], "remedies": list(self.remedies),
            "remedy_evidence": self.evidence,
        }


def _allocator_rows() -> tuple[list[tuple[str, str, str]], dict[str, Any]]:
    """Each framework's own view, as rows, and the figures the remedies are chosen by."""
    rows: list[tuple[str, str, str]] = []
    facts: dict[str, Any] = {"torch_unused": {}, "jax_stories": {}, "tf_gpu": False}
    for device, stats in _devices(guarded(tf_part, "reading TensorFlow's allocator")).items():
        if _number(stats.get("in_use_bytes")):
            facts["tf_gpu"] = facts["tf_gpu"] or "GPU" in device
            peak = stats.get("peak_bytes")
            rows.append((f"TF {device} in use", format_bytes(stats["in_use_bytes"]),
                         "TensorFlow's allocator" + (f"; peak {format_bytes(peak)}" if _number(peak) else "")))
    for device, stats in _devices(guarded(torch_part, "reading torch's allocator")).items():
        allocated, reserved = stats.get("allocated_bytes"), stats.get("reserved_bytes")
        if isinstance(allocated, int) and isinstance(reserved, int):
            unused = max(reserved - allocated, 0)
            rows.append((f"torch {device}", f"{format_bytes(allocated)} allocated",
                         f"{format_bytes(reserved)} reserved ({format_bytes(unused)} held, unused)"))
            facts["torch_unused"][device] = unused
    jax = guarded(jax_part, "reading JAX's allocator")
    preallocation = jax.get("preallocation", "") if isinstance(jax, dict) else ""
    for device, stats in _devices(jax).items():
        if _number(stats.get("in_use_bytes")):
            pool, limit = format_bytes(stats.get("pool_bytes")), format_bytes(stats.get("limit_bytes"))
            in_use = format_bytes(stats["in_use_bytes"])
            rows.append((f"JAX {device}", f"{in_use} in use", f"of a {pool} pool, limit {limit}"))
            facts["jax_stories"][device] = jax_probe.pool_story(stats, preallocation)
    return rows, facts


def _host_rows() -> list[tuple[str, str, str]]:
    rows = [("kernel RSS", format_bytes(guarded(process_probe.rss_bytes, "reading RSS")), "this process")]
    host = guarded(process_probe.host_memory, "reading the host's memory")
    if isinstance(host, dict) and _number(host.get("available_bytes")):
        rows.append(("available", format_bytes(host["available_bytes"]), "the machine's (or the container's) memory"))
    return rows


def _objects(shell: Any, on_gpu: bool) -> list[dict[str, Any]]:
    """The holder search's models and large tensors, with their holders; on a GPU only what lives
    there (models, whose weights the framework put on the device, and tensors on a GPU)."""
    if shell is None:
        return []
    found = []
    for item in collect_heavy(shell):
        if on_gpu and item.info.get("kind") != "model" and tensor_device(item.obj) is None:
            continue
        holders = list(dict.fromkeys(_holder_text(h.where) for h in item.holders))
        found.append({"label": item.info.get("label", "?"), "bytes": item.info.get("bytes"), "holders": holders,
                      "names": _names_to_clear(item.holders),
                      "in_error": any(h.kind == "exception" for h in item.holders)})
        if len(found) >= _LISTED:
            break
    return found


def _remedies(oom: OutOfMemory, gpus: list[dict[str, Any]], facts: dict[str, Any],
              objects: list[dict[str, Any]], proof: Proof | None = None) -> list[str]:
    remedies: list[str] = []
    in_error = any(item["in_error"] for item in objects)
    if proof is not None and proof.named is not None:
        # Only names proven to free a real share of what is held (issue 29): never one that frees nothing.
        remedies.append(f"`{proof.named.command}` {proof.named.phrase()} (measured now): it deletes only those "
                        "names, drops the output cache and this error's frames, and clears the Keras session; then "
                        "run the cell again once you no longer need them.")
    elif proof is not None and (in_error or objects):
        remedies.append(f"{proof.sentence()} It drops the output cache and this error's frames (they keep the failed "
                        "call's tensors alive) and clears the Keras session; then run the cell again.")
    elif in_error or objects:
        remedies.append("`%clear_tf` drops the output cache and this error's frames (they keep the failed call's "
                        "tensors alive) and clears the Keras session; then run the cell again.")
    for device, unused in facts["torch_unused"].items():
        if unused >= _POOL_WORTH_BYTES:
            remedies.append(f"torch's cache keeps {format_bytes(unused)} of {device} reserved but unused: "
                            "`%clear_tf` hands it back (torch.cuda.empty_cache()).")
    if oom.framework == "torch" and oom.on_gpu:
        remedies.append("If torch reserves much more than it allocates (fragmentation), start a new kernel with "
                        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
    for device, story in facts["jax_stories"].items():
        if story.startswith("preallocated"):
            remedies.append(f"JAX took its whole pool on {device} when it started (preallocation): a new kernel "
                            "with XLA_PYTHON_CLIENT_PREALLOCATE=false, or `%%fresh_model --isolate` with "
                            "--env XLA_PYTHON_CLIENT_PREALLOCATE=false, takes only what is used.")
        elif story.startswith("grown"):
            remedies.append(f"JAX's pool on {device} keeps what it once needed: "
                            "XLA_PYTHON_CLIENT_ALLOCATOR=platform in a new process gives memory back as it is freed.")
    if oom.framework == "TensorFlow" and oom.on_gpu:
        remedies.append("TensorFlow keeps the GPU memory it took until the process ends (what %clear_tf frees is "
                        "reused by TensorFlow, not returned to the GPU): `%%fresh_model --isolate` runs the cell in a "
                        "new process that returns all of it when the cell ends.")
    for gpu in gpus:
        others = gpu["used_bytes"] - (gpu.get("process_used_bytes") or 0)
        if _number(gpu.get("process_used_bytes")) and others > _OTHERS_SHARE * gpu["total_bytes"]:
            remedies.append(f"Other processes hold {format_bytes(others)} of GPU {gpu['index']} (another kernel? "
                            "nvidia-smi lists them): stop or clear them there.")
    remedies.append("Or ask for less at once: a smaller batch size (activations grow with it) or a smaller model.")
    return remedies


def explain(exc: BaseException | None, shell: Any = None, execution_count: int | None = None) -> OomReport | None:
    """What holds memory after ``exc``, if it is a framework's out-of-memory error; else None.

    Reads the probes (nothing is started: a framework not running has no figures) and the holder
    search; never raises (a figure that cannot be read is left out).

    Example:
        >>> explain(ValueError("not memory")) is None
        True
        >>> report = explain(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
        >>> report.to_dict()["framework"], report.to_dict()["asked_bytes"] == 2 * 2**30
        ('torch', True)
    """
    oom = recognise(exc)
    if oom is None:
        return None
    gpus_read = guarded(gpu_part, "reading NVML") if oom.on_gpu or "pynvml" in sys.modules else []
    gpus = [g for g in gpus_read if isinstance(g, dict) and _number(g.get("used_bytes"))] \
        if isinstance(gpus_read, list) else []
    rows, facts = _allocator_rows()
    objects = guarded(lambda: _objects(shell, oom.on_gpu), "finding holders")
    objects = objects if isinstance(objects, list) else []
    cell = f"cell [{execution_count}]" if isinstance(execution_count, int) else "the cell"
    names = list(dict.fromkeys(name for item in objects for name in item["names"]))
    held = sum(item["bytes"] or 0 for item in objects)
    proof = guarded(lambda: prove(shell, held, names), "measuring what a clean frees") if shell is not None else None
    proof = proof if isinstance(proof, Proof) else None
    return OomReport(oom, cell, gpus, rows, _host_rows(), objects, _remedies(oom, gpus, facts, objects, proof),
                     proof.to_dict() if proof is not None else None)


# ---- the hook ----------------------------------------------------------------------------------------------

_hooked: tuple[Any, Any] | None = None


def _post_run_cell(result: Any = None) -> None:
    """IPython hook: after a cell that ran out of memory, print the explanation below its error."""
    error = getattr(result, "error_in_exec", None)
    if error is None:
        return
    try:
        report = explain(error, _hooked[0] if _hooked else None, getattr(result, "execution_count", None))
    except Exception:  # the explanation must never add an error of its own to the user's
        logger.debug("kerasmagic.oom: explaining an out-of-memory error failed", exc_info=True)
        return
    finally:
        del error  # the error (and its frames) stay IPython's to keep, not ours
    if report is not None:
        print(report, flush=True)


def start(shell: Any) -> None:
    """Explain out-of-memory errors of ``shell``'s cells (what ``%load_ext kerasmagic`` does); idempotent.

    Example:
        >>> start(get_ipython())          # doctest: +SKIP
    """
    global _hooked
    if _hooked is not None and _hooked[0] is shell:
        return
    stop()
    shell.events.register("post_run_cell", _post_run_cell)
    _hooked = (shell, _post_run_cell)


def stop() -> None:
    """Stop explaining (what ``%unload_ext kerasmagic`` does)."""
    global _hooked
    hooked, _hooked = _hooked, None
    if hooked is not None:
        try:
            hooked[0].events.unregister("post_run_cell", hooked[1])
        except ValueError:
            pass  # someone unregistered it already
