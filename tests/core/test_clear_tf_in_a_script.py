"""`kerasmagic.clear_tf()` in a plain script (no IPython): the module's globals hold models as a
notebook's variables do, and the report names them, as `measure()` does in a script.

Seen beside the H200 run (benchmarks/results/h200-2026-11-28/README.md): after `m = keras.Sequential(...)`
at module level and many `m.predict_on_batch(x)`, `clear_tf()` said "models freed 0 of 1" and that
nothing of the notebook held the model, while the module global `m` held it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.shell, pytest.mark.frameworks]

SCRIPT = """
import json, weakref
import numpy as np
import keras
import kerasmagic

m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
x = np.zeros((2, 8), "float32")
for _ in range(50):
    m.predict_on_batch(x)
kept = kerasmagic.clear_tf()
model = weakref.ref(m)
freed = kerasmagic.clear_tf("m")
print(json.dumps({"kept": kept.to_dict(), "freed": freed.to_dict(), "dead": model() is None,
                  "left": sorted(name for name in globals() if not name.startswith("__"))}))
"""


def test_a_module_global_holding_a_model_is_named_and_clearing_it_frees_the_model():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    kept = seen["kept"]
    assert (kept["models_tracked"], kept["models_freed"], kept["models_unreachable"]) == (1, 0, 0), kept
    (model,) = [line for line in kept["still_held"] if line.startswith("Sequential 'sequential'")]
    # Held by the global, and the remedy the line offers (proven before it is shown) names it too.
    assert " held by m — `%clear_tf m` frees" in model or model.endswith(" held by m"), kept["still_held"]
    assert not any("nothing of" in line for line in kept["still_held"]), kept["still_held"]
    # Naming the global deletes it, and the model dies: the report's holder was the real one.
    freed = seen["freed"]
    assert (freed["models_tracked"], freed["models_freed"]) == (1, 1), freed
    assert seen["dead"] and "m" not in seen["left"] and "x" in seen["left"]
    assert not any(line.startswith("Sequential") for line in freed["still_held"]), freed["still_held"]
