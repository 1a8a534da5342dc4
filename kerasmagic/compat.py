"""Every decision kerasmagic makes for an older IPython, ipykernel or ipywidgets, in one place.

Colab and Kaggle pin IPython 7.34, ipykernel 6.17 and ipywidgets 7.7 (Kaggle: 8.1), and upgrading
IPython there breaks their kernel, so kerasmagic meets them where they are. Each shim below
detects the *feature* it stands in for, never a version number, and names the version from which
the newer API is always there: when every supported stack has it, the shim goes.

| decision                               | older stack lacks it      | the shim can go once the floor is |
|----------------------------------------|---------------------------|-----------------------------------|
| :func:`output_can_be_silenced`         | IPython < 8.10            | IPython 8.10                      |
| :func:`semicolon_at_end_of_expression` | IPython < 8.10            | IPython 8.10                      |
| :func:`display_functions_module`       | IPython < 8.0             | IPython 8.0                       |
| :func:`counts_up_at_start`             | (IPython 9.8 changed it)  | IPython 9.8 (no feature to probe) |
| :func:`kernel_comm_manager`            | ipykernel < 6.18          | ipykernel 6.18                    |
| :func:`widgets_render_here`            | Colab: ipywidgets 8 only  | (Colab's frontend: colabtools#3020) |
| :func:`unsupported_stack`              | IPython < 7.34, ipykernel < 5.5.6: never run, refused in one line | |

Importing this module imports nothing beyond the standard library: each function looks at
what is loaded (or imports IPython lazily, which any caller of it already has).
"""

from __future__ import annotations

import io
import sys
import tokenize
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "COUNTS_UP_AT_START_SINCE",
    "OLDEST_SUPPORTED",
    "unsupported_stack",
    "counts_up_at_start",
    "display_functions_module",
    "kernel_comm_manager",
    "output_can_be_silenced",
    "semicolon_at_end_of_expression",
    "widgets_render_here",
]

_F = TypeVar("_F", bound=Callable[..., Any])

#: The attribute IPython >= 8.10 looks for on a magic to drop its value after a ``;``.
_SILENCED_ATTRIBUTE = "_ipython_magic_output_can_be_silenced"


