"""The gradient-registry purge against real TensorFlow: what it frees and what it must keep."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

# The registry is TensorFlow's: on a machine without it (the GPU machine runs Keras on torch and
# JAX) this module is not collected, instead of breaking the collection of the whole suite.
pytest.importorskip("tensorflow", reason="the gradient registry is TensorFlow's")
import keras

from shell_helpers import REGISTRY_FIX_REASON, registry_pins_graphs

pytestmark = pytest.mark.frameworks
#: Purging runs on TensorFlow 2.16-2.21; from 2.22 the last test here checks the stand-down instead.
before_the_fix = pytest.mark.skipif(not registry_pins_graphs(), reason=REGISTRY_FIX_REASON)


def trained_model():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((32, 8)), np.ones(32), verbose=0)
    return model


def custom_gradient_keys():
    from tensorflow.python.framework import ops

    return {k for k in ops.gradient_registry._registry if k.startswith("CustomGradient-")}


@before_the_fix
def test_entries_of_live_models_are_restored_even_if_the_collection_is_interrupted():
    from kerasmagic.registry_purge import entries_tied_to_their_variables, purge_dead_custom_gradients

    # Entries of models earlier tests let die stay until a purge, and are never tied: start clean.
    gc.collect()
    purge_dead_custom_gradients()
    alive = trained_model()
    before = custom_gradient_keys()
    assert before, "precondition: fit() registered custom gradients"
    with pytest.raises(KeyboardInterrupt):
        with entries_tied_to_their_variables() as tied:
            assert not (before & custom_gradient_keys()), "live entries ride on their variables meanwhile"
            raise KeyboardInterrupt
    assert custom_gradient_keys() == before
    assert tied.kept_alive == len(before) and tied.purged == 0
    alive.fit(np.ones((16, 8)), np.ones(16), batch_size=4, verbose=0)  # retraces and still trains


@before_the_fix
def test_one_collection_frees_a_deleted_model_and_its_entries():
    from kerasmagic.registry_purge import entries_tied_to_their_variables, purge_dead_custom_gradients

    gc.collect()
    purge_dead_custom_gradients()
    baseline = custom_gradient_keys()
    model = trained_model()
    new_keys = custom_gradient_keys() - baseline
    assert new_keys

    model_ref = weakref.ref(model)
    del model  # alive in reference cycles until a collection
    assert not purge_dead_custom_gradients().purged, "a plain purge cannot know yet"
    with entries_tied_to_their_variables() as tied:
        gc.collect()
    assert model_ref() is None
    assert set(tied.purged_keys) >= new_keys
    assert not (custom_gradient_keys() & new_keys)


def test_purge_stands_down_outside_the_tested_versions(monkeypatch):
    from kerasmagic import registry_purge

    monkeypatch.setattr(registry_purge.tf_probe, "version_tuple", lambda: (2, 22))
    result = registry_purge.purge_dead_custom_gradients()
    assert result.skipped is not None and result.skipped.reason == "not_supported"
    assert "109334" in result.skipped.detail
    with registry_purge.entries_tied_to_their_variables() as tied:
        pass
    assert tied.skipped is not None


@pytest.mark.skipif(registry_pins_graphs(), reason="before TensorFlow 2.22 the entries pin graphs and are purged "
                    "(the two tests above)")
def test_from_the_upstream_fix_the_purge_stands_down_and_a_deleted_model_is_freed_all_the_same():
    from kerasmagic.registry_purge import _captured_graph, entries_tied_to_their_variables, purge_dead_custom_gradients

    model = trained_model()
    variable = weakref.ref(model.layers[0].kernel.value)
    result = purge_dead_custom_gradients()
    assert result.purged == 0 and result.skipped is not None and "carries the upstream fix" in result.skipped.detail
    from tensorflow.python.framework import ops

    registry = ops.gradient_registry._registry
    assert custom_gradient_keys(), "precondition: fit() still registers custom gradients"
    assert all(_captured_graph(registry[key].get("type")) is None for key in custom_gradient_keys())
    with entries_tied_to_their_variables() as tied:
        del model
        gc.collect()
    assert tied.skipped is not None and tied.purged == 0
    assert variable() is None, "nothing but the model held its weights"


def test_each_sample_counts_the_entries_from_the_sampler_thread():
    """The chart's CustomGradient line (lesson 6: +2 per trial inside one cell) comes from samples,
    read on the sampler's thread while the main thread trains: each count is the registry's at that
    moment, on both sides of TensorFlow 2.22 (the entries are still added there, pinning nothing)."""
    import queue

    from kerasmagic.live import protocol
    from kerasmagic.live.sampler import Sampler

    samples: queue.Queue = queue.Queue()
    sampler = Sampler(samples.put, interval_s=0.05)
    sampler.set_active(True)
    try:
        counts = []
        for _ in range(2):
            model = trained_model()
            while not samples.empty():
                samples.get_nowait()
            samples.get(timeout=30)  # may have been read while the model trained
            sample = samples.get(timeout=30)  # read after the model was trained
            assert protocol.validate(sample, "to_frontend") is sample
            assert sample["custom_gradient_entries"] == len(custom_gradient_keys()), sample
            counts.append(sample["custom_gradient_entries"])
        assert counts[1] > counts[0], counts
        del model
    finally:
        sampler.stop()
