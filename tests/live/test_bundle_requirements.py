"""What the sidebar's bundle asks of JupyterLab matches what we test: JupyterLab 4.0 to 4.6.

Two places say it and both must. `jupyter labextension list` compares the built package.json's
`dependencies` with the running JupyterLab's packages and flags the extension "X" where they do
not overlap. The browser loads shared packages with the bundle's `requiredVersion`, which the
builder takes from the JupyterLab it was built with (`^4.6.4` on ours) unless `sharedPackages`
says otherwise: a bundle built on 4.6 then warns on 4.0 that its requirements are unmet.
"""

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
SRC = ROOT / "labextension" / "src"
BUILT = ROOT / "kerasmagic" / "labextension"

# What JupyterLab 4.0.0 shipped of each package the sidebar imports: the oldest we support
# (tests/ui/test_jupyterlab_40.py runs the sidebar there). @jupyterlab/services is 7.x in all of
# JupyterLab 4, @lumino/* 2.x.
OLDEST = {
    "@jupyterlab/application": "^4.0.0",
    "@jupyterlab/apputils": "^4.0.0",
    "@jupyterlab/notebook": "^4.0.0",
    "@jupyterlab/services": "^7.0.0",
    "@jupyterlab/settingregistry": "^4.0.0",
    "@jupyterlab/translation": "^4.0.0",
    "@jupyterlab/ui-components": "^4.0.0",
    "@lumino/disposable": "^2.0.0",
    "@lumino/messaging": "^2.0.0",
    "@lumino/signaling": "^2.0.0",
    "@lumino/widgets": "^2.0.0",
}


def _imported_packages() -> set[str]:
    """The @jupyterlab and @lumino packages the sidebar's source imports (tests excluded)."""
    found = set()
    for source in SRC.glob("*.ts"):
        found.update(re.findall(r"""from\s+'(@(?:jupyterlab|lumino)/[a-z-]+)'""", source.read_text()))
    return found


def test_every_imported_package_is_declared_for_jupyterlab_4_0():
    package = json.loads((ROOT / "package.json").read_text())
    imported = _imported_packages()
    assert "@jupyterlab/application" in imported, "the import scan found nothing: it is broken"
    assert set(package["dependencies"]) == imported, "package.json's dependencies and src's imports differ"
    assert package["dependencies"] == {name: OLDEST[name] for name in imported}
    shared = package["jupyterlab"]["sharedPackages"]
    # Each one JupyterLab's own (never bundled), required at what JupyterLab 4.0 has.
    assert shared == {
        name: {"bundled": False, "singleton": True, "requiredVersion": OLDEST[name]} for name in imported
    }


def test_the_built_bundle_requires_what_package_json_declares():
    if not (BUILT / "package.json").exists():
        pytest.fail(f"no built extension in {BUILT.relative_to(ROOT)}: run 'jlpm build' (./dev.sh test "
                    "builds it through the editable install)", pytrace=False)
    built = json.loads((BUILT / "package.json").read_text())
    # The entry JupyterLab loads (an earlier build's may still lie beside it in static/).
    entry = BUILT / built["jupyterlab"]["_build"]["load"]
    # What `jupyter labextension list` compares with the running JupyterLab.
    assert built["dependencies"] == {name: OLDEST[name] for name in _imported_packages()}
    # Module federation's consume entries, `{shareScope: "default", shareKey: "<package>",
    # import: null, requiredVersion: "<range>", ...}`, spaced in a development build, not in a
    # production one.
    text = entry.read_text()
    consumed = dict(re.findall(
        r"""shareKey:\s*["'](@(?:jupyterlab|lumino)/[a-z-]+)["'][^}]*?requiredVersion:\s*["']([^"']+)["']""",
        text,
    ))
    assert "@jupyterlab/application" in consumed, f"no consume entries found in {entry.name}"
    assert consumed == {name: OLDEST[name] for name in consumed}
