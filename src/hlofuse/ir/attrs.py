"""Structured attribute values of HLO instructions (slices, padding, windows, metadata)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1

    def text(self) -> str:
        if self.stride == 1:
            return f"[{self.start}:{self.limit}]"
        return f"[{self.start}:{self.limit}:{self.stride}]"


@dataclass(frozen=True, slots=True)
class PaddingDim:
    low: int
    high: int
    interior: int = 0

    def text(self) -> str:
        if self.interior == 0:
            return f"{self.low}_{self.high}"
        return f"{self.low}_{self.high}_{self.interior}"


@dataclass(frozen=True, slots=True)
class Window:
    """A reduce-window window; every field has one entry per dimension."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    lhs_dilate: tuple[int, ...]
    rhs_dilate: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.size)

    @staticmethod
    def of(size: tuple[int, ...], stride: tuple[int, ...] | None = None,
           padding: tuple[tuple[int, int], ...] | None = None) -> Window:
        rank = len(size)
        stride = stride or (1,) * rank
        padding = padding or ((0, 0),) * rank
        return Window(tuple(size), tuple(stride), tuple(p[0] for p in padding),
                      tuple(p[1] for p in padding), (1,) * rank, (1,) * rank)

    def text(self) -> str:
        def join(values: tuple[int, ...]) -> str:
            return "x".join(str(v) for v in values)

        if self.rank == 0:
            return "{}"
        parts = [f"size={join(self.size)}"]
        if any(s != 1 for s in self.stride):
            parts.append(f"stride={join(self.stride)}")
        if any(self.pad_low) or any(self.pad_high):
            pads = "x".join(f"{lo}_{hi}" for lo, hi in zip(self.pad_low, self.pad_high))
            parts.append(f"pad={pads}")
        if any(d != 1 for d in self.lhs_dilate):
            parts.append(f"lhs_dilate={join(self.lhs_dilate)}")
        if any(d != 1 for d in self.rhs_dilate):
            parts.append(f"rhs_dilate={join(self.rhs_dilate)}")
        return "{" + " ".join(parts) + "}"


@dataclass(frozen=True, slots=True)
class Metadata:
    """XLA's OpMetadata: op_type, op_name, source_file, source_line and any other keys."""

    fields: tuple[tuple[str, str | int], ...] = ()
    # `file:line` resolved from jax's stack-frame tables when the fields only have an id.
    resolved_location: str | None = field(default=None, compare=False)

    def get(self, key: str) -> str | int | None:
        for k, v in self.fields:
            if k == key:
                return v
        return None

    @property
    def source_file(self) -> str | None:
        value = self.get("source_file")
        return value if isinstance(value, str) else None

    @property
    def source_line(self) -> int | None:
        value = self.get("source_line")
        return value if isinstance(value, int) else None

    @property
    def source_location(self) -> str | None:
        """`file:line` of the user's code, or None."""
        if self.source_file is None:
            return self.resolved_location
        line = self.source_line
        return f"{self.source_file}:{line}" if line is not None else self.source_file

    @staticmethod
    def at(source_file: str, source_line: int, op_name: str | None = None) -> Metadata:
        fields: list[tuple[str, str | int]] = []
        if op_name:
            fields.append(("op_name", op_name))
        fields += [("source_file", source_file), ("source_line", source_line)]
        return Metadata(tuple(fields))

    def text(self) -> str:
        parts = []
        for key, value in self.fields:
            if isinstance(value, int):
                parts.append(f"{key}={value}")
            else:
                parts.append(f"{key}={quote(value)}")
        return "{" + " ".join(parts) + "}"


def quote(value: str) -> str:
    """A C-escaped, double-quoted string as XLA prints it."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


@dataclass(frozen=True, slots=True)
class RawAttr:
    """An attribute hlofuse does not interpret (backend_config, sharding, ...), kept verbatim."""

    text: str


@dataclass(frozen=True, slots=True)
class ConvDimLabels:
    """A convolution's dimension numbers, as XLA writes them: `b01f_01io->b01f`.

    Each field gives, for one role, the operand (or result) dimension that plays it; `spatial`
    fields list the dimensions of spatial dimension 0, 1, ... in order.
    """

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]

    @staticmethod
    def parse(text: str) -> ConvDimLabels:
        """Raises ValueError naming what is wrong."""
        parts = text.split("->")
        if len(parts) != 2 or len(parts[0].split("_")) != 2:
            raise ValueError(f"dim_labels '{text}' is not of the form LHS_RHS->OUT "
                             "(e.g. b01f_01io->b01f)")
        lhs, rhs = parts[0].split("_")
        out = parts[1]
        if not (len(lhs) == len(rhs) == len(out)):
            raise ValueError(f"dim_labels '{text}': the three parts differ in rank")
        spatial = len(lhs) - 2

        def roles(labels: str, names: str, what: str) -> tuple[int, int, tuple[int, ...]]:
            expected = sorted(names + "".join(str(i) for i in range(spatial)))
            if sorted(labels) != expected:
                raise ValueError(f"dim_labels '{text}': {what} '{labels}' must name {names[0]}, "
                                 f"{names[1]} and spatial dimensions 0..{spatial - 1} once each")
            return (labels.index(names[0]), labels.index(names[1]),
                    tuple(labels.index(str(i)) for i in range(spatial)))

        if spatial > 10:
            raise ValueError(f"dim_labels '{text}': more than 10 spatial dimensions")
        ib, iff, isp = roles(lhs, "bf", "input")
        ki, ko, ksp = roles(rhs, "io", "kernel")
        ob, of, osp = roles(out, "bf", "output")
        return ConvDimLabels(ib, iff, isp, ki, ko, ksp, ob, of, osp)

    @property
    def spatial_rank(self) -> int:
        return len(self.input_spatial)

    def text(self) -> str:
        def labels(rank: int, named: dict[int, str], spatial: tuple[int, ...]) -> str:
            out = [""] * rank
            for dim, name in named.items():
                out[dim] = name
            for i, dim in enumerate(spatial):
                out[dim] = str(i)
            return "".join(out)

        rank = self.spatial_rank + 2
        lhs = labels(rank, {self.input_batch: "b", self.input_feature: "f"}, self.input_spatial)
        rhs = labels(rank, {self.kernel_input_feature: "i", self.kernel_output_feature: "o"},
                     self.kernel_spatial)
        out = labels(rank, {self.output_batch: "b", self.output_feature: "f"},
                     self.output_spatial)
        return f"{lhs}_{rhs}->{out}"
