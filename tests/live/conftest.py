import threading

import pytest


@pytest.fixture(autouse=True)
def no_sampler_thread_left():
    """Fail a test that leaves a kerasmagic thread running."""
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("kerasmagic-live")]
    assert not left, f"threads left running: {left}"
