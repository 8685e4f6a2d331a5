"""Names that vulture (`make lint`, [tool.vulture] in pyproject.toml) cannot see being used.

vulture reads this file, never runs it: every name below counts as used wherever it appears.
Add a name only with the reason nothing in the code reads it by name; a name that is simply
unused is dead code and goes.
"""

_: object = object()

# Module protocol: Python calls a module's __getattr__ and __dir__ (the package root's lazy
# names, hlofuse.numpy's "not implemented" errors).
_.__getattr__
_.__dir__
# Public API (README.md, "Front end"), called by users rather than by the package.
_.set_default_backend

# Attributes written for another library to read.
_.caption  # rich.table.Table (cli/bench.py, cli/cartpole.py)
_.env_option_overrides  # jaxlib's CompileOptions (compare_xla/xla_child.py)
_.__qualname__  # functions made by factories, named for tracebacks (frontend/elementwise.py)
_.steps_beyond_terminated  # gymnasium's CartPoleEnv (tests/e2e/test_cartpole.py)

# Read by name: linalg call options through the per-routine option tables (ir/linalg.py), the
# random program builder's operations through getattr (tests/hlo_programs.py), a target's class
# through its registry entry (targets/__init__.py; the others are imported by tests too).
_.ReferenceTarget
_.TpuTarget
_.InterpretTpuTarget
_.full_matrices
_.constant_binary
_.long_row_reduce

# Fields of records written out as JSON (dataclasses.asdict) and read from the JSON.
_.best_seconds  # studies/cartpole_study.py: cartpole.json
_.float_mismatch  # studies/rollouts_bench.py
_.cached_new_process_trace_s  # benchmarks/compile_time.py
_.all_cold_s
_.all_cached_s
_.all_cached_new_process_s

# XLA's DeviceDescription, kept whole as the data sheet of each GPU (fusion/xla_gpu/devices.py).
_.threads_per_block_limit
_.threads_per_warp
_.threads_per_core_limit
_.shared_memory_per_block
_.shared_memory_per_block_optin
_.shared_memory_per_core
_.registers_per_core_limit
_.registers_per_block_limit
_.device_memory_size

# Dead, but in code that others are restructuring (issue 33): remove or call there.
_.libm_name  # codegen/mathlib: a column of the function table that nothing reads
_.is_gemm_fusion  # fusion/xla_gpu/gemm_fusion.py: no caller
