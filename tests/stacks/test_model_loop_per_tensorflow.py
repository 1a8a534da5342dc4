"""The seed-001 model loop on the TensorFlow under test: what ``clear_session()`` does there, and
what kerasmagic adds, each strategy in its own fresh interpreter (``kerasmagic.demo``).

TensorFlow before 2.22 keeps every traced train step's graph (and so each model's weights and
Adam slots) alive through its gradient registry: ``clear_session()`` resets Keras' names but the
loop grows by about 8 MB a model, and only ``fresh_model()`` (which purges the dead entries) stays
flat. TensorFlow 2.22 carries the upstream fix (tensorflow PR 109334): there ``clear_session()``
alone stays flat. Measured (30 models, seed-001 CNN, growth per model after warm-up):

| stack | ``clear_session()`` | ``fresh_model()`` |
|---|---|---|
| TF 2.21.0 + Keras 3.15.1 | +7.60 MB | +0.03 MB |
| TF 2.22.0rc0 + keras-nightly 3.16.0.dev | +0.09 MB | +0.11 MB |

Run by every stage of ``./dev.sh test`` (the newest stack, Colab's TF 2.19 and the next TF), so
the story the README and lesson 1 tell is checked on each side of 2.22.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow", reason="the model loop trains Keras models on TensorFlow")

from kerasmagic.demo import run_in_subprocess, slope_mb_per_model

pytestmark = [pytest.mark.frameworks, pytest.mark.stacks]

#: Models per strategy, and the first one the growth is fitted from (the first models warm up).
MODELS, FIT_FROM = 16, 4
#: A TF process's RSS steps by 4-17 MB from one model to the next with no leak (measured on CI's
#: 2-core machine, also right after malloc_trim): over 12 readings a 17 MB step fits at most about
#: 2.2 MB/model. The leak is 7-9 MB/model, so these bounds part the two with room on both sides.
FLAT_MB, LEAKING_MB = 3.0, 4.0


@pytest.fixture(scope="module")
def loops():
    import tensorflow as tf

    from kerasmagic.registry_purge import FIXED_UPSTREAM_FROM

    major, minor = (int(part) for part in tf.__version__.split(".")[:2])
    runs = {strategy: run_in_subprocess(strategy, MODELS) for strategy in ("clear_session", "fresh_model")}
    slopes = {strategy: slope_mb_per_model(run["rss_bytes"], FIT_FROM) for strategy, run in runs.items()}
    return {"fixed": (major, minor) >= FIXED_UPSTREAM_FROM, "version": tf.__version__, "runs": runs,
            "slopes": slopes}


def test_clear_session_alone_is_flat_exactly_where_tensorflow_has_the_fix(loops):
    slope = loops["slopes"]["clear_session"]
    if loops["fixed"]:
        assert slope < FLAT_MB, f"TF {loops['version']}: clear_session() grew {slope:+.2f} MB/model"
    else:
        assert slope > LEAKING_MB, (f"TF {loops['version']}: clear_session() grew only {slope:+.2f} MB/model; "
                                    "if this TensorFlow has the fix, FIXED_UPSTREAM_FROM must say so")
    # Either way clear_session() resets Keras' layer names: what it has always done.
    assert loops["runs"]["clear_session"]["layer_names"][-1] == "dense_1"


def test_fresh_model_is_flat_on_every_tensorflow(loops):
    slope = loops["slopes"]["fresh_model"]
    assert slope < FLAT_MB, f"TF {loops['version']}: fresh_model() grew {slope:+.2f} MB/model"
    assert loops["runs"]["fresh_model"]["layer_names"][-1] == "dense_1"
