"""``fresh_model()`` / ``%%fresh_model``: clean the session, then measure the block that follows."""

from __future__ import annotations

import sys
from typing import Any, Literal

from . import events
from .clean import CleanReport, clear_tf
from .holders import running_shell
from .measuring import CellMeasurement, measure
from .tables import Report, Section, format_bytes

__all__ = ['FreshModelResult', 'fresh_model']


class FreshModelResult(Report):
    """The clean that ran before a block and the measurement of the block itself.

    Example:
        >>> from kerasmagic import fresh_model
        >>> with fresh_model(seed=0) as result:          # doctest: +SKIP
        ...     model = build_and_fit()
        >>> result.clean.models_freed, result.cell.rss_peak_above_start_bytes   # doctest: +SKIP
        (1, 52428800)
    """

    def __init__(self, clean: CleanReport, cell: CellMeasurement) -> None:
        self.clean = clean
        self.cell = cell
        self.hints: list[str] = []

    def to_dict(self) -> dict[str, Any]:
        return {"clean": self.clean.to_dict(), "cell": self.cell.to_dict(), "hints": list(self.hints)}

    def _title(self) -> str:
        return f"kerasmagic: fresh model — {self.cell._title().removeprefix('kerasmagic: ')}"

    def _sections(self) -> list[Section]:
        before = Section("Clean before the cell")
        before.add(
            "freed",
            format_bytes(-self.clean.rss_freed_bytes, signed=True),
            f"RSS, in {self.clean.seconds:.2f} s; "
            + (f"{self.clean.models_freed} of {self.clean.models_tracked} models freed"
               + (f" ({self.clean.models_unreachable} of them held by nothing of the notebook)"
                  if self.clean.models_unreachable else "")
               if self.clean.models_tracked else "no model was alive"),
        )
        if self.clean.gpu_freed_bytes is not None:
            before.add("GPU freed", format_bytes(-self.clean.gpu_freed_bytes, signed=True),
                       "this process, NVML, all devices")
        if self.clean.registry is not None and self.clean.registry.purged:
            before.add("gradient registry", f"{self.clean.registry.purged} purged", "dead CustomGradient entries")
        before.notes.extend(f"dropped {item}" for item in self.clean.dropped)
        cell = self.cell._sections()
        # A sentence the cell's sections already give (why TF has no CPU figures) is said once.
        said = {note.removeprefix("n/a: ") for section in cell for note in section.notes}
        held = Section("Still held before the cell")
        held.notes.extend(item for item in self.clean.still_held if item not in said)
        hints = Section("Hints")
        hints.notes.extend(self.hints)
        return [before, *cell, held, hints]


class fresh_model:  # noqa: N801 - used like a function: `with fresh_model():`
    """Clean the session (``clear_tf``), then measure the block; the report is filled even if it raises.

    Args:
        *names: variables to delete before the block (e.g. the previous ``model``).
        seed: ``keras.utils.set_random_seed(seed)`` after the clean, so the block is repeatable.
        purge_hidden: drop output-cache entries and the last exception (default True).
        purge_registry: purge dead TensorFlow gradient-registry entries (default True).
        clear_jax_caches: also clear JAX's compiled functions (default False; see ``clear_tf``).
        shell: the IPython shell (default: the running one, if any).
        namespace: where ``names`` live when there is no shell (default: the calling
            module's globals; pass ``locals()`` or your own dict from inside a function).
        label: the name the report gives the block.

    Example:
        >>> from kerasmagic import fresh_model
        >>> for fold in range(5):                               # doctest: +SKIP
        ...     with fresh_model(seed=fold) as result:
        ...         model = make_model(); model.fit(x[fold], y[fold])
        ...     print(result.cell.rss_delta_bytes)
    """

    def __init__(
        self,
        *names: str,
        seed: int | None = None,
        purge_hidden: bool = True,
        purge_registry: bool = True,
        clear_jax_caches: bool = False,
        shell=None,
        namespace: dict[str, Any] | None = None,
        label: str = "cell",
    ) -> None:
        self._clean_args = dict(
            shell=shell, seed=seed, purge_hidden=purge_hidden, purge_registry=purge_registry, namespace=namespace,
            clear_jax_caches=clear_jax_caches,
        )
        self._names = names
        self._label = label
        self._measure: measure | None = None
        self.result: FreshModelResult | None = None

    def __enter__(self) -> FreshModelResult:
        namespace = self._clean_args["namespace"]
        if namespace is None and self._clean_args["shell"] is None:
            if running_shell() is None:
                # A script: names live in the caller's module globals.
                self._clean_args["namespace"] = sys._getframe(1).f_globals
        clean = clear_tf(*self._names, **self._clean_args)
        # The block's new models are looked for where its names live (no shell: a script).
        self._measure = measure(self._label, namespace=self._clean_args["namespace"])
        cell = self._measure.__enter__()
        self.result = FreshModelResult(clean, cell)
        return self.result

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if self._measure is not None:
            self._measure.__exit__(exc_type, exc, tb)
        if self.result is not None:  # set by __enter__
            events.publish("fresh_model", self.result.to_dict())
        return False
