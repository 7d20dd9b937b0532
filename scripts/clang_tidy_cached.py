#!/usr/bin/env python3
"""clang-tidy over sources, skipping those whose clean result is cached.

    python3 scripts/clang_tidy_cached.py CLANG_TIDY BUILD_DIR JOBS SOURCE...

A source's key is the SHA-256 of what decides clang-tidy's answer: the tool's version, the
.clang-tidy file, the source's compile command and the source preprocessed by that command
(every header it includes, so a changed header misses every source that includes it). A source
that clang-tidy passes (exit 0, no warning or error) leaves an empty file named after its key in
the cache directory ($KVBM_TIDY_CACHE, else $XDG_CACHE_HOME/kvbm-clang-tidy, else
~/.cache/kvbm-clang-tidy); a later run with the same key skips it. Findings are never cached: a
source with findings runs again every time. Where preprocessing fails, or the tree has no
compile command for the source, it just runs.

Prints clang-tidy's output of the sources that ran, then one line "clang-tidy: N of M sources
from the cache"; exits 1 when any run failed or reported a finding, else 0.
"""

import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

FINDING = re.compile(r"(warning|error): ")


def cache_dir():
    explicit = os.environ.get("KVBM_TIDY_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvbm-clang-tidy"


def preprocess_command(entry):
    """The entry's compile command with its output turned into preprocessed text on stdout."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    return out + ["-E", "-o", "-"]


def key_of(entry, prefix):
    """The source's cache key, or None when it cannot be preprocessed."""
    try:
        pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"], capture_output=True,
                             check=False)
    except OSError:
        return None
    if pre.returncode != 0:
        return None
    h = hashlib.sha256(prefix)
    h.update(entry.get("command", " ".join(entry.get("arguments", []))).encode())
    h.update(b"\0")
    h.update(pre.stdout)
    return h.hexdigest()


def check(tidy, build_dir, entry, prefix, cache):
    """(ran, clean, output) for one source."""
    key = key_of(entry, prefix) if "directory" in entry else None
    if key and (cache / key).exists():
        return False, True, ""
    run = subprocess.run([tidy, "-p", build_dir, "--quiet", entry["file"]], capture_output=True,
                         text=True, check=False)
    output = run.stdout + run.stderr
    clean = run.returncode == 0 and not FINDING.search(output)
    if clean and key:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / key).touch()
    return True, clean, output


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    tidy, build_dir, jobs, sources = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    root = Path(__file__).resolve().parent.parent
    with open(os.path.join(build_dir, "compile_commands.json"), encoding="utf-8") as f:
        entries = {os.path.realpath(e["file"]): e for e in json.load(f)}
    version = subprocess.run([tidy, "--version"], capture_output=True, text=True,
                             check=False).stdout
    prefix = (version + "\0" + (root / ".clang-tidy").read_text(encoding="utf-8")).encode()
    cache = cache_dir()
    # A source the tree does not compile (e.g. the one built without hiredis) runs uncached, on
    # clang-tidy's own guess of its flags.
    todo = [entries.get(os.path.realpath(root / s), {"file": str(root / s)}) for s in sources]
    failed, cached = 0, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for ran, clean, output in pool.map(lambda e: check(tidy, build_dir, e, prefix, cache),
                                           todo):
            cached += 0 if ran else 1
            failed += 0 if clean else 1
            if output:
                sys.stdout.write(output)
    print(f"clang-tidy: {cached} of {len(todo)} sources from the cache ({cache})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
