"""Checks of numeric options shared by `cartpole` and `bench`: each bad value is a UsageError
naming the option."""

from __future__ import annotations

from hlofuse.cli.errors import UsageError


def parse_positive_list(text: str, option: str) -> tuple[int, ...]:
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{option}: {item!r} is not an integer") from None
        if value <= 0:
            raise UsageError(f"{option}: {value} is not positive")
        values.append(value)
    if not values:
        raise UsageError(f"{option}: no values given")
    return tuple(dict.fromkeys(values))


def check_positive(value: int, option: str) -> int:
    if value <= 0:
        raise UsageError(f"{option}: {value} is not positive")
    return value


def check_not_negative(value: int, option: str) -> int:
    if value < 0:
        raise UsageError(f"{option}: {value} is negative")
    return value


def check_positive_float(value: float, option: str) -> float:
    if not value > 0:
        raise UsageError(f"{option}: {value} is not positive")
    return value


def check_seed(seed: int) -> int:
    if not 0 <= seed <= 0xFFFFFFFF:
        raise UsageError(f"--seed: {seed} does not fit in 32 bits")
    return seed
