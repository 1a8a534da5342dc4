"""The sidebar's production bundle stays under its budget (production_bundle.LIMIT_BYTES, issue 31's
140 KiB, set from what the rebuilt panel needs), and benchmarks/README.md says its size.

Built from the sources in a scratch folder (tests/live/production_bundle.py), as a release wheel
builds it: the checkout's own build is usually the development one (unminified, with source maps).
"""

import re
from pathlib import Path

import pytest
from production_bundle import LIMIT_BYTES, ROOT, build_production_bundle

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return build_production_bundle(tmp_path_factory.mktemp("bundle"))


def test_the_production_bundle_stays_under_its_budget(bundle):
    assert bundle.js_bytes > 20 * 1024, f"implausibly small, the build is broken: {bundle}"
    assert bundle.all_bytes < LIMIT_BYTES, f"the production bundle weighs {bundle}, over {LIMIT_BYTES // 1024} KiB"


def test_the_production_css_is_minified(bundle):
    # The style chunk is the one that carries the panel's rules; written as in the source it has
    # our comments and indentation, which Lightning CSS (labextension/webpack.config.js) drops.
    style = [p.read_text() for p in Path(bundle.static).glob("*.js") if ".jp-KerasMagic-panel" in p.read_text()
             and "jp-KerasMagic-headline" in p.read_text() and "font-size" in p.read_text()]
    assert style, "no chunk carries the panel's CSS"
    css = style[0]
    assert ".jp-KerasMagic-panel{" in css
    assert "Only JupyterLab theme variables" not in css, "a CSS comment reached the production bundle"
    assert "\\n  " not in css and "\n  " not in css, "the CSS keeps its indentation"


def test_the_readme_states_the_measured_size(bundle):
    # The dated figures table (it was the README's; the README keeps only headline figures).
    readme = (ROOT / "benchmarks" / "README.md").read_text().splitlines()
    row = next(line for line in readme if line.startswith("| the extension's bundle"))
    stated = re.search(r"production build \(`jlpm build:prod`\)[^:]*: ([\d.]+) KiB in all \(JS ([\d.]+) KiB", row)
    assert stated, f"the README's bundle row no longer says the production figure: {row[:200]}"
    all_kib, js_kib = (float(v) for v in stated.groups())
    # Within 2 KiB: a small change need not touch the README, a grown bundle must.
    assert abs(all_kib - bundle.all_bytes / 1024) < 2, f"README says {all_kib} KiB in all, the build weighs {bundle}"
    assert abs(js_kib - bundle.js_bytes / 1024) < 2, f"README says JS {js_kib} KiB, the build weighs {bundle}"


def test_every_underscore_name_we_call_on_others_objects_is_kept_by_the_minifier():
    # The production build shortens `_`-prefixed property names (labextension/webpack.config.js),
    # which are our private members by convention. One we call on someone else's object (a
    # services hook, the translation bundle's `_n`) must be in the minifier's `reserved` list, or
    # the call breaks in the production build only.
    # Comments out: they name things like `os._exit` that are no property access.
    sources = [re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", p.read_text(), flags=re.S))
               for p in (ROOT / "labextension" / "src").glob("*.ts")]
    ours = {m for text in sources
            for m in re.findall(r"\b(?:private|protected)\s+(?:static\s+)?(?:readonly\s+)?(?:async\s+)?(_[A-Za-z]\w*)",
                                text)}
    called = {m for text in sources for m in re.findall(r"\.(_[A-Za-z]\w*)", text)}
    config = (ROOT / "labextension" / "webpack.config.js").read_text()
    reserved = set(re.findall(r"'(_\w+)'", re.search(r"reserved:\s*\[([^\]]*)\]", config).group(1)))
    assert len(ours) > 100, f"found only {len(ours)} private members: the pattern no longer matches the sources"
    assert called - ours <= reserved, f"add to webpack.config.js's reserved: {sorted(called - ours - reserved)}"
    assert reserved <= called, f"reserved but no longer called: {sorted(reserved - called)}"
