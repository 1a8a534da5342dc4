import threading

import pytest

from kernel_session import KernelSession


@pytest.fixture(autouse=True)
def no_sampler_thread_left():
    """Fail a test that leaves a kerasmagic thread running."""
    yield
    left = [t.name for t in threading.enumerate() if t.name.startswith("kerasmagic-live")]
    assert not left, f"threads left running: {left}"


@pytest.fixture
def kernel():
    session = KernelSession()
    try:
        yield session
    finally:
        session.shutdown()
