"""The batch's layer-kind columns come in one order whatever the process's string hashes: gpt-oss's sliding-window
and full-attention layers share mixer and MLP, and a set's iteration order had decided which came first."""

import json
import os
import subprocess
import sys


def _kind_order(seed: int) -> list:
    code = ("from moetune.specs.registry import load_model\n"
            "from moetune.walls.batch_layouts import build_batch\n"
            "from moetune.layout.layout import Layout\n"
            "b = build_batch(load_model('gpt-oss-120b'), [(Layout(world_size=8, ep=8), 1)])\n"
            "import json; print(json.dumps([k.window for k in b.kinds]))")
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    return json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     check=True).stdout)


def test_layer_kind_columns_do_not_follow_string_hashes():
    # seeds 1 and 5 gave [None, 128] and [128, None] before the order was total
    assert _kind_order(1) == _kind_order(5) == [None, 128]
