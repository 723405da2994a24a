"""ctypes binding of libckptfs-writer, the C API in include/ckptfs/writer.h.

    from ckptfs.writer import Writer, save_safetensors

    with Writer("/ckpt/run1/step100/rank0.pt") as f:   # abort on exception
        torch.save(model.state_dict(), f)
    save_safetensors({"w": weight_on_gpu}, "/ckpt/run1/step100/rank0.safetensors")

Importing this module loads nothing (numpy and torch are optional and never
imported here). The library is loaded at first use, from $CKPTFS_WRITER_LIB,
then beside this package, then the system library path; when it cannot be
found, LibraryNotFoundError (a WriterError, so an OSError) lists where it was
looked for.

Data given to write() and save_safetensors() is passed by address, without a
copy, except when it is not C-contiguous: numpy arrays, torch tensors and
other buffers that are not are first copied into a contiguous temporary (as
torch's own .contiguous() does), so the bytes written are always those of
arr.tobytes() / tensor.contiguous(), in logical order.
"""

import collections
import collections.abc
import ctypes
import ctypes.util
import errno as _errno
import io
import os
import sys
import threading
import warnings

__all__ = [
    "LibraryNotFoundError",
    "Writer",
    "WriterError",
    "WriterInfo",
    "build_info",
    "cuda_available",
    "library_path",
    "save_safetensors",
]

LIBRARY_ENV = "CKPTFS_WRITER_LIB"
_LIBRARY_FILES = ("libckptfs-writer.so.1", "libckptfs-writer.so")

SOURCE_AUTO = 0
SOURCE_HOST = 1
SOURCE_DEVICE = 2
_SOURCES = {"auto": SOURCE_AUTO, "host": SOURCE_HOST, "device": SOURCE_DEVICE}

NO_FAST_PATH = 0x1
NO_DIRECT = 0x2


# --- errors -----------------------------------------------------------------


class WriterError(OSError):
    """A libckptfs-writer call failed.

    .errno is the (positive) errno the library returned, .strerror the
    library's detailed message (ckptfs_writer_last_message), .filename the
    path when the error concerns one. Errors with an errno that Python maps
    to an OSError subclass are also instances of it (ENOENT ->
    FileNotFoundError, EACCES -> PermissionError...), as with open().
    """

    def __str__(self):
        # The library's messages usually name the path already: say it once.
        if self.filename is not None and self.strerror and os.fsdecode(self.filename) in self.strerror:
            return f"[Errno {self.errno}] {self.strerror}"
        return super().__str__()


class LibraryNotFoundError(WriterError):
    """libckptfs-writer could not be loaded; the message says where it looked."""


class _WriterFileNotFoundError(WriterError, FileNotFoundError):
    pass


class _WriterFileExistsError(WriterError, FileExistsError):
    pass


class _WriterPermissionError(WriterError, PermissionError):
    pass


class _WriterIsADirectoryError(WriterError, IsADirectoryError):
    pass


class _WriterNotADirectoryError(WriterError, NotADirectoryError):
    pass


class _WriterInterruptedError(WriterError, InterruptedError):
    pass


class _WriterTimeoutError(WriterError, TimeoutError):
    pass


_ERROR_CLASSES = {
    _errno.ENOENT: _WriterFileNotFoundError,
    _errno.EEXIST: _WriterFileExistsError,
    _errno.EACCES: _WriterPermissionError,
    _errno.EPERM: _WriterPermissionError,
    _errno.EISDIR: _WriterIsADirectoryError,
    _errno.ENOTDIR: _WriterNotADirectoryError,
    _errno.EINTR: _WriterInterruptedError,
    _errno.ETIMEDOUT: _WriterTimeoutError,
}


def _error(err, message, filename=None):
    cls = _ERROR_CLASSES.get(err, WriterError)
    if filename is None:
        return cls(err, message)
    return cls(err, message, filename)


# --- C layout -----------------------------------------------------------------


