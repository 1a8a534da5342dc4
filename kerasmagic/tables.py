"""Rendering reports as aligned text (terminals) and HTML tables (notebooks)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from .probes.availability import Unavailable

__all__ = ['Report', 'Section', 'format_bytes', 'format_value', 'render_html', 'render_text']

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(value: Any, signed: bool = False) -> str:
    """Human-readable bytes; ``Unavailable`` renders as its reason.

    Example:
        >>> format_bytes(3 * 2**30), format_bytes(-5 * 2**20, signed=True), format_bytes(None)
        ('3.00 GiB', '-5.00 MiB', '—')
    """
    if isinstance(value, Unavailable):
        return str(value)
    if value is None:
        return "—"
    number = float(value)
    sign = ""
    if signed:
        sign = "+" if number > 0 else ("-" if number < 0 else "±")
    elif number < 0:
        sign = "-"
    number = abs(number)
    unit = 0
    while number >= 1024 and unit < len(_UNITS) - 1:
        number /= 1024
        unit += 1
    if unit == 0:
        return f"{sign}{int(number)} B"
    digits = 2 if number < 10 else (1 if number < 100 else 0)
    return f"{sign}{number:.{digits}f} {_UNITS[unit]}"


def format_value(value: Any) -> str:
    """A probe value as text: floats to 3 significant digits, ``Unavailable`` as its reason.

    Example:
        >>> format_value(41.66666), format_value(None), format_value(7)
        ('41.7', '—', '7')
    """
    if isinstance(value, Unavailable):
        return str(value)
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


@dataclass
class Section:
    """A titled block of (label, value, source) rows; ``source`` says whose number it is."""

    title: str
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, label: str, value: str, source: str = "") -> None:
        self.rows.append((label, value, source))

    def add_missing(self, label: str, why: Unavailable, source: str = "") -> None:
        """A figure that is missing for a reason worth a sentence: ``n/a`` in its row (the
        columns stay narrow), the sentence once below the section, however many rows share it.

        Example:
            >>> s = Section("TensorFlow")
            >>> s.add_missing("CPU:0 in use", Unavailable("not_supported", "no statistics: set X=1"), "TF allocator")
            >>> s.add_missing("CPU:0 peak", Unavailable("not_supported", "no statistics: set X=1"))
            >>> s.rows, s.notes
            ([('CPU:0 in use', 'n/a', 'TF allocator; why below'), ('CPU:0 peak', 'n/a', 'why below')], \
['n/a: no statistics: set X=1'])
        """
        self.rows.append((label, "n/a", f"{source}; why below" if source else "why below"))
        note = f"n/a: {why.detail or why.reason.replace('_', ' ')}"
        if note not in self.notes:
            self.notes.append(note)


def render_text(title: str, sections: list[Section]) -> str:
    """Sections as aligned plain text, for terminals and logs.

    Example:
        >>> s = Section("Process"); s.add("RSS", "1.00 GiB", "kernel (/proc)")
        >>> print(render_text("tf_mem", [s]))
        tf_mem
        Process
          RSS  1.00 GiB  kernel (/proc)
    """
    label_width = max((len(r[0]) for s in sections for r in s.rows), default=0)
    value_width = max((len(r[1]) for s in sections for r in s.rows), default=0)
    lines = [title]
    for section in sections:
        if not section.rows and not section.notes:
            continue
        lines.append(section.title)
        for label, value, source in section.rows:
            line = f"  {label:<{label_width}}  {value:<{value_width}}"
            if source:
                line += f"  {source}"
            lines.append(line.rstrip())
        lines.extend(f"  · {note}" for note in section.notes)
    return "\n".join(lines)


def render_html(title: str, sections: list[Section]) -> str:
    """Sections as one HTML table; every string is escaped (values come from user objects)."""
    esc = html.escape
    parts = [
        '<div class="kerasmagic-report">',
        f"<strong>{esc(title)}</strong>",
        '<table style="border-collapse:collapse;font-size:90%">',
    ]
    for section in sections:
        if not section.rows and not section.notes:
            continue
        parts.append(
            f'<tr><th colspan="3" style="text-align:left;padding-top:6px">{esc(section.title)}</th></tr>'
        )
        for label, value, source in section.rows:
            parts.append(
                f'<tr><td style="text-align:left;padding:1px 10px">{esc(label)}</td>'
                f'<td style="text-align:right;padding:1px 10px;font-family:monospace">{esc(value)}</td>'
                f'<td style="text-align:left;color:#777;padding:1px 10px">{esc(source)}</td></tr>'
            )
        for note in section.notes:
            parts.append(f'<tr><td colspan="3" style="text-align:left;padding:1px 10px">· {esc(note)}</td></tr>')
    parts.append("</table></div>")
    return "".join(parts)


class Report:
    """Mixin for result objects: text for terminals, HTML for notebooks, both from sections."""

    def _title(self) -> str:
        raise NotImplementedError

    def _sections(self) -> list[Section]:
        raise NotImplementedError

    def __str__(self) -> str:
        return render_text(self._title(), self._sections())

    def _repr_html_(self) -> str:
        return render_html(self._title(), self._sections())

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))
