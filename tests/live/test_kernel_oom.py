"""Out of memory explained in a real ipykernel: a notebook shows the error first, then what holds
memory, as two outputs in that order (the order of their iopub messages)."""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.kernel, pytest.mark.frameworks]


def test_a_tensorflow_oom_shows_its_traceback_then_the_explanation(kernel):
    kernel.execute("%load_ext kerasmagic")
    kernel.execute("import numpy as np, tensorflow as tf\nkept = np.ones(8 * 2**20 // 8)", timeout=120)
    outputs = kernel.outputs("huge = tf.zeros((2**38,), tf.float32)", timeout=120)
    kinds = [m["msg_type"] for m in outputs]
    assert "error" in kinds, kinds
    error = outputs[kinds.index("error")]["content"]
    assert error["ename"] == "ResourceExhaustedError" and "OOM when allocating" in error["evalue"]
    # The original traceback, whole (IPython colours it; 7.34 colours inside the code line too).
    assert any("huge = tf.zeros" in re.sub(r"\x1b\[[0-9;]*m", "", line) for line in error["traceback"])
    explained = [i for i, m in enumerate(outputs)
                 if m["msg_type"] == "stream" and "ran out of memory on CPU:0" in m["content"]["text"]]
    assert explained and explained[0] > kinds.index("error"), kinds
    text = "".join(m["content"]["text"] for m in outputs[explained[0]:] if m["msg_type"] == "stream")
    assert "kept" in text and "`%clear_tf kept`" in text, text
    # The kernel goes on: the next cell runs, and its variables are all there.
    assert kernel.execute("print(kept.nbytes)").strip() == str(8 * 2**20)