class WriterOptions(ctypes.Structure):
    """struct ckptfs_writer_options (fill with ckptfs_writer_options_init)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("staging_buffer_bytes", ctypes.c_size_t),
        ("staging_buffer_count", ctypes.c_uint),
        ("cuda_stream", ctypes.c_void_p),
        ("source", ctypes.c_int),
        ("mode", ctypes.c_uint),
        ("flags", ctypes.c_uint),
    ]


class WriterInfoStruct(ctypes.Structure):
    """struct ckptfs_writer_info (struct_size set by the caller)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("bytes", ctypes.c_uint64),
        ("crc32c", ctypes.c_uint32),
        ("fast_path", ctypes.c_int),
        ("direct_io", ctypes.c_int),
    ]


WriterInfo = collections.namedtuple("WriterInfo", ["bytes", "crc32c", "fast_path", "direct_io"])
WriterInfo.__doc__ = """What a writer did: bytes accepted, their CRC32C, whether the
daemon's fast path (its backing file) was used, whether writes were O_DIRECT."""


def _new_info_struct():
    info = WriterInfoStruct()
    info.struct_size = ctypes.sizeof(WriterInfoStruct)
    return info


def _to_info(s):
    return WriterInfo(int(s.bytes), int(s.crc32c), bool(s.fast_path), bool(s.direct_io))


_P = ctypes.c_void_p  # opaque ckptfs_writer* / ckptfs_safetensors*
_PP = ctypes.POINTER(ctypes.c_void_p)
_OPTS = ctypes.POINTER(WriterOptions)
_INFO = ctypes.POINTER(WriterInfoStruct)
_SIGNATURES = {
    "ckptfs_writer_options_init": (None, [_OPTS, ctypes.c_size_t]),
    "ckptfs_writer_open": (ctypes.c_int, [ctypes.c_char_p, _PP]),
    "ckptfs_writer_open_with": (ctypes.c_int, [ctypes.c_char_p, _OPTS, _PP]),
    "ckptfs_writer_write": (ctypes.c_int, [_P, ctypes.c_void_p, ctypes.c_size_t]),
    "ckptfs_writer_write_async": (ctypes.c_int, [_P, ctypes.c_void_p, ctypes.c_size_t]),
    "ckptfs_writer_close": (ctypes.c_int, [_P]),
    "ckptfs_writer_close_info": (ctypes.c_int, [_P, _INFO]),
    "ckptfs_writer_abort": (None, [_P]),
    "ckptfs_writer_get_info": (ctypes.c_int, [_P, _INFO]),
    "ckptfs_writer_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "ckptfs_writer_last_message": (ctypes.c_char_p, []),
    "ckptfs_writer_cuda_available": (ctypes.c_int, []),
    "ckptfs_writer_build_info": (ctypes.c_char_p, []),
    "ckptfs_safetensors_open": (ctypes.c_int, [ctypes.c_char_p, _OPTS, _PP]),
    "ckptfs_safetensors_add": (
        ctypes.c_int,
        [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
         ctypes.c_void_p, ctypes.c_size_t],
    ),
    "ckptfs_safetensors_set_metadata": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p]),
    "ckptfs_safetensors_finish": (ctypes.c_int, [_P]),
    "ckptfs_safetensors_finish_info": (ctypes.c_int, [_P, _INFO]),
    "ckptfs_safetensors_abort": (None, [_P]),
}


# --- loading --------------------------------------------------------------------

_load_lock = threading.Lock()
_lib = None
_lib_path = None
_lib_cuda = None  # cached ckptfs_writer_cuda_available()


