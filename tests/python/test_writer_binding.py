"""Tests of the Python binding ckptfs.writer (python/ckptfs/writer.py) against
the real libckptfs-writer:

    CKPTFS_WRITER_LIB=/path/to/libckptfs-writer.so /usr/bin/python3 -m pytest -v tests/python

Files are written in a temporary directory outside any ckptfs mount, where the
library writes the path itself (no fast path). Contents and CRC32C are checked
against independent references written here: a table-driven CRC32C and a tiny
safetensors parser.
"""

import array
import ctypes
import errno
import gc
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
LIB = os.environ.get("CKPTFS_WRITER_LIB")

if not LIB:
    pytest.skip("CKPTFS_WRITER_LIB is not set: these tests need the built libckptfs-writer.so "
                "(meson sets it for the 'python-writer' test)", allow_module_level=True)
if not os.path.isfile(LIB):
    pytest.skip(f"CKPTFS_WRITER_LIB={LIB} does not exist: build libckptfs-writer first",
                allow_module_level=True)

sys.path.insert(0, str(PYTHON_DIR))
import ckptfs  # noqa: E402
from ckptfs import writer as cw  # noqa: E402

try:
    import numpy as np
except ImportError:  # pragma: no cover - Debian's python3-numpy is expected
    np = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")

KiB = 1024
MiB = 1024 * KiB


