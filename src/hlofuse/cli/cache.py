"""`hlofuse cache info|clear`: the compiled-object cache."""

from __future__ import annotations

import argparse

from hlofuse.cli.errors import UsageError
from hlofuse.toolchain.cache import Cache, CacheError, max_bytes


def cmd_cache(args: argparse.Namespace) -> int:
    try:
        cache = Cache.open()
    except CacheError as e:
        raise UsageError(str(e)) from None
    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cache.root}")
        return 0
    try:
        cap = max_bytes()
    except CacheError as e:
        raise UsageError(str(e)) from None
    objects, total = cache.info()
    print(f"cache: {cache.root}" + (" (temporary: the directory cannot be written)"
                                    if cache.fallback else ""))
    print(f"compiled objects: {objects}")
    print(f"compiled programs: {cache.plans()}")
    print(f"size: {total / 1e6:.2f} MB of {cap / 1e6:.0f} MB "
          "(HLOFUSE_CACHE_MAX_BYTES; least recently used entries are removed beyond it)")
    return 0


def add_cache_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cache", help="show or clear the cache of compiled kernels "
                                     "($HLOFUSE_CACHE_DIR, else $XDG_CACHE_HOME/hlofuse)")
    p.add_argument("action", choices=("info", "clear"))
    p.set_defaults(handler=cmd_cache)