def _declare(lib, path):
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryNotFoundError(
                _errno.ELIBBAD, f"{path} is not a usable libckptfs-writer: it lacks {name}()") from None
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def _search():
    """Loads the library; returns (lib, path) or raises LibraryNotFoundError."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        # An explicit choice: no silent fallback to another copy.
        try:
            return _declare(ctypes.CDLL(env), env), env
        except OSError as e:
            if isinstance(e, WriterError):
                raise
            raise LibraryNotFoundError(
                _errno.ENOENT, f"cannot load libckptfs-writer from ${LIBRARY_ENV}={env}: {e}") from None
    tried = []
    package_dir = os.path.dirname(os.path.abspath(__file__))
    for directory in (package_dir, os.path.dirname(package_dir)):
        for file in _LIBRARY_FILES:
            path = os.path.join(directory, file)
            if not os.path.exists(path):
                tried.append(f"{path} (no such file)")
                continue
            try:
                return _declare(ctypes.CDLL(path), path), path
            except WriterError:
                raise
            except OSError as e:
                tried.append(f"{path} ({e})")
    names = []
    found = ctypes.util.find_library("ckptfs-writer")
    if found:
        names.append(found)
    else:
        tried.append("ctypes.util.find_library('ckptfs-writer') (nothing)")
    if "libckptfs-writer.so.1" not in names:
        names.append("libckptfs-writer.so.1")
    for name in names:
        try:
            return _declare(ctypes.CDLL(name), name), name
        except WriterError:
            raise
        except OSError as e:
            tried.append(f"{name} via the system library path ({e})")
    raise LibraryNotFoundError(
        _errno.ENOENT,
        f"libckptfs-writer not found; ${LIBRARY_ENV} is not set and it was looked for at:\n  "
        + "\n  ".join(tried)
        + f"\nSet ${LIBRARY_ENV} to the full path of libckptfs-writer.so.")


def _load():
    global _lib, _lib_path
    lib = _lib
    if lib is not None:
        return lib
    with _load_lock:
        if _lib is None:
            _lib, _lib_path = _search()  # a failure is not cached: fixing the env works
        return _lib


def _check(lib, rc, filename=None):
    """Raises WriterError for a negative errno; reads this thread's message first."""
    if rc >= 0:
        return rc
    message = lib.ckptfs_writer_last_message()
    text = message.decode("utf-8", "replace") if message else ""
    if not text:
        fallback = lib.ckptfs_writer_strerror(rc)
        text = fallback.decode("utf-8", "replace") if fallback else os.strerror(-rc)
    raise _error(-rc, text, filename)


def library_path():
    """The path (or soname) the library was loaded from; loads it if needed."""
    _load()
    return _lib_path


def cuda_available():
    """True when the library can write CUDA device memory (CUDA build and a GPU)."""
    global _lib_cuda
    lib = _load()
    if _lib_cuda is None:
        _lib_cuda = bool(lib.ckptfs_writer_cuda_available())
    return _lib_cuda


def build_info():
    """One line about the library build, e.g. 'ckptfs-writer 0.1.0, CUDA 13.0, 1 device'."""
    text = _load().ckptfs_writer_build_info()
    return text.decode("utf-8", "replace") if text else ""


# --- arguments ------------------------------------------------------------------


def _path_bytes(path):
    path = os.fsencode(os.fspath(path))
    if b"\0" in path:
        raise ValueError("embedded null byte in path")
    return path


def _c_string(text, what):
    if not isinstance(text, str):
        raise TypeError(f"{what} must be str, not {type(text).__name__}")
    if "\0" in text:
        raise ValueError(f"embedded null character in {what} {text!r}")
    return text.encode("utf-8")


def _unsigned(value, bits, what):
    try:
        value = int(value.__index__())
    except AttributeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None
    if not 0 <= value < (1 << bits):
        raise ValueError(f"{what} out of range: {value}")
    return value


def _stream_handle(stream):
    """cudaStream_t of an int, a torch.cuda.Stream (.cuda_stream) or a CuPy stream (.ptr)."""
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    return _unsigned(stream, 64, "cuda_stream") or None


