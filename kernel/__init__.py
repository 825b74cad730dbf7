"""DecodeTopK's kernel layer: what an engine ships (SPEC.md part 2).

`policy` (the launch policy, input checks and host front end; DSL-free), `decode_topk_cute`
(the CuTe DSL kernel), `aot_loader` (the ahead-of-time library, no DSL), `torch_ops` (the
custom ops), `vendor` (the one-file vendorable kernel), `aot` and `resources` (build tools).
This __init__ imports none of them, so the model and the suite can import `policy`
without the DSL or torch.
"""
