"""What deleting names would free, measured before any advice names them (kerasmagic.remedies, issue 29)."""

from __future__ import annotations

import psutil
import pytest

from kerasmagic.remedies import RetainedWalk, prove

from shell_helpers import run

pytestmark = pytest.mark.shell

MIB = 2**20


def test_a_view_frees_nothing_while_its_base_lives_and_both_together_free_the_base(shell):
    run(shell, "import numpy as np\nbase = np.ones(2**21)\nview = base.reshape(2, -1)\nsmall = np.ones(2**21)\n"
               "tail = small[:10]")  # a view too small to list still keeps its base alive
    walk = RetainedWalk(shell)
    assert walk.freed_by(["view"]).retained_bytes == 0
    assert walk.freed_by(["base"]).retained_bytes == 0
    assert walk.freed_by(["base", "view"]).retained_bytes == 16 * MIB
    assert walk.freed_by(["small"]).retained_bytes == 0  # `tail` keeps it: no claim


def test_what_the_output_cache_holds_is_what_a_plain_clear_tf_frees_and_it_does(shell):
    run(shell, "import numpy as np\nkept = np.ones(2**21)")
    run(shell, "np.ones(2**22)")  # 32 MiB echoed to Out, held by nothing else
    walk = RetainedWalk(shell)
    default = walk.freed_by(())
    assert default.retained_bytes == 32 * MIB and default.command == "%clear_tf", default
    rss = psutil.Process().memory_info().rss
    run(shell, "%clear_tf -q")
    assert rss - psutil.Process().memory_info().rss >= 32 * MIB - 5 * MIB
    assert "kept" in shell.user_ns


def test_a_small_log_is_never_advised_and_the_array_is(shell):
    run(shell, "import numpy as np\nlog = [{'loss': 0.1}] * 4\ndata = np.ones(2**21)")
    proof = prove(shell, 16 * MIB, ["log", "data", "no_such_name"])
    assert proof.names == ["data"] and proof.candidates["log"] == 0, proof.to_dict()
    assert proof.sentence() == "`%clear_tf data` frees 16.0 MiB (measured now)."
    assert proof.to_dict()["named"]["how_measured"].startswith("retained-size walk")


def test_names_that_free_only_together_are_advised_together(shell):
    run(shell, "import numpy as np\nfirst = np.ones(2**21)\nsecond = first")
    proof = prove(shell, 16 * MIB, ["first", "second"])
    assert sorted(proof.names) == ["first", "second"], proof.to_dict()


@pytest.mark.frameworks
def test_a_model_sharing_a_kept_frozen_base_frees_only_its_own_weights(shell):
    run(shell, "import keras\n"
               "base = keras.Sequential([keras.Input((512,)), keras.layers.Dense(1024)])\n"
               "head = keras.Sequential([base, keras.layers.Dense(8)])")
    walk = RetainedWalk(shell)
    head_only = walk.freed_by(["head"])
    # The head's own Dense(8): 1024 * 8 + 8 floats; the base's 2 MiB stay with `base`.
    assert head_only.models == 1 and head_only.retained_bytes == (1024 * 8 + 8) * 4, head_only.to_dict()
    assert walk.freed_by(["head", "base"]).retained_bytes >= 2 * MIB