def _make_options(lib, staging_buffer_bytes=None, staging_buffer_count=None, cuda_stream=None,
                  source=None, mode=None, direct=True, fast_path=True):
    # init fills at most our struct's size; an older library fills less and
    # says so in struct_size.
    opts = WriterOptions()
    lib.ckptfs_writer_options_init(ctypes.byref(opts), ctypes.sizeof(WriterOptions))
    if opts.struct_size < ctypes.sizeof(WriterOptions):
        raise WriterError(
            _errno.ELIBBAD,
            f"libckptfs-writer ({_lib_path}) is older than this binding: its options are "
            f"{opts.struct_size} bytes, {ctypes.sizeof(WriterOptions)} expected")
    opts.struct_size = ctypes.sizeof(WriterOptions)
    if staging_buffer_bytes is not None:
        opts.staging_buffer_bytes = _unsigned(staging_buffer_bytes, 8 * ctypes.sizeof(ctypes.c_size_t),
                                              "staging_buffer_bytes")
    if staging_buffer_count is not None:
        opts.staging_buffer_count = _unsigned(staging_buffer_count, 32, "staging_buffer_count")
    handle = _stream_handle(cuda_stream)
    opts.cuda_stream = handle
    if source is not None:
        if isinstance(source, str):
            if source.lower() not in _SOURCES:
                raise ValueError(f"source must be one of {sorted(_SOURCES)}, not {source!r}")
            source = _SOURCES[source.lower()]
        elif source not in _SOURCES.values():
            raise ValueError(f"source must be one of {sorted(_SOURCES)} or 0, 1, 2; not {source!r}")
        opts.source = int(source)
    if mode is not None:
        opts.mode = _unsigned(mode, 32, "mode")
    flags = opts.flags
    if not direct:
        flags |= NO_DIRECT
    if not fast_path:
        flags |= NO_FAST_PATH
    opts.flags = flags
    return opts, handle  # from_buffer keeps `room` alive as long as opts


class _Buffer:
    """Address and size of the bytes of `data`; owns what keeps them alive.

    Use as a context manager around the C call: a buffer-protocol export is
    held (and released on exit), tensors/arrays made contiguous are kept.
    """

    __slots__ = ("addr", "nbytes", "cuda_device", "_keep", "_view")

    def __init__(self, data):
        self.cuda_device = None
        self._keep = data
        self._view = None
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(data, torch.Tensor):
            t = _dense_tensor(torch, data, "write")
            self._keep = t
            self.addr = t.data_ptr()
            self.nbytes = t.numel() * t.element_size()
            if t.is_cuda:
                self.cuda_device = t.device
            return
        np = sys.modules.get("numpy")
        if np is not None and isinstance(data, np.ndarray):
            a = _contiguous_array(data)
            self._keep = a
            self.addr = a.ctypes.data
            self.nbytes = a.nbytes
            return
        if isinstance(data, str):
            raise TypeError("write() argument must be a bytes-like object, a numpy array or a "
                            "torch tensor, not str")
        view = _PyBuffer()
        try:
            _PyObject_GetBuffer(data, ctypes.byref(view), _PyBUF_C_CONTIGUOUS)
        except BufferError:
            # Not C-contiguous (a strided memoryview...): write a contiguous copy.
            data = memoryview(data).tobytes()
            self._keep = data
            _PyObject_GetBuffer(data, ctypes.byref(view), _PyBUF_C_CONTIGUOUS)
        except TypeError:
            raise TypeError("write() argument must be a bytes-like object, a numpy array or a "
                            f"torch tensor, not {type(data).__name__}") from None
        self._view = view
        self.addr = view.buf
        self.nbytes = view.len

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def release(self):
        if self._view is not None:
            view, self._view = self._view, None
            _PyBuffer_Release(ctypes.byref(view))
        self._keep = None


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (stable ABI since 3.11, unchanged since 3.3)."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_void_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# A private handle so that our argtypes never clash with another user of
# ctypes.pythonapi. PyDLL: the GIL is held and Python errors are raised.
_pyapi = ctypes.PyDLL(None, handle=ctypes.pythonapi._handle)
_PyObject_GetBuffer = _pyapi.PyObject_GetBuffer
_PyObject_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_PyObject_GetBuffer.restype = ctypes.c_int
_PyBuffer_Release = _pyapi.PyBuffer_Release
_PyBuffer_Release.argtypes = [ctypes.POINTER(_PyBuffer)]
_PyBuffer_Release.restype = None
_PyBUF_C_CONTIGUOUS = 0x0020 | 0x0010 | 0x0008  # PyBUF_C_CONTIGUOUS (implies STRIDES | ND)


