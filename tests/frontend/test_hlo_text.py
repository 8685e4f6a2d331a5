"""The HLO the front end traces for small functions, checked FileCheck-style."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import hlofuse.numpy as hnp
from hlofuse import lax, random
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify

from tests.frontend.helpers import filecheck, hlo

F32_3 = np.ones(3, np.float32)
F32_3x4 = np.ones((3, 4), np.float32)


def test_scalar_constants_are_broadcast(tmp_path: Path) -> None:
    text = hlo(lambda x: x * 2.0 + 1, F32_3)
    filecheck(text, """
// CHECK: HloModule jit__lambda_, entry_computation_layout={(f32[3]{0})->f32[3]{0}}
// CHECK: ENTRY
// CHECK-NEXT: [[X:Arg_0[.0-9]*]] = f32[3]{0} parameter(0)
// CHECK-NEXT: [[TWO:constant[.0-9]*]] = f32[] constant(2)
// CHECK-NEXT: [[B2:broadcast[.0-9]*]] = f32[3]{0} broadcast([[TWO]]), dimensions={}
// CHECK-NEXT: [[MUL:multiply[.0-9]*]] = f32[3]{0} multiply([[X]], [[B2]])
// CHECK-NEXT: [[ONE:constant[.0-9]*]] = f32[] constant(1)
// CHECK-NEXT: [[B1:broadcast[.0-9]*]] = f32[3]{0} broadcast([[ONE]]), dimensions={}
// CHECK-NEXT: ROOT {{.*}} = f32[3]{0} add([[MUL]], [[B1]])
""", tmp_path)


def test_size_one_dimensions_are_reshaped_away_before_broadcasting(tmp_path: Path) -> None:
    text = hlo(lambda x, y: x + y, np.ones((3, 1), np.float32), F32_3x4)
    filecheck(text, """
// CHECK: [[X:Arg_0[.0-9]*]] = f32[3,1]{1,0} parameter(0)
// CHECK: [[R:reshape[.0-9]*]] = f32[3]{0} reshape([[X]])
// CHECK-NEXT: [[B:broadcast[.0-9]*]] = f32[3,4]{1,0} broadcast([[R]]), dimensions={0}
// CHECK-NEXT: ROOT {{.*}} add([[B]], {{Arg_1.*}})
""", tmp_path)


def test_promotion_inserts_a_convert(tmp_path: Path) -> None:
    text = hlo(lambda i, x: i + x, np.ones(3, np.int32), F32_3)
    filecheck(text, """
// CHECK: [[C:convert[.0-9]*]] = f32[3]{0} convert({{Arg_0.*}})
// CHECK-NEXT: ROOT {{.*}} = f32[3]{0} add([[C]], {{Arg_1.*}})
""", tmp_path)


def test_basic_indexing_is_slice_and_reshape(tmp_path: Path) -> None:
    text = hlo(lambda x: (x[:, 0], x[1:3], x[::2, None], x[:, ::-2]), F32_3x4)
    filecheck(text, """
// CHECK: [[S0:slice[.0-9]*]] = f32[3,1]{1,0} slice({{.*}}), slice={[0:3], [0:1]}
// CHECK-NEXT: reshape{{.*}} = f32[3]{0} reshape([[S0]])
// CHECK-NEXT: slice{{.*}} = f32[2,4]{1,0} slice({{.*}}), slice={[1:3], [0:4]}
// CHECK-NEXT: [[S2:slice[.0-9]*]] = f32[2,4]{1,0} slice({{.*}}), slice={[0:3:2], [0:4]}
// CHECK-NEXT: reshape{{.*}} = f32[2,1,4]{2,1,0} reshape([[S2]])
// CHECK-NEXT: [[S3:slice[.0-9]*]] = f32[3,2]{1,0} slice({{.*}}), slice={[0:3], [1:4:2]}
// CHECK-NEXT: reverse{{.*}} = f32[3,2]{1,0} reverse([[S3]]), dimensions={1}
""", tmp_path)


def test_traced_index_is_a_dynamic_slice(tmp_path: Path) -> None:
    text = hlo(lambda x, i: x[i], F32_3x4, np.int32(1))
    filecheck(text, """
// CHECK: select
// CHECK: [[DS:dynamic-slice[.0-9]*]] = f32[1,4]{1,0} dynamic-slice({{.*}}), dynamic_slice_sizes={1,4}
// CHECK-NEXT: ROOT {{.*}} = f32[4]{0} reshape([[DS]])
""", tmp_path)


def test_at_set_is_a_dynamic_update_slice(tmp_path: Path) -> None:
    text = hlo(lambda x: x.at[1].set(7.0), F32_3x4)
    filecheck(text, """
// CHECK: ROOT {{.*}} = f32[3,4]{1,0} dynamic-update-slice({{Arg_0[.0-9]*}}, {{.*}})
""", tmp_path)


def test_sum_is_a_reduce_with_an_add_computation(tmp_path: Path) -> None:
    text = hlo(lambda x: hnp.sum(x, axis=1), F32_3x4)
    filecheck(text, """
