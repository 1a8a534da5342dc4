"""Which names in a notebook's namespace are IPython's own, not the user's variables.

One table and one check for every part of kerasmagic that must tell them apart:
``%tf_mem --who`` lists only the user's variables, ``%%fresh_model --isolate`` sends only
the user's variables to its worker, and ``%clear_tf NAME`` / ``-o VAR`` refuse to delete or
overwrite a name IPython needs (without ``_oh`` every later cell with a value fails,
without ``_dh`` ``%cd`` fails, without ``get_ipython`` every magic fails).

Importing this module imports neither IPython nor a framework.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

__all__ = ['IPYTHON_NAMES', 'OUTPUT_CACHE_ALIASES', 'ipython_machinery_role', 'ipython_role', 'is_ipython_name',
           'is_output_cache_name', 'new_variable_name_problem']

#: ``_``, ``__`` and ``___``: IPython's last three outputs.
OUTPUT_CACHE_ALIASES = ("_", "__", "___")

#: The names IPython puts into every user namespace, and what IPython keeps in each.
IPYTHON_NAMES: dict[str, str] = {
    "In": "its input history",
    "Out": "its output history",
    "_ih": "its input history",
    "_oh": "its output history",
    "_dh": "its directory history, used by %cd",
    "_sh": "its shadow namespace",
    "get_ipython": "every magic and !command calls it",
    "exit": "its exit command",
    "quit": "its exit command",
    "_": "its last output",
    "__": "its second-to-last output",
    "___": "its third-to-last output",
    "_i": "its last input",
    "_ii": "its second-to-last input",
    "_iii": "its third-to-last input",
    "__builtins__": "Python's builtins",
    "__builtin__": "Python's builtins",
    "__name__": "the module name '__main__'",
}

_OUTPUT_NAME = re.compile(r"_[0-9]+")  # _12: Out[12]
_INPUT_NAME = re.compile(r"_i[0-9]+")  # _i12: In[12]
#: The history shortcuts IPython rewrites after every cell, ``_N`` and ``_iN`` aside.
_HISTORY_SHORTCUTS = frozenset({*OUTPUT_CACHE_ALIASES, "_i", "_ii", "_iii"})


def is_output_cache_name(name: str) -> bool:
    """``_``, ``__``, ``___`` and ``_N``: where IPython's output cache puts displayed values.

    Example:
        >>> is_output_cache_name("_12"), is_output_cache_name("_model")
        (True, False)
    """
    return name in OUTPUT_CACHE_ALIASES or _OUTPUT_NAME.fullmatch(name) is not None


def ipython_role(name: str) -> str | None:
    """What IPython keeps in ``name`` (in words), or None when the name is free for the user.

    The table, the history shortcuts ``_N`` / ``_iN``, and dunder names such as ``__name__``.

    Example:
        >>> ipython_role("_oh"), ipython_role("_i3"), ipython_role("model")
        ('its output history', 'its input 3', None)
    """
    if name in IPYTHON_NAMES:
        return IPYTHON_NAMES[name]
    if _OUTPUT_NAME.fullmatch(name):
        return f"its output {name[1:]}"
    if _INPUT_NAME.fullmatch(name):
        return f"its input {name[2:]}"
    if len(name) > 4 and name.startswith("__") and name.endswith("__"):
        return "a module attribute IPython and Python set"
    return None


def ipython_machinery_role(name: str) -> str | None:
    """What IPython keeps in ``name`` when a cell that rebinds it would break IPython itself;
    None for the user's names and for the history shortcuts.

    ``_oh`` (every later cell with a value fails), ``_dh`` (``%cd``), ``get_ipython`` (every
    magic), ``In``/``Out``, dunders... The shortcuts ``_``, ``_i``, ``_N``, ``_iN`` are not: a
    cell binds ``_`` as a throwaway (``for _ in range(3)``), and IPython copes with that (it
    stops updating a ``_`` the user bound) and rewrites the others after every cell.

    Example:
        >>> ipython_machinery_role("_oh"), ipython_machinery_role("_"), ipython_machinery_role("_i3")
        ('its output history', None, None)
    """
    if name in _HISTORY_SHORTCUTS or _OUTPUT_NAME.fullmatch(name) or _INPUT_NAME.fullmatch(name):
        return None
    return ipython_role(name)


def is_ipython_name(name: str, shell: Any = None) -> bool:
    """True for IPython's own names: the table, ``_N``/``_iN``, dunders, and, given the shell,
    any name still bound to what IPython put there itself (its ``user_ns_hidden``, e.g. ``open``).

    A name the user defined, ``_private`` and ``__private`` ones included, is not IPython's.

    Example:
        >>> [is_ipython_name(n) for n in ("_ih", "_5", "__name__", "_model", "__private", "model")]
        [True, True, True, False, False, False]
    """
    if ipython_role(name) is not None:
        return True
    if shell is None:
        return False
    hidden = getattr(shell, "user_ns_hidden", None) or {}
    user_ns = getattr(shell, "user_ns", None) or {}
    return name in hidden and name in user_ns and user_ns[name] is hidden[name]


def new_variable_name_problem(name: str) -> str | None:
    """Why ``name`` cannot take a new value from us (``-o VAR``), or None when it can.

    Example:
        >>> new_variable_name_problem("report") is None
        True
        >>> new_variable_name_problem("def"), new_variable_name_problem("get_ipython")
        ("'def' is a Python keyword", "'get_ipython' is IPython's (every magic and !command calls it)")
    """
    if not name.isidentifier():
        return f"{name!r} is not a variable name"
    if keyword.iskeyword(name):
        return f"{name!r} is a Python keyword"
    role = ipython_role(name)
    if role is not None:
        return f"{name!r} is IPython's ({role})"
    return None