def semicolon_at_end_of_expression(text: str) -> bool:
    """Whether ``text`` ends with a ``;`` (a comment after it allowed): IPython's rule for
    hiding a value.

    IPython 8.10 made this rule a static method of ``DisplayHook``; IPython 7.34 has it only
    inside ``DisplayHook.quiet()``, which reads the history instead of a string. Raises
    ``tokenize.TokenError`` or ``SyntaxError`` for text Python cannot tokenize, as IPython's does.

    Example:
        >>> semicolon_at_end_of_expression("x;  # hidden"), semicolon_at_end_of_expression("x")
        (True, False)
    """
    from IPython.core.displayhook import DisplayHook  # noqa: PLC0415 - only callers inside IPython

    ipython_rule = getattr(DisplayHook, "semicolon_at_end_of_expression", None)
    if ipython_rule is not None:
        return bool(ipython_rule(text))
    for token in reversed(list(tokenize.generate_tokens(io.StringIO(text).readline))):
        if token.type in (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            continue
        return token.type == tokenize.OP and token.string == ";"
    return False


def output_can_be_silenced(magic: _F) -> _F:
    """Mark a magic whose value a trailing ``;`` hides, as ``%timeit -o;`` does.

    On IPython >= 8.10 this is IPython's own decorator (``run_line_magic`` and
    ``run_cell_magic`` then drop the value). IPython 7.34 has neither the decorator nor the
    check (its ``DisplayHook.quiet`` sees only the transformed ``run_line_magic(...)`` call), so
    the magic itself returns ``None`` when its line (line magic) or its cell (cell magic) ends
    with ``;``.

    Example:
        >>> @output_can_be_silenced
        ... def echo(self, line, cell=None):
        ...     return line
        >>> callable(echo)
        True
    """
    from IPython.core import magic as ipython_magic  # noqa: PLC0415 - only callers inside IPython

    ipython_decorator = getattr(ipython_magic, "output_can_be_silenced", None)
    if ipython_decorator is not None:
        return ipython_decorator(magic)

    def silenced_when_asked(self: Any, line: str = "", cell: str | None = None, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # the user's traceback shows their cell, not this shim
        value = magic(self, line, cell, *args, **kwargs) if cell is not None else magic(self, line, *args, **kwargs)
        try:
            hidden = semicolon_at_end_of_expression(line if cell is None else cell)
        except (tokenize.TokenError, SyntaxError):
            hidden = False  # not Python: IPython >= 8.10 would raise here; showing the value is kinder
        return None if hidden else value

    silenced_when_asked.__name__ = magic.__name__
    silenced_when_asked.__qualname__ = magic.__qualname__
    silenced_when_asked.__doc__ = magic.__doc__
    silenced_when_asked.__wrapped__ = magic  # type: ignore[attr-defined]
    # @magic_arguments reads the parser from the function it decorates: keep what it set.
    for attribute in ("parser", "decorators"):
        if hasattr(magic, attribute):
            setattr(silenced_when_asked, attribute, getattr(magic, attribute))
    return silenced_when_asked  # type: ignore[return-value]


def display_functions_module() -> str:
    """The module that defines ``display()``: ``IPython.core.display_functions`` since IPython 8.0,
    ``IPython.core.display`` before.

    Example:
        >>> display_functions_module() in ("IPython.core.display_functions", "IPython.core.display")
        True
    """
    import importlib.util  # noqa: PLC0415 - find_spec, only when asked

    try:
        found = importlib.util.find_spec("IPython.core.display_functions") is not None
    except ModuleNotFoundError:  # no IPython at all: the newer name is as good a guess as any
        found = True
    return "IPython.core.display_functions" if found else "IPython.core.display"


#: The first IPython that counts ``execution_count`` up as a cell starts (before ``pre_run_cell``);
#: 8.x up to 9.7 count it up when the cell ends. Nothing observable before a cell runs tells the
#: two apart, so this one decision reads the version.
COUNTS_UP_AT_START_SINCE = (9, 8)


def counts_up_at_start(version_info: tuple[Any, ...] | None = None) -> bool:
    """Whether this IPython (or the one whose ``version_info`` is given) counts up as a cell starts.

    Example:
        >>> counts_up_at_start((7, 34, 0, "")), counts_up_at_start((9, 7, 0, "")), counts_up_at_start((9, 18, 1, ""))
        (False, False, True)
    """
    if version_info is None:
        ipython = sys.modules.get("IPython")
        version_info = getattr(ipython, "version_info", None)
        if version_info is None:  # no IPython, no cell: the newer behaviour is as good a guess as any
            return True
    numbers = tuple(part for part in version_info[:2] if isinstance(part, int))
    return numbers >= COUNTS_UP_AT_START_SINCE


def kernel_comm_manager(kernel: Any) -> Any:
    """The comm manager that really receives this kernel's ``comm_open`` messages.

    ipykernel >= 6.18 hands them to the ``comm`` package's manager (and sets it as
    ``kernel.comm_manager`` too); ipykernel < 6.18 has a manager of its own there and never
    looks at the ``comm`` package's, so a target registered with ``comm.get_comm_manager()`` is
    "No such comm target registered" (ipywidgets 8 has the same shim).

    Example:
        >>> class Kernel:
        ...     comm_manager = "the kernel's own"
        >>> kernel_comm_manager(Kernel())
        "the kernel's own"
    """
    manager = getattr(kernel, "comm_manager", None)
    if manager is not None:
        return manager
    import comm  # a kernel without its own manager (not ipykernel) uses the package's

    return comm.get_comm_manager()


def widgets_render_here(ipywidgets_version: str | None = None) -> tuple[bool, str]:
    """Whether this notebook's frontend renders ipywidgets, and why we think so.

    Colab renders ipywidgets 7 itself, but ipywidgets 8 only after
    ``google.colab.output.enable_custom_widget_manager()`` (colabtools#3020): that is the one
    frontend a kernel can recognise (``google.colab`` is loaded there). Everywhere else a widget
    that cannot render is noticed later, when the frontend closes its comm.

    Example:
        >>> widgets_render_here("8.1.5")[0]       # outside Colab
        True
    """
    if ipywidgets_version is None:
        try:
            import ipywidgets  # only `%tf_mem --live` asks

            ipywidgets_version = str(ipywidgets.__version__)
        except ImportError:
            return False, "ipywidgets is not installed (pip install ipywidgets)"
    if "google.colab" not in sys.modules:
        return True, f"ipywidgets {ipywidgets_version}"
    major = ipywidgets_version.split(".")[0]
    # colabtools' google/colab/output/_widgets.py keeps the custom manager's URL here once enabled.
    custom_manager = getattr(sys.modules.get("google.colab.output._widgets"), "_installed_url", None)
    if major.isdigit() and int(major) >= 8 and not custom_manager:
        return False, (f"Colab renders ipywidgets {ipywidgets_version} only after "
                       "google.colab.output.enable_custom_widget_manager()")
    return True, f"ipywidgets {ipywidgets_version} in Colab"


#: The oldest of each package kerasmagic loads on: Colab's pins (tests/stacks/colab-pins.txt) for
#: IPython. ipykernel 5.5.6 ran Colab until 2025-02; it is let load, untested (CI's oldest is 6.17.1,
#: whose comm manager it shares).
OLDEST_SUPPORTED = {"IPython": (7, 34), "ipykernel": (5, 5, 6)}


def _numbers(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("."):
        digits = "".join(ch for ch in part if ch.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def unsupported_stack(versions: dict[str, str] | None = None) -> str | None:
    """One line saying what to upgrade when IPython or ipykernel is older than kerasmagic supports
    (None when all is well): ``%load_ext`` prints it instead of failing inside our code.

    The shims above cover what changed since these versions; older ones were never run, so the
    line names the version to install rather than let an unknown API fail half-way.

    Example:
        >>> print(unsupported_stack({"IPython": "7.33.0", "ipykernel": "6.17.1"}))
        kerasmagic needs IPython >= 7.34 (this kernel has 7.33.0): pip install -U 'IPython>=7.34' and restart
        >>> unsupported_stack({"IPython": "7.34.0", "ipykernel": "6.17.1"}) is None
        True
    """
    if versions is None:
        versions = {}
        for name in OLDEST_SUPPORTED:
            module = sys.modules.get(name)
            if module is not None:
                versions[name] = str(getattr(module, "__version__", ""))
    for name, oldest in OLDEST_SUPPORTED.items():
        have = versions.get(name)
        if have and _numbers(have) and _numbers(have) < oldest:
            wanted = ".".join(map(str, oldest))
            return (f"kerasmagic needs {name} >= {wanted} (this kernel has {have}): "
                    f"pip install -U '{name}>={wanted}' and restart")
    return None
