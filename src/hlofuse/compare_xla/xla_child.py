"""The oracle's child process: jax lowers a Python program for CUDA, or XLA compiles HLO
text for a GPU described by a target config; the answer comes back as one JSON object.

Run as a script (`python xla_child.py --target-config FILE --out DIR [--lower] SOURCE`) by
`oracle.compile_file`, with `JAX_PLATFORMS=cpu`; it imports nothing from hlofuse, so its only
dependency is the `xla-gpu` extra. `tests/data/xla_gpu/generate.py` calls
`lower_function_here` and `compile_hlo_here` in-process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any


def _dumped(directory: Path) -> tuple[str, str, str]:
    """The module before optimisation, the optimised module and the thunk sequence XLA dumped
    (the last module compiled, should there be several)."""
    def newest(pattern: str) -> str:
        found = sorted(directory.glob(pattern))
        return found[-1].read_text() if found else ""

    return (newest("*.before_optimizations.txt"), newest("*gpu_after_optimizations.txt"),
            newest("*.thunk_sequence.txt"))


def _module(name: str) -> Any:
    """A module of jax, untyped: its private parts have no stubs."""
    return importlib.import_module(name)


def _mesh_sharding(target_config: str) -> tuple[Any, Any]:
    topologies = _module("jax.experimental.topologies")
    sharding = _module("jax.sharding")
    topology = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                            target_config=target_config)
    mesh = topologies.make_mesh(topology, (1,), ("x",))
    return topology, sharding.NamedSharding(mesh, sharding.PartitionSpec())


def lower_function_here(fn: Any, args: list[Any], target_config: str) -> str:
    """In a jax process: `fn` lowered for CUDA, as HLO text (the module before XLA's
    optimisation, calls not yet inlined)."""
    import numpy as np

    jax = _module("jax")
    _, sharding = _mesh_sharding(target_config)
    specs = []
    for arg in args:
        if isinstance(arg, tuple) and len(arg) == 2:
            shape, dtype = arg
        else:
            array = np.asarray(arg)
            shape, dtype = array.shape, array.dtype
        specs.append(jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype), sharding=sharding))
    lowered = jax.jit(fn).trace(*specs).lower(lowering_platforms=("cuda",))
    return str(lowered.as_text(dialect="hlo", debug_info=True))


def compile_hlo_here(text: str, target_config: str, dump: Path) -> tuple[str, str, str]:
    """In a jax process: compile HLO text for the GPU `target_config` describes (XLA parses
    the text itself)."""
    compiler = _module("jax._src.compiler")
    jax_mlir = _module("jax._src.interpreters.mlir")
    _jax = _module("jax._src.lib")._jax
    xc = _module("jax._src.lib").xla_client
    ir = _module("jax._src.lib.mlir").ir

    topology, _ = _mesh_sharding(target_config)
    target = topology.devices[0]
    module = xc.hlo.hlo_module_from_text(text)
    bytecode = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    with jax_mlir.make_ir_context():
        stablehlo = ir.Module.parse(bytecode)
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1,
                                               device_assignment=None)
        # The texts are parsed again, so large constants are dumped too.
        options.env_option_overrides = [("xla_dump_to", str(dump)),
                                        ("xla_dump_hlo_as_text", True),
                                        ("xla_dump_large_constants", True)]
        compiler.backend_compile_and_load(target.client, stablehlo,
                                          _jax.DeviceList((target,)), options, [])
    return _dumped(dump)


def load_program(path: Path) -> tuple[Any, list[Any]]:
    """`program()` of a Python file: (fn, args)."""
    spec = importlib.util.spec_from_file_location(f"_hlofuse_program_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make = getattr(module, "program", None)
    if not callable(make):
        raise ValueError(f"{path}: defines no program() returning (fn, args)")
    made = make()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise ValueError(f"{path}: program() must return (fn, args)")
    return made[0], list(made[1])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xla_child.py")
    parser.add_argument("--target-config", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--lower", action="store_true",
                        help="only lower the program() of a Python file to HLO text")
    parser.add_argument("source", type=Path)
    options = parser.parse_args(argv)
    answer: dict[str, object]
    try:
        jax = _module("jax")
        target_config = options.target_config.read_text()
        if options.lower:
            fn, args = load_program(options.source)
            answer = {"before": lower_function_here(fn, args, target_config)}
        else:
            before, optimized, thunks = compile_hlo_here(options.source.read_text(),
                                                         target_config, options.out / "dump")
            if not optimized:
                raise RuntimeError("XLA wrote no optimised module")
            answer = {"before": before, "optimized": optimized, "thunks": thunks}
        answer["jax_version"] = jax.__version__
    except Exception as exc:  # noqa: BLE001 - every failure goes back as XLA's message
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    (options.out / "answer.json").write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main(sys.argv[1:]))
