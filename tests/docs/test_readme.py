"""The README is a front door that stays true: short, every link lands, the badges open this
repository's lessons, and the contributor's set-up is the two commands it promises."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "scripts"))
from readme_outputs import repository_url

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The issue's budget: a README a user reads in two minutes.
MAX_README_BYTES = 10 * 1024
REPOSITORY = repository_url()
COLAB = "https://colab.research.google.com/github/" + REPOSITORY.removeprefix("https://github.com/")


def _links(markdown: str) -> list[str]:
    """Every inline link and image target, outside code blocks."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    return re.findall(r"\]\(([^)\s]+)\)", prose)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as dashes.

    Example:
        >>> github_anchor("Colab, Kaggle, VS Code and JupyterHub")
        'colab-kaggle-vs-code-and-jupyterhub'
        >>> github_anchor("`%%tf_mem`: one cell's deltas")
        'tf_mem-one-cells-deltas'
    """
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    prose = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", prose, flags=re.M)}


def test_readme_is_at_most_10_kib():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md is {size} bytes; the budget is {MAX_README_BYTES}"


def test_every_relative_link_points_at_a_file_or_section_that_exists():
    broken = []
    for target in _links(README.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # external: the repository's own URLs are checked below
        path_part, _, anchor = target.partition("#")
        path = (ROOT / unquote(path_part)) if path_part else README
        if not path.exists():
            broken.append(f"{target}: no file {path.relative_to(ROOT)}")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no section #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, broken


def test_links_into_this_repository_name_files_that_exist():
    """A GitHub or Colab URL of this repository (blob/main/PATH) must name a file of this checkout."""
    prefixes = (REPOSITORY + "/blob/main/", REPOSITORY + "/tree/main/", COLAB + "/blob/main/")
    targets = [t for t in _links(README.read_text(encoding="utf-8")) if t.startswith(prefixes)]
    missing = [t for t in targets if not (ROOT / next(t.removeprefix(p) for p in prefixes if t.startswith(p))).exists()]
    assert not missing, missing


def test_every_lesson_has_an_open_in_colab_badge_for_this_repository():
    readme = README.read_text(encoding="utf-8")
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"]({COLAB}/blob/main/notebooks/{notebook.name})" in readme, notebook.name
        assert f"](notebooks/{notebook.name})" in readme, notebook.name


def test_the_repository_url_is_the_one_pyproject_declares_everywhere():
    """README, lessons and docs name the repository as pyproject.toml does, and no other GitHub repo."""
    texts = {p: p.read_text(encoding="utf-8") for p in [README, *ROOT.glob("notebooks/*.ipynb"),
                                                       *ROOT.glob("docs/**/*.md"), ROOT / "CHANGELOG.md"]}
    owner_repo = REPOSITORY.removeprefix("https://github.com/")
    others = {p.name: set(re.findall(r"github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?(?=[/\"')\s#]|$)", text)) - {owner_repo}
              for p, text in texts.items()}
    others = {name: found for name, found in others.items() if found}
    assert not others, others


def test_develop_keeps_exactly_the_two_setup_commands():
    section = README.read_text(encoding="utf-8").split("## Develop", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^\./dev\.sh \w+", section, flags=re.M)
    assert commands == ["./dev.sh demo", "./dev.sh test"], commands


def test_the_changelog_has_a_section_for_this_version():
    from kerasmagic._version import __version__

    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    versions = re.findall(r"^## (\d+\.\d+\.\d+\S*)", changelog, flags=re.M)
    assert versions and versions[0] == __version__, (versions[:1], __version__)


def test_the_api_reference_lists_every_public_name():
    import kerasmagic

    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in kerasmagic.__all__ if name != "__version__" and f"kerasmagic.{name}\n" not in page]
    assert not missing, f"docs/reference/api.md lacks {missing}"


def test_the_readme_helpers_examples_hold():
    """The examples in docs/scripts/readme_outputs.py (the masking the outputs test relies on) and here."""
    import doctest

    import readme_outputs

    for module in (readme_outputs, sys.modules[__name__]):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, (module.__name__, result)
