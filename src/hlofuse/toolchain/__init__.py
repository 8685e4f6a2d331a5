"""Invoking the C compiler, the on-disk cache of compiled objects, loading them."""

from hlofuse.toolchain.cache import (
    Cache,
    CacheError,
    CacheWarning,
    default_cache_dir,
    ensure_cache_dir,
    max_bytes,
)
from hlofuse.toolchain.compiler import (
    DEFAULT_FLAGS,
    BuildResult,
    CompileError,
    Compiler,
    ToolchainError,
    Unit,
    build_shared_object,
    load_library,
)

__all__ = ["DEFAULT_FLAGS", "BuildResult", "Cache", "CacheError", "CacheWarning",
           "CompileError", "Compiler", "ToolchainError", "Unit", "build_shared_object",
           "default_cache_dir", "ensure_cache_dir", "load_library", "max_bytes"]