// CHECK: [[ADD:add_f32[.0-9]*]] {
// CHECK-NEXT: [[A:Arg_0[.0-9]*]] = f32[] parameter(0)
// CHECK-NEXT: [[B:Arg_1[.0-9]*]] = f32[] parameter(1)
// CHECK-NEXT: ROOT {{.*}} = f32[] add([[A]], [[B]])
// CHECK: ENTRY
// CHECK: [[ZERO:constant[.0-9]*]] = f32[] constant(0)
// CHECK-NEXT: ROOT {{.*}} = f32[3]{0} reduce({{Arg_0.*}}, [[ZERO]]), dimensions={1}, to_apply=[[ADD]]
""", tmp_path)


def test_argmax_reduces_values_and_indices_together(tmp_path: Path) -> None:
    text = hlo(lambda x: hnp.argmax(x, axis=0), F32_3x4)
    filecheck(text, """
// CHECK: [[R:argmax_f32[.0-9]*]] {
// CHECK: ROOT {{.*}} = (f32[], s32[]) tuple(
// CHECK: ENTRY
// CHECK: [[I:iota[.0-9]*]] = s32[3,4]{1,0} iota(), iota_dimension=0
// CHECK: [[RED:reduce[.0-9]*]] = (f32[4]{0}, s32[4]{0}) reduce({{Arg_0.*}}, [[I]], {{.*}}), dimensions={0}, to_apply=[[R]]
// CHECK-NEXT: ROOT {{.*}} = s32[4]{0} get-tuple-element([[RED]]), index=1
""", tmp_path)


def test_matmul_is_a_dot(tmp_path: Path) -> None:
    text = hlo(lambda a, b: a @ b.T, F32_3x4, F32_3x4)
    filecheck(text, """
// CHECK: [[T:transpose[.0-9]*]] = f32[4,3]{1,0} transpose({{Arg_1.*}}), dimensions={1,0}
// CHECK-NEXT: ROOT {{.*}} = f32[3,3]{1,0} dot({{Arg_0.*}}, [[T]]), lhs_contracting_dims={1}, rhs_contracting_dims={0}
""", tmp_path)


def test_stack_is_reshapes_and_a_concatenate(tmp_path: Path) -> None:
    text = hlo(lambda a, b: hnp.stack([a, b], axis=1), F32_3, F32_3)
    filecheck(text, """
// CHECK: [[A:reshape[.0-9]*]] = f32[3,1]{1,0} reshape({{Arg_0.*}})
// CHECK-NEXT: [[B:reshape[.0-9]*]] = f32[3,1]{1,0} reshape({{Arg_1.*}})
// CHECK-NEXT: ROOT {{.*}} = f32[3,2]{1,0} concatenate([[A]], [[B]]), dimensions={1}
""", tmp_path)


def test_fori_loop_is_a_while_with_a_tuple_state(tmp_path: Path) -> None:
    text = hlo(lambda x: lax.fori_loop(0, 5, lambda i, c: c * 2.0, x), F32_3)
    filecheck(text, """
// CHECK: [[COND:while_cond[.0-9]*]] {
// CHECK-NEXT: [[P:Arg_0[.0-9]*]] = (s32[], s32[], f32[3]{0}) parameter(0)
// CHECK: [[I:get-tuple-element[.0-9]*]] = s32[] get-tuple-element([[P]]), index=0
// CHECK: [[N:constant[.0-9]*]] = s32[] constant(5)
// CHECK-NEXT: ROOT {{.*}} = pred[] compare([[I]], [[N]]), direction=LT
// CHECK: [[BODY:while_body[.0-9]*]] {
// CHECK: multiply
// CHECK: ROOT {{.*}} = (s32[], s32[], f32[3]{0}) tuple(
// CHECK: ENTRY
// CHECK: [[INIT:tuple[.0-9]*]] = (s32[], s32[], f32[3]{0}) tuple(
// CHECK-NEXT: [[W:while[.0-9]*]] = (s32[], s32[], f32[3]{0}) while([[INIT]]), condition=[[COND]], body=[[BODY]]
// CHECK-NEXT: ROOT {{.*}} = f32[3]{0} get-tuple-element([[W]]), index=2
""", tmp_path)


def test_scan_unroll_replicates_the_body(tmp_path: Path) -> None:
    def f(x: object) -> object:
        return lax.scan(lambda c, _: (hnp.sin(c), None), x, None, length=6, unroll=3)[0]

    text = hlo(f, F32_3)
    filecheck(text, """
// CHECK: while_body
// CHECK-COUNT-3: sine(
// CHECK-NOT: sine(
// CHECK: ENTRY
// CHECK: while(
// CHECK-NOT: sine(
""", tmp_path)


def test_scan_remainder_steps_follow_the_loop(tmp_path: Path) -> None:
    def f(x: object) -> object:
        return lax.scan(lambda c, _: (hnp.sin(c), None), x, None, length=7, unroll=3)[0]

    text = hlo(f, F32_3)
    filecheck(text, """
