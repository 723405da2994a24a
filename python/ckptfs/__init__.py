"""ckptfs: Python side of the ckptfs checkpoint filesystem.

`ckptfs.writer` binds libckptfs-writer (the C writer library) with ctypes: no build
step, and importing it loads nothing; the library is looked up at first use.
"""

from .writer import (  # noqa: F401  (re-exported)
    LibraryNotFoundError,
    Writer,
    WriterError,
    WriterInfo,
    build_info,
    cuda_available,
    library_path,
    save_safetensors,
)

from .writer import __all__  # noqa: E402  (one list of public names, in writer.py)
