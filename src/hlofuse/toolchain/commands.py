"""`hlofuse cache info|clear`: the compiled-object cache."""

from __future__ import annotations

import argparse

from hlofuse.toolchain.cache import Cache, CacheError


def cmd_cache(args: argparse.Namespace) -> int:
    from hlofuse.cli import UsageError

    try:
        cache = Cache.open()
    except CacheError as e:
        raise UsageError(str(e)) from None
    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cache.root}")
        return 0
    objects, total = cache.info()
    print(f"cache: {cache.root}")
    print(f"compiled objects: {objects}")
    print(f"size: {total / 1e6:.2f} MB")
    return 0


def add_cache_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("cache", help="show or clear the cache of compiled kernels "
                                     "($HLOFUSE_CACHE_DIR, else $XDG_CACHE_HOME/hlofuse)")
    p.add_argument("action", choices=("info", "clear"))
    p.set_defaults(handler=cmd_cache)