// CHECK: while_body
// CHECK-COUNT-3: sine(
// CHECK: ENTRY
// CHECK: while(
// CHECK: sine(
""", tmp_path)


def test_captured_values_join_the_loop_state(tmp_path: Path) -> None:
    def f(x: object, y: object) -> object:
        return lax.while_loop(lambda c: c[0] < 3.0, lambda c: c + y, x)

    text = hlo(f, F32_3, F32_3)
    filecheck(text, """
// CHECK: while_body
// CHECK: [[P:Arg_0[.0-9]*]] = (f32[3]{0}, f32[3]{0}) parameter(0)
// CHECK: [[C:get-tuple-element[.0-9]*]] = f32[3]{0} get-tuple-element([[P]]), index=0
// CHECK: [[Y:get-tuple-element[.0-9]*]] = f32[3]{0} get-tuple-element([[P]]), index=1
// CHECK: [[SUM:add[.0-9]*]] = f32[3]{0} add([[C]], [[Y]])
// CHECK: ROOT {{.*}} tuple([[SUM]], [[Y]])
// CHECK: ENTRY
// CHECK: tuple({{Arg_0.*}}, {{Arg_1.*}})
""", tmp_path)


def test_cond_is_a_conditional(tmp_path: Path) -> None:
    def f(p: object, x: object) -> object:
        return lax.cond(p, lambda a: a + 1.0, lambda a: a * 2.0, x)

    text = hlo(f, np.bool_(True), F32_3)
    filecheck(text, """
// CHECK: [[T:branch_0[.0-9]*]] {
// CHECK: add(
// CHECK: [[F:branch_1[.0-9]*]] {
// CHECK: multiply(
// CHECK: ENTRY
// CHECK: [[C:conditional[.0-9]*]] = (f32[3]{0}) conditional({{Arg_0.*}}, [[OPS:tuple[.0-9]*]], [[OPS]]), true_computation=[[T]], false_computation=[[F]]
// CHECK-NEXT: ROOT {{.*}} get-tuple-element([[C]]), index=0
""", tmp_path)


def test_custom_call_random_is_one_opaque_call(tmp_path: Path) -> None:
    def f(key: object) -> object:
        return random.uniform(key, (4, 5), impl="custom_call")

    text = hlo(f, random.key(0))
    filecheck(text, """
// CHECK: [[CC:custom-call[.0-9]*]] = (u32[4,5]{1,0}, u32[4,5]{1,0}) custom-call({{broadcast[.0-9]*}}, {{broadcast[.0-9]*}}, {{.*}}), custom_call_target="hlofuse_threefry2x32"
// CHECK-NOT: custom-call(
// CHECK: xor(
// CHECK: bitcast-convert
""", tmp_path)


def test_fused_random_is_integer_arithmetic(tmp_path: Path) -> None:
    text = hlo(lambda key: random.bits(key, (8,), impl="fused"), random.key(0))
    assert "custom-call" not in text
    filecheck(text, """
// CHECK: u32[8]{0} iota()
// CHECK-COUNT-20: shift-left(
// CHECK: ROOT {{.*}} = u32[8]{0} xor(
""", tmp_path)


def test_metadata_names_the_user_line(tmp_path: Path) -> None:
    def f(x: object) -> object:
        y = hnp.sin(x)  # the line recorded below
        return y

    line = f.__code__.co_firstlineno + 1
    text = hlo(f, F32_3)
    filecheck(text, f"""
// CHECK: sine({{{{.*}}}}), metadata={{op_name="jit(f)/sine" source_file="{__file__}" source_line={line}}}
""", tmp_path)


def test_loop_bodies_record_the_user_line_inside_them() -> None:
    def body(c: object) -> object:
        return hnp.cos(c)  # the cosine's line

    def f(x: object) -> object:
        return lax.while_loop(lambda c: c[0] < 1.0, body, x)

    module = parse_module(hlo(f, F32_3))
    (cosine,) = [i for i in module.all_instructions() if i.op.text == "cosine"]
    assert cosine.metadata is not None
    assert cosine.metadata.source_file == __file__
    assert cosine.metadata.source_line == body.__code__.co_firstlineno + 1
    assert cosine.metadata.get("op_name") == "jit(f)/while/body/cosine"


def test_traced_modules_verify_and_round_trip() -> None:
    def f(x: object, key: object) -> object:
        noise = random.normal(key, (3,))
        c, ys = lax.scan(lambda c, xi: (c + xi, c * xi), 0.0, x + noise)
        return lax.cond(c > 0, lambda: ys, lambda: -ys), hnp.argmin(x)

    text = hlo(f, F32_3, random.key(1))
    module = parse_module(text)
    verify(module)
    assert module_text(module) == text
