"""Shared by the scripts that drive torch 1.13's DCP (tests and benchmarks).

Importing this module BEFORE torch makes ``torch.distributed._shard`` importable on
Python 3.11: torch 1.13's sharded-tensor metadata uses dataclass instances as
dataclass field defaults, which 3.11 rejects as "mutable defaults" unless the class
is hashable, so unhashable dataclasses get the identity hash as they are created.

``free_port()`` gives a free TCP port on 127.0.0.1 for a gloo process group.
"""
import dataclasses
import socket

_orig_process_class = dataclasses._process_class


def _process_class(cls, *args, **kwargs):
    cls = _orig_process_class(cls, *args, **kwargs)
    if cls.__dict__.get("__hash__", object.__hash__) is None:
        cls.__hash__ = object.__hash__
    return cls


dataclasses._process_class = _process_class


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
