"""Resource limits: a module beyond one is refused before any work, naming the limit and how
to raise it; a valid bitcast-convert that changes the element width is accepted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.ir.limits import Limits, ResourceLimitError, check_limits, nesting_depth
from hlofuse.ir.parser import HloParseError, parse_module
from hlofuse.ir.verifier import HloVerifyError, verify
from hlofuse.reference.interpreter import evaluate, flatten_value


def chain(n: int) -> str:
    body = "\n".join(f"  a{k + 1} = f32[4]{{0}} add(a{k}, a{k})" for k in range(n))
    return (f"HloModule chain\nENTRY main {{\n  a0 = f32[4]{{0}} parameter(0)\n{body}\n"
            f"  ROOT r = f32[4]{{0}} negate(a{n})\n}}\n")


def nested(depth: int) -> str:
    """`depth` while loops inside each other, each running twice and doubling its value."""
    comps = []
    inner = ""  # the loop of the level below, as instructions of this level's body
    for k in range(depth):
        result = f"z{k - 1}" if inner else f"y{k}"
        comps.append(f"""
cond{k} {{
  pc{k} = (s32[], f32[]) parameter(0)
  ic{k} = s32[] get-tuple-element(pc{k}), index=0
  two{k} = s32[] constant(2)
  ROOT lt{k} = pred[] compare(ic{k}, two{k}), direction=LT
}}

body{k} {{
  p{k} = (s32[], f32[]) parameter(0)
  i{k} = s32[] get-tuple-element(p{k}), index=0
  x{k} = f32[] get-tuple-element(p{k}), index=1
  one{k} = s32[] constant(1)
  j{k} = s32[] add(i{k}, one{k})
  y{k} = f32[] add(x{k}, x{k})
{inner.replace("@", f"y{k}")}  ROOT t{k} = (s32[], f32[]) tuple(j{k}, {result})
}}
""")
        inner = (f"  zero{k} = s32[] constant(0)\n  s{k} = (s32[], f32[]) tuple(zero{k}, @)\n"
                 f"  w{k} = (s32[], f32[]) while(s{k}), condition=cond{k}, body=body{k}\n"
                 f"  z{k} = f32[] get-tuple-element(w{k}), index=1\n")
    entry = f"""
ENTRY main {{
  x = f32[] parameter(0)
{inner.replace("@", "x")}  ROOT r = f32[] negate(z{depth - 1})
}}
"""
    return "HloModule nested\n" + "".join(comps) + entry


def test_instruction_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    module = parse_module(chain(50))
    verify(module)
    monkeypatch.setenv("HLOFUSE_MAX_INSTRUCTIONS", "20")
    with pytest.raises(HloVerifyError, match=r"52 is above the limit max_instructions=20.*"
                                             r"HLOFUSE_MAX_INSTRUCTIONS"):
        verify(module)
    verify(module, limits=Limits(max_instructions=60))  # raised by an argument


def test_nesting_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    module = parse_module(nested(3))
    assert nesting_depth(module) == 4
    verify(module)
    # each level doubles and runs the level below twice: -((2 * (2 * 4) ** 2) ** 2)
    assert flatten_value(evaluate(module, [np.float32(1)]))[0] == -(2.0 ** 14)
    with pytest.raises(ResourceLimitError, match="nests computations 4 deep.*HLOFUSE_MAX_NESTING"):
        check_limits(module, Limits(max_nesting=3))
    monkeypatch.setenv("HLOFUSE_MAX_NESTING", "2")
    with pytest.raises(HloVerifyError, match="max_nesting=2"):
        verify(module)


def test_buffer_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    text = chain(1).replace("f32[4]", "f32[1000]")
    verify(parse_module(text))
    monkeypatch.setenv("HLOFUSE_MAX_BUFFER_BYTES", "1000")
    with pytest.raises(HloParseError, match=r"4000 bytes.*HLOFUSE_MAX_BUFFER_BYTES") as info:
        parse_module(text)
    assert info.value.line == 3  # the parameter's line
    monkeypatch.delenv("HLOFUSE_MAX_BUFFER_BYTES")
    with pytest.raises(HloVerifyError, match="above the cap of 1000 .*HLOFUSE_MAX_BUFFER_BYTES"):
        verify(parse_module(text), limits=Limits(max_buffer_bytes=1000))


def test_a_bad_limit_setting_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HLOFUSE_MAX_INSTRUCTIONS", "lots")
    with pytest.raises(ValueError, match="HLOFUSE_MAX_INSTRUCTIONS"):
        Limits.from_env()


def test_compile_refuses_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import hlofuse.api

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started on a module beyond the limits")

    monkeypatch.setattr(hlofuse.api, "Compiled", refuse)
    monkeypatch.setenv("HLOFUSE_MAX_INSTRUCTIONS", "10")
    with pytest.raises(ResourceLimitError, match="max_instructions"):
        hlofuse.api.compile_module(parse_module(chain(20)), "xla", "cpu")


def test_the_command_line_gives_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from hlofuse.cli import main

    path = tmp_path / "chain.hlo"
    path.write_text(chain(30))
    monkeypatch.setenv("HLOFUSE_MAX_INSTRUCTIONS", "10")
    assert main(["run", str(path), "--backend", "interpreter"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "HLOFUSE_MAX_INSTRUCTIONS" in err[0]


@pytest.mark.parametrize(("source", "target", "expected"), [
    ("u32[2,2]", "u64[2]", [0x0000000200000001, 0x0000000400000003]),
    ("u16[3,2]", "s32[3]", None),
    ("u64[2]", "u32[2,2]", None),
    ("f32[2]", "u8[2,4]", None),
])
def test_bitcast_convert_may_change_the_width(source: str, target: str,
                                              expected: list[int] | None) -> None:
    text = (f"HloModule m\nENTRY main {{\n  x = {source} parameter(0)\n"
            f"  ROOT y = {target} bitcast-convert(x)\n}}\n")
    module = parse_module(text)
    verify(module)
    dtype = {"u32": np.uint32, "u16": np.uint16, "u64": np.uint64, "f32": np.float32}[source[:3]]
    dims = [int(d) for d in source[4:-1].split(",")]
    x = np.arange(1, int(np.prod(dims)) + 1).astype(dtype).reshape(dims)
    (y,) = flatten_value(evaluate(module, [x]))
    assert y.tobytes() == x.tobytes()  # the same bytes, little-endian, as XLA's CPU backend
    assert list(y.shape) == [int(d) for d in target[target.index("[") + 1:-1].split(",")]
    if expected is not None:
        assert y.tolist() == expected


@pytest.mark.parametrize(("source", "target", "message"), [
    ("u32[2,3]", "u64[2]", "without the last"),
    ("u32[2]", "u64[2]", "without the last"),
    ("u64[2]", "u32[2]", "with one more"),
    ("u16[3]", "u32[3]", "without the last"),
])
def test_bitcast_convert_width_rules(source: str, target: str, message: str) -> None:
    text = (f"HloModule m\nENTRY main {{\n  x = {source} parameter(0)\n"
            f"  ROOT y = {target} bitcast-convert(x)\n}}\n")
    with pytest.raises(HloParseError, match=message):
        parse_module(text)