def _dense_tensor(torch, t, what):
    """t as a contiguous dense tensor on CPU or CUDA with no lazy conj/neg bit."""
    if t.layout != torch.strided:
        raise TypeError(f"{what}: only dense (strided) tensors can be written, not {t.layout}")
    if t.device.type not in ("cpu", "cuda"):
        raise TypeError(f"{what}: tensors on {t.device} cannot be written; move them to the CPU or a "
                        "CUDA device first")
    t = t.detach()
    if getattr(t, "is_conj", None) is not None and t.is_conj():
        t = t.resolve_conj()
    if getattr(t, "is_neg", None) is not None and t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t


def _contiguous_array(a):
    if a.dtype.hasobject:
        raise TypeError("numpy arrays of Python objects cannot be written")
    if not a.flags.c_contiguous:
        a = a.copy(order="C")  # np.ascontiguousarray would turn 0-d into 1-d
    return a


def _check_cuda(source, what):
    if source == SOURCE_HOST:
        raise ValueError(f"{what}: a CUDA tensor cannot be written by a writer opened with source='host'")
    if not cuda_available():
        raise WriterError(
            _errno.ENOTSUP,
            f"{what}: this libckptfs-writer cannot read CUDA memory ({build_info()}); "
            "move the tensor to the CPU first (tensor.cpu())")


def _sync_cuda(device, writer_stream):
    """Waits for the work queued on torch's current stream of `device`.

    The library copies on its own stream (or the one given as cuda_stream), not
    ordered after the kernels that produced the tensor or its contiguous copy;
    no wait is needed when the writer uses torch's current stream itself.
    """
    torch = sys.modules["torch"]
    stream = torch.cuda.current_stream(device)
    if writer_stream and stream.cuda_stream == writer_stream:
        return
    stream.synchronize()


# --- Writer ----------------------------------------------------------------------


