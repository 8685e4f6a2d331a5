"""Large per-lane elements, computed into the block's scratch `n<i>[position][lane]` by loops
over their positions: when such a loop reads nothing the lane loop writes, it runs after the
lane loop with the lanes inside, so that lane code vectorises over the lanes."""

from __future__ import annotations

from hlofuse.codegen import cir, cir_walks
from hlofuse.codegen.cir import Stmt
from hlofuse.codegen.whole_loop_elements import L
from hlofuse.codegen.whole_loop_lane_code import SIMD, LaneCode


class ScratchLanes(LaneCode):
    """The interchange of large elements' position loops with the lane loop."""

    def _interchangeable(self, stmt: Stmt, looped: list[int]) -> bool:
        """Whether a looped element's position loop, just written inside the lane loop, can
        run after it with the lanes inside (`for q { simd for l }`): with vector lanes, when
        it reads no memory the lane loop writes (the state of the elements computed
        position by position, `s<i>`/`n<i>`, the step's tables and the math values only) and
        writes its own `n<i>` and variables of its own."""
        if self.lanes == 1 or not isinstance(stmt, cir.For):
            return False
        written = {f"n{i}" for i in looped}
        own = written | {f"s{i}" for i in looped}
        declared = {x.name for x in cir_walks.statements(stmt) if isinstance(x, cir.Declare)}
        for x in cir_walks.statements(stmt):
            if isinstance(x, cir.Assign):
                target = x.target
                if isinstance(target, cir.Var) and target.name not in declared:
                    return False
                if isinstance(target, cir.Load) and (
                        not isinstance(target.array, cir.Var) or
                        target.array.name not in written):
                    return False
            elif not isinstance(x, cir.Declare | cir.If | cir.For | cir.Block):
                return False
            for expr in cir_walks.expressions(x):
                for e in cir.walk(expr):
                    if not isinstance(e, cir.Load):
                        continue
                    if not isinstance(e.array, cir.Var):
                        return False
                    name = e.array.name
                    # Speculable arrays other than the state (the step's tables, the math
                    # values) are not written by the lane loop.
                    read_only = name in self.body.speculable and name not in self.state_arrays
                    if name not in own and not read_only:
                        return False
        return True

    def _keep_lane_values(self, loops: list[cir.For]) -> list[tuple[cir.Type, str]]:
        """At the end of the lane loop, each lane's values the interchanged position loops
        read (the values every position shares, moved in front of them) into per-lane
        arrays `h_<name>[lane]`: (type, name) of each."""
        body = self.body
        declared = {x.name: x.type for x in body.scope.stmts
                    if isinstance(x, cir.Declare) and not x.dims}
        read = cir_walks.names_used(list(loops))
        kept = [(ctype, name) for name, ctype in declared.items()
                if name in read and name not in ("e", "l")]
        for _, name in kept:
            body.assign(cir.load(f"h_{name}", L), cir.Var(name))
        return kept

    def _interchanged_positions(self, loops: list[cir.For],
                                lane_values: list[tuple[cir.Type, str]]) -> None:
        """The position loops after the lane loop, a simd loop over the lanes inside each:
        lane code of a large element then vectorises over the lanes (inside the lane loop
        a loop over 200 positions kept the lane loop scalar)."""
        body = self.body
        lane_loop = body.scope.stmts.pop()
        for ctype, name in lane_values:
            body.declare(ctype, f"h_{name}", dims=(self.lanes,))
        body.emit(lane_loop)
        for loop in loops:
            inner = cir.For("l", cir.Int(0), cir.Int(self.lanes), [], SIMD, cir.Special.INT)
            names = cir_walks.names_used([loop])
            if "e" in names:
                inner.body.append(cir.Declare(cir.INDEX, "e", self._lane_index_of_slot(),
                                              const=True))
            for ctype, name in lane_values:
                if name in names:
                    inner.body.append(cir.Declare(ctype, name, cir.load(f"h_{name}", L),
                                                  const=True))
            inner.body += loop.body
            loop.body = [inner]
            body.emit(loop)
