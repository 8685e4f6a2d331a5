"""Building the C target's modules: options, translation units and their flags, the runtime
library every module links against, and compiling through the on-disk cache."""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources

from hlofuse.codegen.kernel import emit_aliased, emit_kernel
from hlofuse.codegen.kernel_spec import EmittedKernel, KernelOptions, KernelSpec
from hlofuse.ir.hlo import Module
from hlofuse.runtime.buffers import Assignment
from hlofuse.runtime.lowering import Generated, ModuleSource, generate
from hlofuse.runtime.profile import KernelProfile
from hlofuse.runtime.program import Program
from hlofuse.targets.c.blas import find_blas, identity_comment, profile_note
from hlofuse.targets.c.driver import module_source
from hlofuse.targets.c.language import C, CLanguage
from hlofuse.targets.native.executable import SharedObjectExecutable
from hlofuse.toolchain.cache import Cache
from hlofuse.toolchain.compiler import (
    DEFAULT_FLAGS,
    Compiler,
    Unit,
    build_shared_object,
    cache_key,
    load_library,
)


class CExecutable(SharedObjectExecutable):
    """A module compiled for the C target; its profiles say what computed the dot kernels."""

    def profile_notes(self, rows: list[KernelProfile]) -> tuple[str, ...]:
        return (profile_note(),) if any(r.kind == "dot" and r.calls for r in rows) else ()


@dataclass(frozen=True)
class CompileOptions:
    kernel: KernelOptions = field(default_factory=KernelOptions)
    flags: tuple[str, ...] = DEFAULT_FLAGS
    verify: bool = True


@dataclass(frozen=True)
class CCodegen:
    """The generate loop's questions (runtime/lowering.py), answered for C + OpenMP."""

    options: KernelOptions = field(default_factory=KernelOptions)
    lang: CLanguage = C

    def prepare(self, spec: KernelSpec) -> KernelSpec:
        return spec

    def emit(self, spec: KernelSpec) -> EmittedKernel:
        return emit_kernel(spec, self.lang, self.options)

    def emit_aliased(self, first: EmittedKernel, spec: KernelSpec) -> EmittedKernel:
        return emit_aliased(first, spec, self.lang, self.options)

    def module_source(self, program: Program, emitted: Mapping[int, EmittedKernel],
                      assignment: Assignment, constant_offsets: list[int],
                      constant_bytes: int, what: str) -> ModuleSource:
        return module_source(program, emitted, assignment, constant_offsets, self.lang, what)


def generate_c(module: Module, options: CompileOptions = CompileOptions()) -> Generated:
    """The C source and runtime plan of a module (fused or not), without compiling it."""
    return generate(module, CCodegen(options.kernel), check=options.verify)


@functools.cache
def runtime_library(flags: tuple[str, ...] = DEFAULT_FLAGS) -> ctypes.CDLL:
    """The separately compiled library of dot, Threefry and the linear-algebra routines,
    loaded with its symbols global so that every module links against it. Its f32 and f64
    dots call the wheel's OpenBLAS where it is installed (blas.py); the BLAS build's identity
    is part of the source, and so of the cache key."""
    files = resources.files("hlofuse.targets.c")
    blas = find_blas()
    source = identity_comment(blas) + files.joinpath("hlofuse_rt.c").read_text()
    source += "\n" + files.joinpath("hlofuse_linalg.c").read_text()  # codegen/linalg.py
    extra = blas.build_flags() if blas is not None else ()
    built = build_shared_object(source, (*flags, *extra))
    return load_library(built.path, global_symbols=True)


# gcc's RTL combiner tries up to four instructions at a time; on the long straight-line
# kernels of unrolled loops that is about a third of the C compiler's time. Kernels under the
# small-kernel limit compile at -O1 (their run time is launches and memory), and for them the
# combiner is off (gcc's -fdisable-rtl-combine). Measured free: CartPole, 256 environments,
# run-time ratios without/with pair-only combining 0.93-1.00 (unroll 1, 10, 40; xla and
# xla+relax_concatenate; 31 alternating runs each, equal outputs), as pair-only combining
# was against the full combiner (0.95-1.05), where -O3 kernels lose 3-5% of run time. At
# unroll 40 the small kernels' unit compiles in 0.66 s instead of 1.2 s (2.4 s with the full
# combiner). gcc's optimize attribute takes neither option, so they are set per translation
# unit: for a module whose every kernel is small, and, in a module with both, for a unit of
# its small kernels (`ModuleSource.split`) where their code is large enough to pay for a
# second unit.
SMALL_MODULE_FLAGS: tuple[str, ...] = ("-fdisable-rtl-combine",)
# A second unit parses the header again (about 30 ms) and adds a link: worth it where the
# small kernels are long (the combiner's time grows faster than a function's length).
SPLIT_MIN_SMALL_BYTES = 64 * 1024


def compile_units(generated: Generated, flags: tuple[str, ...],
                  compiler: Compiler | None = None) -> tuple[Unit, ...]:
    """The translation units `generated` is compiled as, with the flags each adds to `flags`:
    where `flags` are the defaults and the compiler is gcc, SMALL_MODULE_FLAGS for a module of
    small kernels, or for its small kernels' own unit; otherwise the module as one unit."""
    whole = (Unit(generated.source.text),)
    if flags != DEFAULT_FLAGS or not generated.emitted:
        return whole
    every_small = all(kernel.is_small for kernel in generated.emitted.values())
    split = generated.source.split
    if not every_small and (split is None
                            or generated.source.small_code_bytes < SPLIT_MIN_SMALL_BYTES):
        return whole
    version = (compiler or Compiler.find()).version.lower()
    if "clang" in version or "intel" in version:
        return whole
    if every_small:
        return (Unit(generated.source.text, SMALL_MODULE_FLAGS),)
    assert split is not None
    return (Unit(split[0]), Unit(split[1], SMALL_MODULE_FLAGS))


def object_key(generated: Generated, flags: tuple[str, ...] = DEFAULT_FLAGS) -> str:
    """The cache key of the shared object `generated` builds into with `flags`."""
    compiler = Compiler.find()
    return cache_key(compile_units(generated, flags, compiler), flags, compiler)


def compile_cpu(module: Module, options: CompileOptions = CompileOptions()
                ) -> CExecutable:
    """Generate C for `module` (fused or not), compile it through the cache, load it."""
    start = time.perf_counter()
    generated = generate_c(module, options)
    runtime_library(options.flags)
    built = build_shared_object(compile_units(generated, options.flags), options.flags,
                                Cache.open())
    library = load_library(built.path)
    return CExecutable(generated, library, built.cache_hit,
                                  time.perf_counter() - start, built.key)


def compile_many(modules: Sequence[Module], options: CompileOptions = CompileOptions(),
                 workers: int = 2) -> list[CExecutable]:
    """compile_cpu for several modules, generating C for the next ones while the compiler
    (a separate process) builds earlier ones: `workers` compilers run at once."""
    runtime_library(options.flags)
    cache = Cache.open()
    with ThreadPoolExecutor(max(workers, 1)) as pool:
        jobs = []
        for module in modules:
            start = time.perf_counter()
            generated = generate_c(module, options)
            build = pool.submit(build_shared_object, compile_units(generated, options.flags),
                                options.flags, cache)
            jobs.append((generated, build, start))
        out = []
        for generated, build, start in jobs:
            built = build.result()
            out.append(CExecutable(generated, load_library(built.path),
                                              built.cache_hit, time.perf_counter() - start,
                                              built.key))
    return out
