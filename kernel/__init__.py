"""DecodeTopK GPU kernels (CuTe DSL).

This package's __init__ imports nothing, because `reference` loads the launch policy from
`kernel/decode_topk_cute.py`'s source through this package and must not import cutlass.
"""
