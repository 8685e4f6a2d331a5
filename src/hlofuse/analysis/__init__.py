"""Read-only analyses over the IR that passes, fusion and code generation share.

Layer rule: modules here import only `hlofuse.ir` (and each other), never passes, fusion,
codegen or the runtime.
"""