# --- independent references ---------------------------------------------------------


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC32C, one table lookup per byte; crc continues a previous value."""
    c = crc ^ 0xFFFFFFFF
    t = _CRC32C_TABLE
    for b in bytes(data):
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def test_crc32c_reference_vectors():
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros
    assert crc32c(b"\xff" * 32) == 0x62A8AB43  # RFC 3720 B.4: 32 bytes of ones
    assert crc32c(b"123456789") == 0xE3069283  # the usual check value
    assert crc32c(b"56789", crc32c(b"1234")) == 0xE3069283
    assert crc32c(b"") == 0


def parse_safetensors(path):
    """Returns ({name: (dtype, shape, bytes)}, metadata, names in data order)."""
    raw = Path(path).read_bytes()
    assert len(raw) >= 8, "shorter than the header length"
    (header_len,) = struct.unpack("<Q", raw[:8])
    assert 8 + header_len <= len(raw), "header length past the end of the file"
    header_text = raw[8:8 + header_len].decode("utf-8")
    assert header_text.startswith("{"), header_text[:40]
    header = json.loads(header_text)
    data = raw[8 + header_len:]
    metadata = header.pop("__metadata__", None)
    tensors = {}
    spans = []
    for name, entry in header.items():
        assert set(entry) == {"dtype", "shape", "data_offsets"}, entry
        begin, end = entry["data_offsets"]
        assert 0 <= begin <= end <= len(data), (name, entry, len(data))
        tensors[name] = (entry["dtype"], entry["shape"], data[begin:end])
        spans.append((begin, end, name))
    spans.sort()
    position = 0
    for begin, end, name in spans:  # the data region is covered exactly, no holes
        assert begin == position, (name, begin, position)
        position = end
    assert position == len(data), "bytes after the last tensor"
    return tensors, metadata, [name for begin, end, name in spans if end > begin]


def pattern(n, seed=0):
    return random.Random(seed * 1000003 + n).randbytes(n)


_crc_cache = {}


def pattern_crc(n, seed=0):
    key = (n, seed)
    if key not in _crc_cache:
        _crc_cache[key] = crc32c(pattern(n, seed))
    return _crc_cache[key]


def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if t.dtype == getattr(torch, name, None):
            t = t.view(torch.uint8)
    return t.numpy().tobytes()


# --- the library is the one asked for --------------------------------------------------


def test_loads_the_library_from_env():
    assert cw.library_path() == LIB
    assert cw.build_info().strip()
    assert isinstance(cw.cuda_available(), bool)
    assert ckptfs.Writer is cw.Writer


def test_struct_sizes_match_the_library():
    lib = cw._load()
    room = (ctypes.c_char * 1024)(*([b"\xee"] * 1024))
    opts = cw.WriterOptions.from_buffer(room)
    lib.ckptfs_writer_options_init(ctypes.byref(opts), ctypes.sizeof(cw.WriterOptions))
    assert opts.struct_size == ctypes.sizeof(cw.WriterOptions)
    # Never past the size the caller gave.
    assert room[ctypes.sizeof(cw.WriterOptions)] == b"\xee"
    small = (ctypes.c_char * 64)(*([b"\xee"] * 64))
    lib.ckptfs_writer_options_init(ctypes.cast(small, ctypes.POINTER(cw.WriterOptions)), 16)
    assert small[16] == b"\xee" and cw.WriterOptions.from_buffer(small).struct_size == 16
    assert opts.staging_buffer_bytes > 0
    assert opts.staging_buffer_count >= 2
    assert opts.cuda_stream is None
    assert opts.source == cw.SOURCE_AUTO


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to read the C layout")
def test_struct_layout_matches_writer_h(tmp_path):
    fields = {
        "ckptfs_writer_options": cw.WriterOptions,
        "ckptfs_writer_info": cw.WriterInfoStruct,
    }
    lines = []
    for struct_name, cls in fields.items():
        lines.append(f'printf("{struct_name} size %zu\\n", sizeof({struct_name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{struct_name} {field} %zu %zu\\n", '
                         f'offsetof({struct_name}, {field}), sizeof((({struct_name}*)0)->{field}));')
    source = tmp_path / "layout.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include <ckptfs/writer.h>\n"
                      "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-I", str(REPO / "include"), "-o", str(exe), str(source)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    expected = []
    for struct_name, cls in fields.items():
        expected.append(f"{struct_name} size {ctypes.sizeof(cls)}")
        for field, _ in cls._fields_:
            descriptor = getattr(cls, field)
            expected.append(f"{struct_name} {field} {descriptor.offset} {descriptor.size}")
    assert out[:-1] == expected


# --- sizes, contents, CRC32C -------------------------------------------------------------

SIZES = [0, 1, 4095, 4096, MiB + 1, 64 * MiB]


def _chunks(data):
    """Uneven pieces: small, page-sized, odd, and bigger than a staging buffer."""
    sizes = [1, 4095, 4097, 3 * MiB + 5, 7, 9 * MiB + 3]
    view = memoryview(data)
    i = k = 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        yield view[i:i + n]
        i += n
        k += 1


@pytest.mark.parametrize("how", ["one_write", "chunks"])
@pytest.mark.parametrize("size", SIZES, ids=lambda n: f"{n}B")
def test_sizes(tmp_path, size, how):
    data = pattern(size)
    path = tmp_path / "out.bin"
    w = cw.Writer(path)
    if how == "one_write":
        assert w.write(data) == size
    else:
        for piece in _chunks(data):
            assert w.write(piece) == len(piece)
    assert w.tell() == size
    assert w.info().bytes == size
    info = w.close()
    assert w.closed
    assert info == w.info() == w.close()  # closing again gives the same info
    assert info.bytes == size
    assert info.crc32c == pattern_crc(size), f"library CRC32C {info.crc32c:#010x}"
    assert info.fast_path is False  # not inside a ckptfs mount
    assert isinstance(info.direct_io, bool)
    assert path.stat().st_size == size
    assert path.read_bytes() == data


@pytest.mark.parametrize("options", [
    dict(direct=False),
    dict(fast_path=False),
    dict(staging_buffer_bytes=4096, staging_buffer_count=2),
    dict(staging_buffer_bytes=5000, staging_buffer_count=3, direct=False),  # rounded up to 8 KiB
    dict(source="host"),
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_options(tmp_path, options):
    size = MiB + 1
    data = pattern(size, seed=1)
    path = tmp_path / "out.bin"
    with cw.Writer(path, **options) as w:
        for piece in _chunks(data):
            w.write(piece)
    info = w.info()
    assert info.bytes == size
    assert info.crc32c == pattern_crc(size, seed=1)
    if options.get("direct") is False:
        assert info.direct_io is False
    assert path.read_bytes() == data


def test_mode_of_a_new_file(tmp_path):
    path = tmp_path / "private.bin"
    umask = os.umask(0o022)
    try:
        with cw.Writer(path, mode=0o640) as w:
            w.write(b"x")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o7777 == 0o640


def test_existing_file_is_truncated(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"an older and much longer content" * 1000)
    with cw.Writer(str(path)) as w:
        w.write(b"new")
    assert path.read_bytes() == b"new"


# --- what write() accepts ------------------------------------------------------------------


def test_bytes_like_inputs(tmp_path):
    backing = bytearray(b"--a writable view--")
    inputs = [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"xx read-only view with an offset xx")[2:-2],
        memoryview(backing)[2:-2],
        array.array("i", [1, -2, 3]),
        memoryview(b"0a1b2c3d4e")[1::2],  # not contiguous: written as a copy
        memoryview(array.array("d", [1.5, 2.5])).cast("B"),
        b"",
    ]
    expected = b"".join(memoryview(x).tobytes() for x in inputs)
    path = tmp_path / "out.bin"
    with cw.Writer(path) as w:
        for x in inputs:
            assert w.write(x) == memoryview(x).nbytes
    assert path.read_bytes() == expected
    assert w.info().crc32c == crc32c(expected)


def test_a_bytearray_cannot_be_resized_while_written(tmp_path):
    # The binding holds a buffer export during the C call; after it, resizing works again.
    data = bytearray(pattern(MiB))
    with cw.Writer(tmp_path / "out.bin") as w:
        w.write(data)
        data.extend(b"more")
    assert len(data) == MiB + 4


@needs_numpy
def test_numpy_inputs(tmp_path):
    base = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    readonly = np.arange(10, dtype=np.int64)
    readonly.setflags(write=False)
    inputs = [
        base,
        base[:, ::3],  # not contiguous: written as a contiguous copy, C order
        np.asfortranarray(base),  # Fortran order: written in C (logical) order
        base[2:4],  # a view with an offset
        np.array(3.25, dtype=np.float64),  # 0-d
        np.array([True, False, True]),
        np.zeros((0, 5), dtype=np.int16),
        readonly,
        np.arange(5, dtype=">u4"),  # big-endian: its bytes as they are
    ]
    expected = b"".join(a.tobytes() for a in inputs)
    path = tmp_path / "out.bin"
    with cw.Writer(path) as w:
        for a in inputs:
            assert w.write(a) == a.nbytes
    assert path.read_bytes() == expected
    assert w.info().crc32c == crc32c(expected)


@needs_numpy
def test_numpy_object_arrays_are_rejected(tmp_path):
    with cw.Writer(tmp_path / "out.bin") as w:
        with pytest.raises(TypeError, match="Python objects"):
            w.write(np.array([object()]))
        w.write(b"still usable")
    assert (tmp_path / "out.bin").read_bytes() == b"still usable"


@needs_torch
def test_torch_cpu_inputs(tmp_path):
    g = torch.Generator().manual_seed(0)
    matrix = torch.randn(64, 33, generator=g)
    inputs = [
        matrix,
        matrix.t(),  # not contiguous
        matrix[5:9],  # storage offset
        matrix.to(torch.bfloat16),
        matrix.to(torch.float16)[:, 1::2],
        torch.tensor(7, dtype=torch.int64),  # 0-d
        torch.tensor([True, False]),
        torch.empty(0, 3),
        torch.ones(4, requires_grad=True),
        torch.arange(-5, 5, dtype=torch.int8),
    ]
    expected = b"".join(tensor_bytes(t) for t in inputs)
    path = tmp_path / "out.bin"
    with cw.Writer(path) as w:
        for t in inputs:
            assert w.write(t) == t.numel() * t.element_size()
    assert path.read_bytes() == expected
    assert w.info().crc32c == crc32c(expected)


@needs_torch
def test_torch_conjugate_view_is_resolved(tmp_path):
    z = torch.complex(torch.arange(4.0), torch.ones(4))
    path = tmp_path / "out.bin"
    with cw.Writer(path) as w:
        w.write(z.conj())
    assert path.read_bytes() == z.conj().resolve_conj().numpy().tobytes()


def test_wrong_types_are_rejected(tmp_path):
    path = tmp_path / "out.bin"
    with cw.Writer(path) as w:
        for bad in ["text", 12, 3.5, None, object(), [1, 2]]:
            with pytest.raises(TypeError):
                w.write(bad)
        w.write(b"ok")
    assert path.read_bytes() == b"ok"


# --- write_async ---------------------------------------------------------------------------------


def test_write_async_buffers_may_be_reused_at_once(tmp_path):
    piece = 3 * MiB + 17
    buf = bytearray(piece)
    expected = bytearray()
    path = tmp_path / "out.bin"
    with cw.Writer(path, staging_buffer_bytes=MiB, staging_buffer_count=2) as w:
        for i in range(6):
            buf[:] = pattern(piece, seed=10 + i)
            expected += buf
            assert w.write_async(buf) == piece
            buf[:] = bytes(piece)  # reused as soon as write_async returned
        w.write(b"tail")
        expected += b"tail"
        w.write_async(memoryview(b"async tail")[1:])
        expected += b"sync tail"
    info = w.info()
    assert info.bytes == len(expected)
    assert info.crc32c == crc32c(expected)
    assert path.read_bytes() == expected


@needs_numpy
def test_write_async_numpy(tmp_path):
    a = np.arange(MiB, dtype=np.uint16)
    path = tmp_path / "out.bin"
    with cw.Writer(path) as w:
        w.write_async(a[::2])
        w.write_async(a)
    assert path.read_bytes() == a[::2].tobytes() + a.tobytes()


# --- ending: close, abort, context manager ---------------------------------------------------


def test_context_manager_aborts_on_exception(tmp_path):
    path = tmp_path / "half.bin"
    with pytest.raises(RuntimeError, match="boom"):
        with cw.Writer(path) as w:
            w.write(pattern(3 * MiB))
            raise RuntimeError("boom")
    assert w.closed
    assert not path.exists(), "a half-written file must not stay"
    with pytest.raises(ValueError):
        w.info()


def test_context_manager_aborts_on_keyboard_interrupt(tmp_path):
    path = tmp_path / "half.bin"
    with pytest.raises(KeyboardInterrupt):
        with cw.Writer(path) as w:
            w.write(b"x" * 100)
            raise KeyboardInterrupt
    assert not path.exists()


def test_abort_removes_the_file_and_abort_after_close_does_nothing(tmp_path):
    aborted = tmp_path / "aborted.bin"
    w = cw.Writer(aborted)
    w.write(pattern(MiB))
    w.abort()
    w.abort()
    assert w.closed and not aborted.exists()
    assert w.close() is None

    kept = tmp_path / "kept.bin"
    w = cw.Writer(kept)
    w.write(b"kept")
    w.close()
    w.abort()
    assert kept.read_bytes() == b"kept"


def test_an_unclosed_writer_is_aborted_when_collected(tmp_path):
    path = tmp_path / "dropped.bin"
    w = cw.Writer(path)
    w.write(b"x" * 10000)
    with pytest.warns(ResourceWarning, match="never closed"):
        del w
        gc.collect()
    assert not path.exists()


def test_operations_on_a_closed_writer(tmp_path):
    w = cw.Writer(tmp_path / "out.bin")
    w.close()
    for call in (lambda: w.write(b"x"), lambda: w.write_async(b"x"), w.flush, w.tell,
                 lambda: w.write("text"), w.__enter__):
        with pytest.raises(ValueError, match="closed"):
            call()


def test_file_interface(tmp_path):
    path = tmp_path / "out.bin"
    w = cw.Writer(path)
    assert isinstance(w, io.RawIOBase)
    assert w.name == str(path)
    assert w.writable() and not w.readable() and not w.seekable()
    assert not w.closed and not w.isatty()
    w.flush()
    for call in (w.fileno, w.read, lambda: w.readinto(bytearray(1)), lambda: w.seek(0),
                 w.truncate):
        with pytest.raises(io.UnsupportedOperation):
            call()
    w.writelines([b"a", b"bc"])
    assert w.tell() == 3
    assert "out.bin" in repr(w)
    w.close()
    assert path.read_bytes() == b"abc"


def test_buffered_writer_on_top(tmp_path):
    path = tmp_path / "out.bin"
    raw = cw.Writer(path)
    with io.BufferedWriter(raw, buffer_size=64 * KiB) as f:
        for i in range(1000):
            f.write(b"%d," % i)
    assert raw.closed
    assert path.read_bytes() == b"".join(b"%d," % i for i in range(1000))


def test_writers_in_threads(tmp_path):
    errors = []

    def run(i):
        try:
            with cw.Writer(tmp_path / f"t{i}.bin", staging_buffer_bytes=MiB) as w:
                for piece in _chunks(pattern(8 * MiB, seed=i)):
                    w.write(piece)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        assert (tmp_path / f"t{i}.bin").read_bytes() == pattern(8 * MiB, seed=i)


def test_writer_cannot_be_pickled(tmp_path):
    import pickle

    with cw.Writer(tmp_path / "out.bin") as w:
        with pytest.raises(TypeError):
            pickle.dumps(w)


# --- errors ------------------------------------------------------------------------------------


def test_missing_directory_is_enoent(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "out.bin"
    with pytest.raises(cw.WriterError) as caught:
        cw.Writer(path)
    e = caught.value
    assert e.errno == errno.ENOENT
    assert isinstance(e, FileNotFoundError) and isinstance(e, OSError)
    assert e.filename == str(path)
    assert e.strerror  # the library's message (or strerror)
    assert str(e).count(str(path)) == 1, str(e)
    assert not path.parent.exists()


def test_directory_as_path_is_eisdir(tmp_path):
    with pytest.raises(cw.WriterError) as caught:
        cw.Writer(tmp_path)
    assert caught.value.errno == errno.EISDIR
    assert isinstance(caught.value, IsADirectoryError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions")
def test_read_only_directory_is_eacces(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    with pytest.raises(PermissionError) as caught:
        cw.Writer(ro / "out.bin")
    assert isinstance(caught.value, cw.WriterError) and caught.value.errno == errno.EACCES


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="null"):
        cw.Writer(str(tmp_path / "a\0b"))
    with pytest.raises(ValueError):
        cw.Writer(tmp_path / "x", staging_buffer_count=-1)
    with pytest.raises(ValueError):
        cw.Writer(tmp_path / "x", staging_buffer_count=1 << 32)
    with pytest.raises(ValueError):
        cw.Writer(tmp_path / "x", source="gpu")
    with pytest.raises(TypeError):
        cw.Writer(tmp_path / "x", mode="rw")
    with pytest.raises(TypeError):
        cw.Writer(tmp_path / "x", buffering=0)
    assert not (tmp_path / "x").exists()


# --- torch.save --------------------------------------------------------------------------------


def _assert_same(a, b):
    if torch is not None and isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b


def _checkpoint():
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(256, 512, generator=g)
    return {
        "model": {
            "weight": weight,
            "weight_t": weight.t(),  # shares the storage: saved once
            "bias": torch.randn(512, generator=g).to(torch.bfloat16),
            "half": torch.randn(17, generator=g).half(),
            "steps": torch.arange(10, dtype=torch.int64),
            "mask": torch.rand(33, generator=g) > 0.5,
            "big": torch.randn(4 * MiB, generator=g),  # 16 MiB
        },
        "optimizer": {"lr": 1e-3, "betas": (0.9, 0.999), "state": [torch.zeros(3, dtype=torch.int32)]},
        "step": 100,
        "name": "run1",
    }


@needs_torch
@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_torch_save_through_writer(tmp_path, zipfile):
    obj = _checkpoint()
    path = tmp_path / "ckpt.pt"
    with cw.Writer(path) as f:
        torch.save(obj, f, _use_new_zipfile_serialization=zipfile)
    info = f.info()
    raw = path.read_bytes()
    assert info.bytes == len(raw)
    assert info.crc32c == crc32c(raw)
    loaded = torch.load(path)
    _assert_same(obj, loaded)
    assert loaded["model"]["weight_t"].data_ptr() == loaded["model"]["weight"].data_ptr()


@needs_torch
def test_torch_save_error_aborts(tmp_path):
    path = tmp_path / "ckpt.pt"

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle this")

    with pytest.raises(RuntimeError, match="cannot pickle"):
        with cw.Writer(path) as f:
            torch.save({"w": torch.ones(MiB), "bad": Unpicklable()}, f)
    assert not path.exists()


# --- save_safetensors --------------------------------------------------------------------------


def _torch_safetensors_inputs():
    g = torch.Generator().manual_seed(5)
    base = torch.randn(8, 12, generator=g)
    tensors = {
        "f64": base.double(),
        "f32": base,
        "f16": base.half(),
        "bf16": base.to(torch.bfloat16),
        "i64": torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4),
        "i32": torch.arange(7, dtype=torch.int32),
        "i16": torch.arange(-3, 3, dtype=torch.int16),
        "i8": torch.arange(-4, 4, dtype=torch.int8).reshape(2, 2, 2),
        "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([[True, False], [False, True]]),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 4),
        "transposed": base.t(),  # not contiguous
        "sliced": base[2:5, 1:7],
    }
    codes = {"f64": "F64", "f32": "F32", "f16": "F16", "bf16": "BF16", "i64": "I64", "i32": "I32",
             "i16": "I16", "i8": "I8", "u8": "U8", "bool": "BOOL", "scalar": "F32", "empty": "F32",
             "transposed": "F32", "sliced": "F32"}
    for name, code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
        dtype = getattr(torch, name, None)
        if dtype is not None:
            tensors[name] = base.to(dtype)
            codes[name] = code
    return tensors, codes


@needs_torch
def test_save_safetensors_torch(tmp_path):
    tensors, codes = _torch_safetensors_inputs()
    path = tmp_path / "model.safetensors"
    metadata = {"format": "pt", "step": "100", "note": 'quotes " and \\ and unicode \u00e9'}
    info = cw.save_safetensors(tensors, path, metadata=metadata)
    assert info.bytes == os.path.getsize(path)
    assert info.crc32c == crc32c(path.read_bytes())
    parsed, parsed_metadata, order = parse_safetensors(path)
    assert parsed_metadata == metadata
    assert set(parsed) == set(tensors)
    for name, t in tensors.items():
        dtype, shape, data = parsed[name]
        assert dtype == codes[name], name
        assert shape == list(t.shape), name
        assert data == tensor_bytes(t), name
    assert order == [n for n, t in tensors.items() if t.numel()]  # in the order added


@needs_numpy
def test_save_safetensors_numpy(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    arrays = {
        "f64": a.astype(np.float64),
        "f32": a,
        "f16": a.astype(np.float16),
        "i64": a.astype(np.int64),
        "i32": a.astype(np.int32),
        "i16": a.astype(np.int16),
        "i8": a.astype(np.int8),
        "u8": a.astype(np.uint8),
        "u16": a.astype(np.uint16),
        "bool": a > 10,
        "strided": a[:, ::2],  # not contiguous
        "fortran": np.asfortranarray(a),
        "big_endian": a.astype(">f4"),  # stored little-endian, as safetensors is
        "scalar": np.array(7, dtype=np.int64),
    }
    codes = {"f64": "F64", "f32": "F32", "f16": "F16", "i64": "I64", "i32": "I32", "i16": "I16",
             "i8": "I8", "u8": "U8", "u16": "U16", "bool": "BOOL", "strided": "F32", "fortran": "F32",
             "big_endian": "F32", "scalar": "I64"}
    path = tmp_path / "arrays.safetensors"
    cw.save_safetensors(arrays, str(path))
    parsed, metadata, order = parse_safetensors(path)
    assert metadata is None
    for name, arr in arrays.items():
        dtype, shape, data = parsed[name]
        assert dtype == codes[name], name
        assert shape == list(arr.shape), name
        assert data == arr.astype(arr.dtype.newbyteorder("<")).tobytes(), name


@needs_torch
@needs_numpy
def test_save_safetensors_mixed_with_options(tmp_path):
    tensors = {"t": torch.arange(MiB, dtype=torch.int32), "a": np.arange(3, dtype=np.int8)}
    path = tmp_path / "mixed.safetensors"
    cw.save_safetensors(tensors, path, staging_buffer_bytes=64 * KiB, staging_buffer_count=2, direct=False)
    parsed, _, _ = parse_safetensors(path)
    assert parsed["t"] == ("I32", [MiB], tensor_bytes(tensors["t"]))
    assert parsed["a"] == ("I8", [3], b"\x00\x01\x02")


def test_save_safetensors_empty_dict(tmp_path):
    path = tmp_path / "empty.safetensors"
    cw.save_safetensors({}, path, metadata={"k": "v"})
    parsed, metadata, _ = parse_safetensors(path)
    assert parsed == {} and metadata == {"k": "v"}


@needs_torch
def test_save_safetensors_validation(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(b"previous content")
    good = torch.ones(2)
    cases = [
        ({1: good}, None, "names must be str"),
        ({"a": [1.0, 2.0]}, None, "torch tensor or a numpy array"),
        ({"a": b"bytes"}, None, "torch tensor or a numpy array"),
        ({"a": torch.ones(2, dtype=torch.complex64)}, None, "no safetensors code"),
        ({"a": good}, {"k": 1}, "metadata must map str to str"),
        ({"a": good}, {2: "v"}, "metadata must map str to str"),
        ({"a": good}, ["k", "v"], "metadata must be a dict"),
        ([("a", good)], None, "must be a dict"),
    ]
    for tensors, metadata, message in cases:
        with pytest.raises(TypeError, match=message):
            cw.save_safetensors(tensors, path, metadata=metadata)
    with pytest.raises(ValueError, match="null"):
        cw.save_safetensors({"a\0b": good}, path)
    with pytest.raises(TypeError):
        cw.save_safetensors({"a": good}, path, no_such_option=1)
    # Arguments are checked before the file is opened: nothing was truncated.
    assert path.read_bytes() == b"previous content"


@needs_torch
def test_save_safetensors_library_error_removes_the_file(tmp_path):
    # "__metadata__" is reserved by the format: the library must refuse it as a tensor name.
    path = tmp_path / "reserved.safetensors"
    with pytest.raises(cw.WriterError) as caught:
        cw.save_safetensors({"a": torch.ones(2), "__metadata__": torch.ones(1)}, path)
    assert caught.value.errno == errno.EINVAL
    assert not path.exists()


def test_save_safetensors_missing_directory(tmp_path):
    path = tmp_path / "missing" / "x.safetensors"
    with pytest.raises(FileNotFoundError) as caught:
        cw.save_safetensors({}, path)
    assert isinstance(caught.value, cw.WriterError) and caught.value.errno == errno.ENOENT


# --- CUDA ----------------------------------------------------------------------------------


def _skip_without_cuda():
    if torch is None:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch.cuda.is_available() is False: no CUDA device on this machine")


def test_cuda_tensors(tmp_path):
    _skip_without_cuda()
    g = torch.Generator().manual_seed(9)
    host = torch.randn(3 * MiB + 5, generator=g)
    device = host.cuda()
    path = tmp_path / "cuda.bin"
    if not cw.cuda_available():
        with pytest.raises(cw.WriterError) as caught:
            with cw.Writer(path) as w:
                w.write(device)
        assert caught.value.errno == errno.ENOTSUP
        assert not path.exists()
        pytest.skip(f"the library cannot read CUDA memory ({cw.build_info()}); checked that it says so")
    # Queued on torch's current stream behind a long kernel: the binding must
    # wait for it, the library copies on its own stream.
    late = device.clone()
    torch.cuda._sleep(200_000_000)
    late.mul_(2)
    with cw.Writer(path, staging_buffer_bytes=MiB) as w:
        w.write(late)
        w.write(device[:3 * MiB].view(-1, 8)[:, ::2])  # a non-contiguous CUDA tensor
        w.write_async(device[:1000])
        w.write(host[:10])  # host memory in between
    expected = (tensor_bytes(host * 2) + tensor_bytes(host[:3 * MiB].view(-1, 8)[:, ::2])
                + tensor_bytes(host[:1000]) + tensor_bytes(host[:10]))
    assert path.read_bytes() == expected
    assert w.info().crc32c == crc32c(expected)

    # The writer on torch's stream: no wait by the binding, the library's
    # copies are queued behind the kernel.
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        late = device.clone()
        torch.cuda._sleep(200_000_000)
        late.mul_(3)
        with cw.Writer(path, cuda_stream=stream, source="device") as w:
            w.write(late)
    assert path.read_bytes() == tensor_bytes(host * 3)

    tensors = {"w": device[:3 * MiB].view(-1, 8)[:, 1:3].to(torch.bfloat16), "h": host[:7],
               "d": device[:5]}
    torch.cuda._sleep(200_000_000)
    tensors["d"].mul_(-1)
    st = tmp_path / "cuda.safetensors"
    cw.save_safetensors(tensors, st)
    parsed, _, _ = parse_safetensors(st)
    for name, t in tensors.items():
        assert parsed[name][2] == tensor_bytes(t), name
    assert parsed["d"][2] == tensor_bytes(-host[:5])


def test_cuda_tensor_with_host_source_is_refused(tmp_path):
    _skip_without_cuda()
    with cw.Writer(tmp_path / "x.bin", source="host") as w:
        with pytest.raises(ValueError, match="source='host'"):
            w.write(torch.ones(4, device="cuda"))


# --- finding the library; optional imports ------------------------------------------------


def _run_python(code, env_update, cwd):
    env = {k: v for k, v in os.environ.items() if k != "CKPTFS_WRITER_LIB"}
    env.update(env_update)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_import_without_numpy_and_torch(tmp_path):
    code = f"""
        import sys
        sys.modules["numpy"] = None  # import numpy now fails
        sys.modules["torch"] = None
        sys.path.insert(0, {str(PYTHON_DIR)!r})
        import ckptfs.writer as cw
        with cw.Writer({str(tmp_path / "plain.bin")!r}) as w:
            w.write(b"no numpy, no torch")
        print("ok", "numpy" in sys.modules and sys.modules["numpy"] is not None)
    """
    result = _run_python(code, {"CKPTFS_WRITER_LIB": LIB}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "False"]
    assert (tmp_path / "plain.bin").read_bytes() == b"no numpy, no torch"


def test_import_does_not_load_the_library(tmp_path):
    code = f"""
        import sys
        sys.path.insert(0, {str(PYTHON_DIR)!r})
        import ckptfs, ckptfs.writer as cw
        assert "torch" not in sys.modules and "numpy" not in sys.modules
        try:
            cw.Writer({str(tmp_path / "x.bin")!r})
        except cw.LibraryNotFoundError as e:
            assert isinstance(e, cw.WriterError) and isinstance(e, OSError)
            print(e.errno)
            print(e)
    """
    missing = str(tmp_path / "nowhere" / "libckptfs-writer.so")
    result = _run_python(code, {"CKPTFS_WRITER_LIB": missing}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{errno.ENOENT}\n")
    assert missing in result.stdout and "CKPTFS_WRITER_LIB" in result.stdout


def test_library_beside_the_package(tmp_path):
    package = tmp_path / "site" / "ckptfs"
    shutil.copytree(PYTHON_DIR / "ckptfs", package, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    os.symlink(LIB, package / "libckptfs-writer.so.1")
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "site")!r})
        import ckptfs.writer as cw
        print(cw.library_path())
    """
    result = _run_python(code, {}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(package / "libckptfs-writer.so.1")


def test_not_found_lists_where_it_looked(tmp_path):
    package = tmp_path / "site" / "ckptfs"
    shutil.copytree(PYTHON_DIR / "ckptfs", package, ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    code = f"""
        import sys
        sys.path.insert(0, {str(tmp_path / "site")!r})
        import ckptfs.writer as cw
        try:
            print("loaded", cw.library_path())
        except cw.LibraryNotFoundError as e:
            print(e)
    """
    result = _run_python(code, {"LD_LIBRARY_PATH": ""}, tmp_path)
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("loaded"):
        pytest.skip(f"a libckptfs-writer is installed on this system: {result.stdout.strip()}")
    for where in (package / "libckptfs-writer.so.1", package / "libckptfs-writer.so",
                  package.parent / "libckptfs-writer.so.1", "find_library", "CKPTFS_WRITER_LIB"):
        assert str(where) in result.stdout
