"""Code generation of a module: every kernel emitted as few times as it must be."""

from __future__ import annotations

import pytest

from hlofuse.codegen import whole_loop
from hlofuse.envs import cartpole
from hlofuse.fusion.strategies import run_strategy
from hlofuse.targets.c import generate_c as generate


def test_a_whole_loop_kernel_is_emitted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    module = cartpole.trace(cartpole.PRESETS["baseline"], 32, 5)
    fused = run_strategy(module, "max+default_costs", debug=False).module
    emitted: list[str] = []
    original = whole_loop.emit_whole_loop

    def counted(spec, lang, options):  # type: ignore[no-untyped-def]
        emitted.append(spec.label)
        return original(spec, lang, options)

    monkeypatch.setattr(whole_loop, "emit_whole_loop", counted)
    generated = generate(fused)
    loops = [t for t in generated.program.kernel_thunks() if t.spec.kind == "kCustom"]
    assert len(loops) == 1 and emitted == [loops[0].spec.label]
    # The pairs known before emission are the emitted kernel's, and the state is updated in
    # place: the kernel was emitted with its aliasing known.
    kernel = generated.emitted[id(loops[0])]
    assert kernel.in_place == whole_loop.whole_loop_in_place(loops[0].spec) != ()
    assert loops[0].spec.aliased
