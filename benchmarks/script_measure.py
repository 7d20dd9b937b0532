"""A figure of a Python benchmark of benchmarks/python/ for benchmarks/compare.py.

Those benchmarks drive an engine's own classes (SGLang's storage backends, vLLM's secondary
tiers) and alternate kvbm and the engine's own backend themselves, round by round, in one
process (their setup is the engine's, shared by both sides). So a round of compare.py runs the
script once with `--rounds 1` and reads one figure of each side from its `--json`; the kvbm and
the baseline measures of a comparison, and every comparison of the same script, read the same
run in the same round (run n of the script serves round n of each of them).
They run in the engines venv (`bash scripts/engines_env.sh`: build/engines-venv, or
KVBM_ENGINES_VENV), and are skipped with that reason where it does not exist.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def venv_python():
    venv = os.environ.get("KVBM_ENGINES_VENV") or os.path.join(ROOT, "build", "engines-venv")
    return os.path.join(venv, "bin", "python")


class ScriptRuns:
    """The runs of each script so far, by (script, run number)."""

    def __init__(self):
        self.runs = {}

    def get(self, ctx, script, args, n):
        key = (script, tuple(args), n)
        if key not in self.runs:
            with tempfile.NamedTemporaryFile(suffix=".json", dir=ctx.tmp) as out:
                env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning")
                subprocess.run([venv_python(), os.path.join(ROOT, "benchmarks", "python", script),
                                "--rounds", "1", *args, "--json", out.name], env=env,
                               check=True, stdout=subprocess.DEVNULL, stderr=sys.stderr)
                self.runs[key] = json.load(open(out.name))
        return self.runs[key]


class ScriptFigure:
    """Figure `key` of `side` ("kvbm", or the engine's backend) in the script's `--json`
    (`per_round`: {side: {key: [one value a round]}})."""

    def __init__(self, script, side, key, unit, what, args=()):
        self.script, self.side, self.key, self.unit = script, side, key, unit
        self.what, self.args, self.calls = what, list(args), 0

    def missing(self, ctx):
        py = venv_python()
        return None if os.path.exists(py) else (
            f"{py} not found (bash scripts/engines_env.sh, or set KVBM_ENGINES_VENV)")

    def measure(self, ctx):
        run = ctx.scripts.get(ctx, self.script, self.args, self.calls)
        self.calls += 1
        values = run["per_round"][self.side][self.key]
        if len(values) != 1:
            raise RuntimeError(f"{self.script}: {len(values)} rounds of {self.key}, not 1")
        return values[0]

