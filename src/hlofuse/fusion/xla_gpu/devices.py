"""The GPUs `xla-gpu` can target: XLA's device descriptions (`GpuTargetConfigProto` text, the
form XLA's deviceless compiler takes) and the figures its performance model reads from them.

A100 (SXM4 80 GB) and H100 (SXM 80 GB HBM3) are the descriptions those GPUs report to XLA;
H200 is H100's with H200's memory bandwidth (4.8 TB/s) and size (141 GB) from its data sheet:
the same Hopper die, so cores, clocks, caches and register files are H100's. The text is fed
unchanged to XLA by `hlofuse compare-xla`, so the model and the oracle see one description.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_A100 = """\
gpu_device_info {
  cuda_compute_capability {
    major: 8
    minor: 0
  }
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 65536
  threads_per_core_limit: 2048
  core_count: 108
  fpus_per_core: 64
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 2039000000000
  l2_cache_size: 41943040
  clock_rate_ghz: 1.41
  device_memory_size: 84987740160
  shared_memory_per_block_optin: 166912
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info {
  major: 9
  minor: 8
}
runtime_version {
  major: 12
  minor: 8
}
device_description_str: "NVIDIA A100-SXM4-80GB"
"""

_H100 = """\
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 84929347584
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {
    major: 9
  }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info {
  major: 9
  minor: 8
}
runtime_version {
  major: 12
  minor: 8
}
device_description_str: "NVIDIA H100 80GB HBM3"
"""

_H200 = """\
gpu_device_info {
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: 4800000000000
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: 150754820096
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {
    major: 9
  }
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info {
  major: 9
  minor: 9
}
runtime_version {
  major: 12
  minor: 9
}
device_description_str: "NVIDIA H200"
"""

TARGET_CONFIGS: dict[str, str] = {"a100": _A100, "h100": _H100, "h200": _H200}
DEFAULT_DEVICE = "h100"


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """The figures of a device description that XLA's GPU fusion passes read."""

    name: str
    description: str
    compute_capability: tuple[int, int]
    core_count: int  # streaming multiprocessors
    fpus_per_core: int
    clock_rate_ghz: float
    memory_bandwidth: float  # bytes per second
    l2_cache_size: int  # bytes
    threads_per_block_limit: int
    threads_per_warp: int
    threads_per_core_limit: int
    shared_memory_per_block: int
    shared_memory_per_block_optin: int
    shared_memory_per_core: int
    registers_per_core_limit: int
    registers_per_block_limit: int
    device_memory_size: int

    @property
    def target_config(self) -> str:
        """The `GpuTargetConfigProto` text XLA's deviceless compiler takes."""
        return TARGET_CONFIGS[self.name]


class UnknownDeviceError(ValueError):
    """A device name with no description."""


def _field(text: str, key: str, default: str | None = None) -> str:
    match = re.search(rf"^\s*{key}:\s*(\S+)\s*$", text, re.MULTILINE)
    if match is None:
        if default is None:
            raise ValueError(f"device description has no field {key!r}")
        return default
    return match.group(1).strip('"')


def _compute_capability(text: str) -> tuple[int, int]:
    block = re.search(r"cuda_compute_capability\s*\{([^}]*)\}", text)
    if block is None:
        return (0, 0)
    return (int(_field(block.group(1), "major", "0")), int(_field(block.group(1), "minor", "0")))


def parse_target_config(name: str, text: str) -> GpuDevice:
    """The figures of a `GpuTargetConfigProto` text."""
    info = re.search(r"gpu_device_info\s*\{(.*?)\n\}", text, re.DOTALL)
    if info is None:
        raise ValueError(f"device description {name!r} has no gpu_device_info block")
    body = re.sub(r"cuda_compute_capability\s*\{[^}]*\}", "", info.group(1))

    def number(key: str) -> int:
        return int(_field(body, key))

    description = re.search(r'device_description_str:\s*"([^"]*)"', text)
    return GpuDevice(
        name=name, description=description.group(1) if description else name,
        compute_capability=_compute_capability(info.group(1)),
        core_count=number("core_count"), fpus_per_core=number("fpus_per_core"),
        clock_rate_ghz=float(_field(body, "clock_rate_ghz")),
        memory_bandwidth=float(_field(body, "memory_bandwidth")),
        l2_cache_size=number("l2_cache_size"),
        threads_per_block_limit=number("threads_per_block_limit"),
        threads_per_warp=number("threads_per_warp"),
        threads_per_core_limit=number("threads_per_core_limit"),
        shared_memory_per_block=number("shared_memory_per_block"),
        shared_memory_per_block_optin=number("shared_memory_per_block_optin"),
        shared_memory_per_core=number("shared_memory_per_core"),
        registers_per_core_limit=number("registers_per_core_limit"),
        registers_per_block_limit=number("registers_per_block_limit"),
        device_memory_size=number("device_memory_size"))


DEVICES: dict[str, GpuDevice] = {name: parse_target_config(name, text)
                                 for name, text in TARGET_CONFIGS.items()}


def device(name: str) -> GpuDevice:
    """The description named `name` (a100, h100, h200; case-insensitive)."""
    found = DEVICES.get(name.strip().lower())
    if found is None:
        raise UnknownDeviceError(f"unknown GPU {name!r}; known: {', '.join(DEVICES)}")
    return found
