"""Shape and element-type rules of HLO operations (XLA's ShapeInference, restated), one module
per op family. The op table (ir/ops.py) names each op's rule; every layer reads the rules
through the table, so no module here keeps a list of ops. `checks` holds ShapeError and the
checks several families share."""
