#!/usr/bin/python3
"""The baseline of bench/unshard (c): unshard a DCP checkpoint with torch 1.13 the way
`dcp_to_torch_save` does (2.x; 1.13 has no format_utils): read .metadata, allocate
every tensor full-size from it, `load_state_dict(..., no_dist=True)` into them (DCP's
own resharding reads every chunk), then `torch.save` the dict of full tensors.

    to_torch_save.py DCP_DIR OUT.pt [--prefix model.]

Only tensors whose FQN starts with --prefix are kept (default "model."; the output keys
drop it, as model.safetensors does). Prints {"load_s", "save_s", "bytes"} as JSON.
"""
import json
import os
import sys
import time

# The torch 1.13 shim lives with the tests (tests/integration/torch113_compat.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
import torch113_compat  # noqa: E402,F401  (must come before torch)

import torch  # noqa: E402
import torch.distributed._shard.checkpoint as dcp  # noqa: E402
from torch.distributed._shard.checkpoint.metadata import TensorStorageMetadata  # noqa: E402


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--prefix", default="model.")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    reader = dcp.FileSystemReader(a.src)
    md = reader.read_metadata()
    sd = {}
    for fqn, tmd in md.state_dict_metadata.items():
        if isinstance(tmd, TensorStorageMetadata) and fqn.startswith(a.prefix):
            sd[fqn] = torch.empty(tmd.size, dtype=tmd.properties.dtype)
    dcp.load_state_dict(sd, reader, no_dist=True)
    t1 = time.perf_counter()
    out = {k[len(a.prefix):]: v for k, v in sd.items()}
    torch.save(out, a.out)
    t2 = time.perf_counter()
    print(json.dumps({"load_s": t1 - t0, "save_s": t2 - t1,
                      "bytes": sum(v.numel() * v.element_size() for v in out.values())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