class Writer(io.RawIOBase):
    """A binary, write-only, unseekable file written through libckptfs-writer.

    write() takes bytes-like objects, numpy arrays and torch tensors (CPU or
    CUDA) and returns the number of bytes written. close() makes the file
    complete and durable and returns its WriterInfo; abort() removes it.
    As a context manager the writer is closed on normal exit and aborted when
    the block raises, so a half-written file never looks saved; a writer that
    is garbage-collected while still open is aborted too (ResourceWarning).

    Options (None: the library's default): staging_buffer_bytes (8 MiB),
    staging_buffer_count (4), cuda_stream (an int cudaStream_t or a
    torch.cuda.Stream; None: the writer's own), source ('auto', 'host',
    'device'), mode (0o666, umask applies), direct=False for buffered writes
    instead of O_DIRECT, fast_path=False to never ask the ckptfs daemon.
    """

    def __init__(self, path, *, staging_buffer_bytes=None, staging_buffer_count=None,
                 cuda_stream=None, source=None, mode=None, direct=True, fast_path=True):
        # Everything __del__ and close() read is set before anything can fail.
        self._handle = None
        self._info = None
        self._pos = 0
        self._lock = threading.Lock()
        self._stream = cuda_stream  # keeps a torch stream object alive
        super().__init__()
        self.name = os.fspath(path)
        path_bytes = _path_bytes(path)
        lib = _load()
        self._lib = lib
        opts, self._stream_handle = _make_options(
            lib, staging_buffer_bytes, staging_buffer_count, cuda_stream, source, mode, direct, fast_path)
        self._source = opts.source
        handle = ctypes.c_void_p()
        _check(lib, lib.ckptfs_writer_open_with(path_bytes, ctypes.byref(opts), ctypes.byref(handle)),
               self.name)
        if not handle.value:
            raise WriterError(_errno.EIO, "ckptfs_writer_open_with returned 0 but no writer", self.name)
        self._handle = handle.value

    # -- writing

    def write(self, data):
        """Appends data; returns once it is written (but for one staging buffer)."""
        return self._write(data, False)

    def write_async(self, data):
        """Appends data; returns once `data` may be reused. Disk errors come later."""
        return self._write(data, True)

    def _write(self, data, use_async):
        self._check_open()
        with _Buffer(data) as buf:
            if buf.cuda_device is not None:
                _check_cuda(self._source, "write")
                _sync_cuda(buf.cuda_device, self._stream_handle)
            with self._lock:
                handle = self._check_open()
                if buf.nbytes:  # nothing to do, and an empty tensor's pointer may be NULL
                    fn = self._lib.ckptfs_writer_write_async if use_async else self._lib.ckptfs_writer_write
                    _check(self._lib, fn(handle, buf.addr, buf.nbytes), self.name)
                self._pos += buf.nbytes
            return buf.nbytes

    def flush(self):
        """Does nothing: bytes go to disk through the staging ring; close() makes them durable."""
        self._check_open()

    # -- ending

    def close(self):
        """Writes what is staged, fdatasyncs, records the file; returns its WriterInfo.

        The writer is closed even when this raises. Closing again returns the
        same info (None after abort()).
        """
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is None:
                return self._info
            info = _new_info_struct()
            _check(self._lib, self._lib.ckptfs_writer_close_info(handle, ctypes.byref(info)), self.name)
            self._info = _to_info(info)
            return self._info

    def abort(self):
        """Stops and removes the partly written file. No effect once closed."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                self._lib.ckptfs_writer_abort(handle)

    def info(self):
        """WriterInfo so far (after close(): the final one)."""
        with self._lock:
            if self._handle is None:
                if self._info is None:
                    raise ValueError("no info: the ckptfs Writer was aborted or its close failed")
                return self._info
            info = _new_info_struct()
            _check(self._lib, self._lib.ckptfs_writer_get_info(self._handle, ctypes.byref(info)), self.name)
            return _to_info(info)

    @property
    def closed(self):
        return self._handle is None

    def _check_open(self):
        handle = self._handle
        if handle is None:
            raise ValueError("I/O operation on closed file.")
        return handle

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        else:
            self.close()
        return False

    def __del__(self):
        if getattr(self, "_handle", None) is None:
            return
        try:
            warnings.warn(f"ckptfs Writer {self.name!r} was never closed: aborted, the partly "
                          "written file is removed", ResourceWarning, source=self)
            self.abort()
        except Exception:  # interpreter shutdown
            pass

    def __reduce_ex__(self, protocol):
        raise TypeError(f"cannot pickle {type(self).__name__} objects")

    # -- the rest of the file interface

    def tell(self):
        """Bytes written so far."""
        self._check_open()
        return self._pos

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def fileno(self):
        raise io.UnsupportedOperation("a ckptfs Writer has no file descriptor")

    def read(self, size=-1):
        raise io.UnsupportedOperation("not readable")

    readall = read

    def readinto(self, b):
        raise io.UnsupportedOperation("not readable")

    def seek(self, offset, whence=0):
        raise io.UnsupportedOperation("a ckptfs Writer is not seekable")

    def truncate(self, size=None):
        raise io.UnsupportedOperation("a ckptfs Writer cannot be truncated")

    def __repr__(self):
        state = "closed" if self.closed else "open"
        return f"<ckptfs.writer.Writer name={self.name!r} {state} bytes={self._pos}>"


# --- safetensors -----------------------------------------------------------------

_TORCH_DTYPE_NAMES = (
    ("float64", "F64"), ("float32", "F32"), ("float16", "F16"), ("bfloat16", "BF16"),
    ("int64", "I64"), ("int32", "I32"), ("int16", "I16"), ("int8", "I8"),
    ("uint64", "U64"), ("uint32", "U32"), ("uint16", "U16"), ("uint8", "U8"),
    ("bool", "BOOL"), ("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2"),
)
# numpy by (kind, itemsize); extension dtypes (ml_dtypes) by name.
_NUMPY_KINDS = {
    ("b", 1): "BOOL", ("u", 1): "U8", ("u", 2): "U16", ("u", 4): "U32", ("u", 8): "U64",
    ("i", 1): "I8", ("i", 2): "I16", ("i", 4): "I32", ("i", 8): "I64",
    ("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64",
}
_NUMPY_NAMES = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


def _torch_code(torch, dtype):
    for name, code in _TORCH_DTYPE_NAMES:
        if getattr(torch, name, None) == dtype:
            return code
    supported = ", ".join(n for n, _ in _TORCH_DTYPE_NAMES if hasattr(torch, n))
    raise TypeError(f"torch dtype {dtype} has no safetensors code (supported: {supported})")


def _numpy_code(dtype):
    code = _NUMPY_NAMES.get(dtype.name) or _NUMPY_KINDS.get((dtype.kind, dtype.itemsize))
    if code is None:
        raise TypeError(f"numpy dtype {dtype} has no safetensors code")
    return code


def _safetensors_entry(name, value):
    """(dtype code, shape, address, nbytes, kept object, CUDA device or None)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        code = _torch_code(torch, value.dtype)
        t = _dense_tensor(torch, value, f"save_safetensors: {name!r}")
        return code, tuple(t.shape), t.data_ptr(), t.numel() * t.element_size(), t, \
            (t.device if t.is_cuda else None)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        code = _numpy_code(value.dtype)
        a = value
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
            a = a.astype(a.dtype.newbyteorder("<"))  # safetensors is little-endian
        a = _contiguous_array(a)
        return code, a.shape, a.ctypes.data, a.nbytes, a, None
    raise TypeError(f"save_safetensors: {name!r} must be a torch tensor or a numpy array, "
                    f"not {type(value).__name__}")


