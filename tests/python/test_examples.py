"""The Python example runs end to end (its own processes, its own redis-server when one
is installed) and says every byte matched."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "engine_restart.py"


def test_engine_restart_example():
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "loaded 12 of 12 blocks warm; bytes equal: True" in proc.stdout
    assert proc.stdout.rstrip().endswith("every byte matched")
