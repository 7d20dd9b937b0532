"""kvbm's KV events through Dynamo's real radix-tree indexer (ai-dynamo-runtime).

Dynamo's indexer keeps each worker's blocks as a tree of chains and refuses
an event it cannot place: a removal of a block it does not hold (its parent
was removed first, which drops the subtree) or a store under a parent it
does not hold. The test replays the head of the shipped Mooncake trace
through a KvBlockManager whose G1 is small enough to evict all the time,
the way a scheduler serves a request (onboard the cached prefix, allocate
and register the rest, release), and applies every G1 event kvbm publishes
to Dynamo's RadixTree, counting the events it refuses. Released last block
first (kvbm.release), none is refused; released first block first, Dynamo
refuses many, which shows the test can tell the two apart.
"""

import json
from pathlib import Path

from skips import import_or_skip  # tests/python/skips.py (on the path: conftest.py)

import kvbm

dynamo_core = import_or_skip(
    "dynamo._core", "Dynamo runtime missing: ai-dynamo-runtime not importable; bash "
    "scripts/engines_env.sh installs it (tests/engines/requirements.txt)")

TRACE = Path(__file__).resolve().parents[2] / "examples" / "data" / "conversation_trace.jsonl"
REQUESTS = 1500


def load_requests(n):
    out = []
    with TRACE.open() as f:
        for line in f:
            out.append(json.loads(line)["hash_ids"])
            if len(out) == n:
                break
    return out


def manager(device_blocks):
    cfg = kvbm.KvBlockManagerConfig(
        layout=kvbm.LayoutConfig(num_layers=1, outer_dim=2, page_size=16, inner_dim=8,
                                 dtype_bytes=2),
        device=kvbm.TierConfig(blocks=device_blocks),
        device_layout=kvbm.LayoutKind.FULLY_CONTIGUOUS,
        move_bytes=False,
    )
    return kvbm.KvBlockManager(cfg, events=True)


def dynamo_event(event_id, event):
    """One kvbm event in the JSON form Dynamo's RadixTree.apply_event reads."""
    if isinstance(event, kvbm.BlockStored):
        blocks = [{"block_hash": h, "tokens_hash": h} for h in event.block_hashes]
        data = {"stored": {"parent_hash": event.parent_block_hash, "blocks": blocks}}
    elif isinstance(event, kvbm.BlockRemoved):
        data = {"removed": {"block_hashes": list(event.block_hashes)}}
    else:
        data = "cleared"
    return json.dumps({"event_id": event_id, "data": data}).encode()


def replay(release):
    """Serves the trace's head; returns (G1 events applied, refused by Dynamo,
    blocks removed from G1)."""
    tree = dynamo_core.RadixTree()
    applied = refused = removed = 0
    with manager(device_blocks=256) as kv:
        for hash_ids in load_requests(REQUESTS):
            hashes = hash_ids[:256]
            prefix = kv.onboard(hashes).take_blocks()
            fresh = kv.allocate(len(hashes) - len(prefix)) if len(prefix) < len(hashes) else []
            rest = kv.register(fresh, hashes) if fresh else []
            release(prefix + rest)
            for event in kv.take_events():
                if getattr(event, "medium", "GPU") != "GPU":
                    continue
                applied += 1
                if isinstance(event, kvbm.BlockRemoved):
                    removed += len(event.block_hashes)
                try:
                    tree.apply_event(0, dynamo_event(applied, event))
                except RuntimeError:
                    refused += 1
    return applied, refused, removed


def release_head_first(blocks):
    for block in blocks:
        block.release()


def test_tail_first_release_gives_dynamo_no_event_to_refuse():
    applied, refused, removed = replay(kvbm.release)
    assert removed > 10_000  # the G1 of 256 blocks evicts all the time
    assert refused == 0, f"Dynamo refused {refused} of {applied} events"


def test_head_first_release_is_what_dynamo_refuses():
    applied, refused, removed = replay(release_head_first)
    assert removed > 10_000
    assert refused > applied // 10, f"Dynamo refused {refused} of {applied} events"
