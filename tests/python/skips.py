"""skip_or_fail(reason): the one way a Python test says it cannot run here (tests/python and
tests/engines).

Outside CI it skips with `reason` (pytest.skip). Under CI=true (the environment of .ci/run) it
fails instead, so that a broken install step (redis-server, libhiredis-dev, an engine wheel, the
Dynamo runtime) turns the run red rather than switching tests off, unless the reason is one the
CI machine cannot meet. Every reason is "<class>: <details>"; scripts/test.sh groups a stage's
skips by the class, the text before the first ": ". The classes allowed in CI are the C++ tests'
(tests/skip_or_fail.h), the hardware's alone: the sanitizer stages run reduced checks rather than
skip.
"""

import importlib
import os

# pytest is imported where it is used: scripts/skip_report.py imports this module for
# ALLOWED_IN_CI with a python that may not have pytest.
ALLOWED_IN_CI = ("no GPU:", "GPU present:", "GPU runtime too old:")


def in_ci():
    """True when the environment variable CI is "true"."""
    return os.environ.get("CI") == "true"


def skip_allowed_in_ci(reason):
    return reason.startswith(ALLOWED_IN_CI)


def skip_or_fail(reason, *, allow_module_level=False):
    """pytest.skip(reason), or pytest.fail under CI=true unless the reason may skip there."""
    import pytest

    if in_ci() and not skip_allowed_in_ci(reason):
        pytest.fail(f"CI=true: a skip for this reason is a failure (tests/python/skips.py): "
                    f"{reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=allow_module_level)


def import_or_skip(module, reason):
    """The module, imported; else skip_or_fail("<reason> (<the ImportError>)"), at any level."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        skip_or_fail(f"{reason} ({e})", allow_module_level=True)
        raise  # not reached: skip_or_fail raises
