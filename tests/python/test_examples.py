"""The Python example runs end to end (its own processes, its own redis-server when one
is installed) and says every byte matched."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "engine_restart.py"


def test_engine_restart_example():
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "loaded 12 of 12 blocks warm; bytes equal: True" in proc.stdout
    assert proc.stdout.rstrip().endswith("every byte matched")


def test_readme_python_snippet_runs(tmp_path):
    """README.md's ```python block runs as written, given a prompt and its pages."""
    import re

    import numpy as np

    readme = (EXAMPLE.parents[2] / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    code = block.replace('"/var/cache/kvbm"', repr(str(tmp_path)))
    prompt_tokens = np.arange(100, dtype=np.uint32)
    env = {"prompt_tokens": prompt_tokens, "pages": None, "out": None}
    # the pages the snippet stores and the buffer it loads into, sized from its own config
    pre, post = code.split("_, hashes")
    exec(pre, env)
    kv = env["kv"]
    env["pages"] = np.random.default_rng(0).integers(0, 256, size=(6, kv.block_bytes),
                                                     dtype=np.uint8)
    env["out"] = np.zeros_like(env["pages"])
    exec("_, hashes" + post, env)
    assert env["n"] == 6 and (env["out"] == env["pages"]).all()
    kv.close()
