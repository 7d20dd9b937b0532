#!/usr/bin/env python3
"""Fails when a lower layer of kvbm includes a higher one.

    python3 scripts/check_layers.py        # exit 0: every include goes down or sideways

Reads every `#include "..."` line of include/kvbm/ and src/ and places both
the including file and the included header in a layer of LAYERS (the table
docs/architecture.md draws). A file may include its own layer and the layers
below it; including a higher layer, or a file the table does not place, fails
with the file, the line and the rule broken. src/ mirrors include/kvbm/: a
source has the layer of the header it implements (src/facade/ and its
internal headers are the facade; src/python/, the Python extension, sits on top).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (layer, what belongs to it: folders end in '/', paths relative to include/kvbm/
# or src/), lowest first. A file may include its own layer and those above it here.
LAYERS = [
    ("base", ["error.h", "config.h", "tier.h", "tier_array.h", "pool_counts.h",
              "duplicate_policy.h", "sequence_hash.h", "hashing.h", "token_block.h",
              "detail/series_set.h", "clock.h",
              "token_block_sequence.h", "partial_block.h", "logging.h", "metrics.h", "io/"]),
    ("blocks", ["env.h", "blocks/", "detail/", "pool_core/", "eviction/", "frequency_tracker.h",
                "pool_listener.h"]),
    ("pools", ["block_manager.h", "block_registry.h"]),
    ("groups", ["groups/"]),
    ("transfer", ["storage/", "transfer/", "disk/", "remote/", "events/"]),
    ("offload", ["offload/"]),
    ("router", ["router/"]),
    ("facade", ["kv_block_manager.h", "kv_block_manager_config.h", "kv_block_manager_stats.h",
                "admission.h", "transfer_costs.h", "onboard_plan.h", "facade/"]),
    ("hybrid", ["hybrid/"]),
    ("umbrella", ["kvbm.h"]),
    ("bindings", ["python/"]),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """The layer of a path relative to include/kvbm/ or src/ (a .cpp counts as its .h)."""
    rel = re.sub(r"\.cpp$", ".h", rel)
    for name, members in LAYERS:
        for m in members:
            if (m.endswith("/") and rel.startswith(m)) or rel == m:
                return name
    return None


def included_path(target):
    """The path of an included header relative to include/kvbm/ or src/, or None
    when it is neither kvbm's nor an internal header of src/ (e.g. cuda/)."""
    if target.startswith("kvbm/"):
        return target[len("kvbm/"):]
    if (ROOT / "src" / target).is_file():
        return target
    return None


def main():
    files = [(p, p.relative_to(ROOT / "include" / "kvbm").as_posix())
             for p in sorted((ROOT / "include" / "kvbm").rglob("*.h"))]
    files += [(p, p.relative_to(ROOT / "src").as_posix())
              for p in sorted((ROOT / "src").rglob("*")) if p.suffix in (".h", ".cpp")]
    problems = []
    checked = 0
    for path, rel in files:
        own = layer_of(rel)
        shown = path.relative_to(ROOT).as_posix()
        if own is None:
            problems.append(
                f"{shown}: not in any layer; add it to LAYERS in scripts/check_layers.py")
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = included_path(m.group(1))
            if target is None:
                continue
            checked += 1
            theirs = layer_of(target)
            if theirs is None:
                problems.append(f"{shown}:{n}: includes {m.group(1)}, which is in no layer")
            elif RANK[theirs] > RANK[own]:
                problems.append(
                    f"{shown}:{n}: {own} includes {m.group(1)} ({theirs}, a higher layer)")
    for p in problems:
        print(p, file=sys.stderr)
    order = " <- ".join(name for name, _ in LAYERS)
    if problems:
        print(f"check_layers: {len(problems)} problem(s); layers, lowest first: {order}",
              file=sys.stderr)
        return 1
    print(f"check_layers: {checked} includes in {len(files)} files keep the layers ({order})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