def save_safetensors(tensors, path, metadata=None, **writer_options):
    """Writes `tensors` (a dict of str -> torch tensor or numpy array) as one
    safetensors file, in the dict's order, with `metadata` (str -> str) as the
    header's __metadata__. writer_options are Writer's keyword options. On any
    error the file is removed; when it returns, the file is complete and durable.
    Returns a WriterInfo (size and CRC32C of the whole file, fast path used).
    """
    if not isinstance(tensors, collections.abc.Mapping):
        raise TypeError(f"save_safetensors: tensors must be a dict of str to tensors, "
                        f"not {type(tensors).__name__}")
    entries = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"save_safetensors: tensor names must be str, not "
                            f"{type(name).__name__} ({name!r})")
        entries.append((_c_string(name, "tensor name"),) + _safetensors_entry(name, value))
    meta = []
    if metadata is not None:
        if not isinstance(metadata, collections.abc.Mapping):
            raise TypeError(f"save_safetensors: metadata must be a dict of str to str, "
                            f"not {type(metadata).__name__}")
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"save_safetensors: metadata must map str to str, got "
                                f"{type(key).__name__} {key!r}: {type(value).__name__}")
            meta.append((_c_string(key, "metadata key"), _c_string(value, "metadata value")))
    path_bytes = _path_bytes(path)
    filename = os.fspath(path)
    lib = _load()
    opts, stream_handle = _make_options(lib, **writer_options)
    devices = {e[6] for e in entries if e[6] is not None}
    if devices:
        _check_cuda(opts.source, "save_safetensors")
    handle = ctypes.c_void_p()
    _check(lib, lib.ckptfs_safetensors_open(path_bytes, ctypes.byref(opts), ctypes.byref(handle)), filename)
    s = handle.value
    try:
        for name, code, shape, addr, nbytes, _keep, _device in entries:
            dims = (ctypes.c_int64 * len(shape))(*shape)
            _check(lib, lib.ckptfs_safetensors_add(s, name, code.encode("ascii"), len(shape), dims,
                                                   addr, nbytes), filename)
        for key, value in meta:
            _check(lib, lib.ckptfs_safetensors_set_metadata(s, key, value), filename)
        for device in devices:
            _sync_cuda(device, stream_handle)
    except BaseException:
        lib.ckptfs_safetensors_abort(s)
        raise
    info = _new_info_struct()
    _check(lib, lib.ckptfs_safetensors_finish_info(s, ctypes.byref(info)), filename)  # frees s
    del entries  # the tensors had to live until finish
    return _to_info(info)
