"""Per-kernel profiles: calls, total and median time, bytes moved, share of the run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelProfile:
    """One kernel (or copy) of the program, over all the profiled runs."""

    index: int
    name: str  # the HLO instruction (fusion or unfused instruction), or "copy (reason)"
    kind: str  # kLoop, kInput, kOutput, an opcode, or "copy"
    function: str  # the C function (kernels with identical code share one), or "memcpy"
    calls: int
    total_s: float
    median_s: float
    bytes_read: int  # over all calls
    bytes_written: int
    share: float  # of the whole run's wall time


@dataclass(frozen=True)
class Profile:
    rows: tuple[KernelProfile, ...]  # in program order
    wall_s: float  # all profiled runs together
    runs: int
    runner: str  # "driver" (timed in C) or "thunks" (the Python thunk runner)
    notes: tuple[str, ...] = ()  # the target's word on what ran (which library computed dots)

    @property
    def kernel_s(self) -> float:
        return sum(r.total_s for r in self.rows)

    def by_time(self) -> list[KernelProfile]:
        return sorted(self.rows, key=lambda r: -r.total_s)

    def table(self, limit: int | None = None) -> str:
        """A plain-text table, slowest first."""
        header = (f"{'kernel':<32} {'kind':<10} {'fn':<6} {'calls':>8} {'total ms':>10} "
                  f"{'median us':>10} {'MB read':>9} {'MB written':>10} {'share':>7}")
        lines = [f"{self.runs} run(s), {self.wall_s * 1e3:.3f} ms wall, "
                 f"{self.kernel_s * 1e3:.3f} ms in kernels and copies ({self.runner})", header]
        rows = [r for r in self.by_time() if r.calls]
        for r in rows[:limit]:
            lines.append(f"{r.name[:32]:<32} {r.kind[:10]:<10} {r.function[:6]:<6} {r.calls:>8} "
                         f"{r.total_s * 1e3:>10.3f} {r.median_s * 1e6:>10.2f} "
                         f"{r.bytes_read / 1e6:>9.3f} {r.bytes_written / 1e6:>10.3f} "
                         f"{r.share * 100:>6.1f}%")
        if limit is not None and len(rows) > limit:
            lines.append(f"... {len(rows) - limit} more")
        lines.extend(self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
