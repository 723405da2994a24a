#!/usr/bin/env python3
"""Regenerates the tiny pickle fixtures of src/formats tests.

usage: /usr/bin/python3 src/formats/testdata/gen_fixtures.py   (torch 1.13, Python 3.11)

values_p{2,3,4,5}.pickle: one dict exercising every value kind the reader knows, pickled with
each protocol (2-3 use GLOBAL/BINPUT/LONG_BINPUT, 4-5 STACK_GLOBAL/MEMOIZE/FRAME).
dcp_large_p2.metadata: a torch 1.13 DCP Metadata whose offsets and lengths need LONG1
(>= 2**31), pickled with protocol 2 (GLOBAL opcodes, BINPUT memo).
Regenerating may change bytes (e.g. across Python versions); the tests check values only.
"""
import collections
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Point:
    pass


def values():
    p = Point()
    p.x = 1
    p.y = "a"
    shared = ["s"]
    return {
        "none": None, "true": True, "false": False,
        "small": 7, "medium": 300, "neg": -5, "int32": -70000,
        "big": 2**40, "min": -2**63, "max": 2**63 - 1,
        "float": 1.5, "str": "h\u00e9llo", "long_str": "x" * 300, "bytes": b"\x00\xff",
        "tuple0": (), "tuple1": (1,), "tuple3": (1, 2, 3), "tuple4": (1, 2, 3, 4),
        "list": [1, 2, 3], "nested": {"a": [{"b": 1}]},
        "set": {1}, "frozen": frozenset([2]),
        "obj": p, "od": collections.OrderedDict([("k", 1)]),
        "shared": [shared, shared],
        "many": ["m%d" % i for i in range(260)],
    }


def dcp_large():
    sys.path.insert(0, os.path.join(HERE, "../../../tests/fixtures/dcp/scripts"))
    import patchdc  # noqa: F401  (torch 1.13 dataclasses on Python 3.11)
    import torch
    from torch.distributed._shard.checkpoint import metadata as m
    from torch.distributed._shard.checkpoint.filesystem import _StorageInfo
    from torch.distributed._shard.sharded_tensor.metadata import TensorProperties

    big = 2**31 + 6
    w = m.TensorStorageMetadata(
        properties=TensorProperties(dtype=torch.float32),
        size=torch.Size([big, 2]),
        chunks=[m.ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([big, 2]))])
    return m.Metadata(
        state_dict_metadata={"w": w, "step": m.BytesStorageMetadata()},
        planner_data=None,
        storage_data={
            m.MetadataIndex("step"): _StorageInfo("__0_0.distcp", 0, 431),
            m.MetadataIndex("w", torch.Size([0, 0]), 0): _StorageInfo("__0_1.distcp", 2**32 + 5, 2**34 + 3),
        })


def main():
    v = values()
    for proto in (2, 3, 4, 5):
        with open(os.path.join(HERE, "values_p%d.pickle" % proto), "wb") as f:
            pickle.dump(v, f, protocol=proto)
    with open(os.path.join(HERE, "dcp_large_p2.metadata"), "wb") as f:
        pickle.dump(dcp_large(), f, protocol=2)


if __name__ == "__main__":
    main()
