"""Lane code's reads: the block's state `s<i>[position][lane]`, the step's row of the
lane-input tables, and which of those loads may run without their condition."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hlofuse.analysis.lane_classification import element_read
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.emitter_types import Index, Value
from hlofuse.codegen.licm import index_range
from hlofuse.codegen.whole_loop_elements import L, named
from hlofuse.codegen.whole_loop_lane_code import LaneCode
from hlofuse.ir.dtypes import DType


class LaneReads(LaneCode):
    """Bindings of the lane emitter's reads of the loop state and the lane inputs."""

    def speculable_lane_load(self, load: cir.Load, defined: Mapping[str, Expr]) -> bool:
        """A load lane code may run without its condition: the block's state at a position
        known to lie in the lane's part (`s<i>[q][l]`, q a literal or a clamp), or the
        step's row of a lane-input table (`tab<k>[t * count + q]`), arrays declared
        speculable; or a nested loop's state at a position known to lie in it (`w<i>[q][l]`
        of a held element, `w<i>[q]` of a uniform one): the loop writes every position before
        its body reads one, so a branch's reads of it (a scatter's update, written for each
        position it may land on) are computed once, before the branches, rather than again in
        each."""
        if not isinstance(load.array, cir.Var):
            return False
        name = load.array.name
        nested = self.nested_arrays.get(name)
        if nested is not None:
            return self._in_nested_array(load, nested, defined)
        if name not in self.body.speculable:
            return False
        element = self.state_arrays.get(name)
        if element is not None and len(load.indices) == 2:
            bounds = index_range(load.indices[0], defined)
            return element in self.plan.per_lane and bounds is not None and \
                0 <= bounds[0] and bounds[1] < self.plan.elements_per_lane(element) and \
                load.indices[1] == L
        k = self.tables.get(name)
        if k is not None and len(load.indices) == 1:
            count = max(1, self.plan.lane_inputs[k].shape.num_elements)
            row = Binary("*", cir.Var("t"), cir.Int(count))
            index = load.indices[0]
            if index == row:
                return True
            if isinstance(index, Binary) and index.op == "+" and index.left == row:
                bounds = index_range(index.right, defined)
                return bounds is not None and 0 <= bounds[0] and bounds[1] < count
        return False

    @staticmethod
    def _in_nested_array(load: cir.Load, dims: tuple[int, ...],
                         defined: Mapping[str, Expr]) -> bool:
        """A load of a nested loop's array at a position inside it: held arrays are
        [positions][lanes] and read at the lane's own `l`."""
        if len(load.indices) != len(dims):
            return False
        bounds = index_range(load.indices[0], defined)
        if bounds is None or bounds[0] < 0 or bounds[1] >= dims[0]:
            return False
        return len(dims) == 1 or load.indices[1] == L

    def _lane_bindings(self) -> None:
        em = self.lane_em
        for k, inst in enumerate(self.plan.lane_inputs):
            count = max(1, inst.shape.num_elements)
            if inst.shape.dims:
                em.bindings[id(inst)] = self._table_reader(inst.dtype, f"tab{k}", count)
            else:
                name = f"li{k}"
                self.body.declare(self._register_type(inst.dtype), name,
                                  cir.load(f"tab{k}", cir.Var("t")), const=True)
                em.bindings[id(inst)] = named(name)
        for inst in self.plan.body.instructions:
            element = element_read(inst)
            if element is None or element not in self.plan.per_lane:
                continue
            shape = self._shape(element)
            em.bindings[id(inst)] = self._lane_reader(f"s{element}", shape.dtype, shape.dims,
                                                      self._lane_dim(element))

    def _table_reader(self, dtype: DType, array: str, count: int) -> Callable[[Index], Value]:
        """Reads of the step's row of a lane-input table."""
        row = Binary("*", cir.Var("t"), cir.Int(count))

        def read(index: Index) -> Value:
            position = self.lane_em.linear_of(index)
            return self.body.let(self._register_type(dtype),
                                 cir.load(array, Binary("+", row, position)))

        return read
