"""Memory given back to the system: Python's cycles collected, then glibc's freed pages returned (it keeps the pages
of small blocks freed among live ones until malloc_trim: 100-350 MB after loading a large vocabulary's tokenizer,
and an unloaded model's weights). Nothing more where libc is not glibc."""

import ctypes
import gc


def release_freed_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
