"""Sphinx configuration: MyST Markdown pages, the API from the docstrings, the lessons from notebooks/.

Built by ``./dev.sh docs`` (``sphinx-build -W --keep-going docs build/docs``): a warning, such as a
broken link or a docstring that no longer renders, fails the build.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # autodoc documents this checkout, not another installed copy
sys.path.insert(0, str(DOCS / "scripts"))

from readme_outputs import repository_url  # noqa: E402 - the one reader of pyproject's URL

from kerasmagic._version import __version__  # noqa: E402

project = "kerasmagic"
author = "the kerasmagic contributors"
copyright = "2026, the kerasmagic contributors"
version = release = __version__

extensions = [
    "myst_nb",  # MyST Markdown pages and the lessons' notebooks (it brings myst_parser with it)
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the package's Google-style docstrings
]

# Lessons render from what is stored in notebooks/: never executed here (they train models for
# minutes; CI executes them in tests/notebooks). They are stored without outputs, so the pages
# show the lesson's text and code; the executed copies are CI's test-artifacts/notebooks/.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4  # `page.md#a-section-title` links, as on GitHub

exclude_patterns = ["_build", "scripts", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "pydata_sphinx_theme"
html_title = f"kerasmagic {release}"
html_static_path: list[str] = []


html_theme_options = {
    "github_url": repository_url(),
    "navigation_with_keys": False,
    "show_toc_level": 2,
}


def _copy_lessons() -> None:
    """The lessons live in notebooks/ (where users open them); Sphinx reads only its own folder.

    They are copied into docs/lessons/ (ignored by git) at each build, with their image links
    rewritten from notebooks/'s point of view to docs/lessons/'s.
    """
    target = DOCS / "lessons"
    target.mkdir(exist_ok=True)
    for old in target.glob("*.ipynb"):
        old.unlink()
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = notebook.read_text(encoding="utf-8")
        (target / notebook.name).write_text(re.sub(r"\.\./docs/images/", "../images/", text), encoding="utf-8")
    shutil.copymode(ROOT / "notebooks", target)


_copy_lessons()
