"""compare.py --baseline-commit: this tree's measures beside the same measures of another commit.

A commit's tree is checked out (detached) in a git worktree under build/baseline-<commit>, and
only the binaries the selected comparisons run are built there, with the `release` preset
(ccache makes unchanged files free). Each comparison then becomes "this tree / that commit":
its kvbm measure run from this build and from that one, alternately, a round each, so that a
regression shows as a ratio before it lands (above 1 is faster for a rate, slower for a cost).
Only measures of a built binary (Google Benchmark cases, kvbm-replay) can be compared so; the
others (fio, redis-benchmark, the Python engine scripts) do not depend on the commit.
The worktree and its build stay for the next run against the same commit;
`git worktree remove --force build/baseline-<hash>` removes them.
"""
import os
import subprocess

import comparisons


def targets_of(comp):
    """The build targets comp's kvbm measure runs, or None when it runs no binary of the tree."""
    m = comp.kvbm
    if isinstance(m, comparisons.GBench):
        return [m.binary]
    if isinstance(m, comparisons.Replay):
        return ["kvbm-replay"]
    return None


def resolve(root, rev):
    """The full hash of `rev`, or exits with what to do when it names no commit."""
    r = subprocess.run(["git", "-C", root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compare: --baseline-commit {rev} names no commit of {root} "
                         "(give a hash, a branch or a tag; git fetch it first if it is remote)")
    return r.stdout.strip()


def prepare(root, rev, targets, log):
    """Checks `rev` out under build/baseline-<hash> (once) and builds `targets` there;
    returns the build directory (its build/release)."""
    commit = resolve(root, rev)
    tree = os.path.join(root, "build", f"baseline-{commit[:12]}")
    if not os.path.exists(os.path.join(tree, ".git")):
        subprocess.run(["git", "-C", root, "worktree", "add", "--detach", tree, commit],
                       check=True, stdout=subprocess.DEVNULL)
    build = os.path.join(tree, "build", "release")
    print(f"[compare] baseline {commit[:12]}: building {', '.join(targets)} in {build}",
          file=log, flush=True)
    with open(os.path.join(tree, "baseline-build.log"), "w") as out:
        for cmd in (["cmake", "--preset", "release"],
                    ["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target",
                     *targets]):
            if subprocess.run(cmd, cwd=tree, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise SystemExit(f"compare: building the baseline {commit[:12]} failed: "
                                 f"{' '.join(cmd)}; see {out.name}")
    return build, commit


class AtBaseline:
    """A measure run from the baseline commit's build instead of this tree's."""

    def __init__(self, measure, ctx, label):
        self.measure_of, self.ctx = measure, ctx
        self.what = f"{label}: {measure.what}"
        self.unit = measure.unit

    def missing(self, _ctx):
        return self.measure_of.missing(self.ctx)

    def measure(self, _ctx):
        return self.measure_of.measure(self.ctx)


def against(comps, base_ctx, label):
    """Each comparison as this tree's kvbm measure beside the same measure of the baseline
    build (`label`: the commit, or the directory given with --baseline-build)."""
    return [comparisons.Comparison(c.name, f"{c.what}: this tree / {label}", c.kvbm,
                                   AtBaseline(c.kvbm, base_ctx, label))
            for c in comps]
