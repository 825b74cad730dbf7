"""DecodeTopK inside an engine's decode step, on a GPU: the custom op under torch.compile,
no allocation and no compilation once prepared, and CUDA graphs captured once and
replayed with new logits and new lengths written into the captured buffers, every replay
checked (conformance/gpu_check.py, shown to agree with conformance.check on the
catalogue by tests/test_gpu_tools_cpu.py)."""

import pytest

torch = pytest.importorskip("torch")

import _entries  # noqa: E402
from decode_topk.conformance import gpu_check  # noqa: E402
from decode_topk.conformance.gpu_impl import POISON  # noqa: E402

pytestmark = pytest.mark.gpu


def _prepare(width):
    """Compile (DSL) what the calls below launch; the AOT library loads on first use."""
    if _entries._have_dsl():
        from decode_topk.kernel import decode_topk_cute as dtk

        dtk.precompile(width)


@pytest.mark.parametrize("call", _entries.params())
def test_torch_compile_traces_the_op(call):
    import decode_topk.kernel.torch_ops  # noqa: F401

    logits, lengths, _ = gpu_check.make_batch(8, 131072, seed=11)

    def step(logits, lengths, out):
        torch.ops.decode_topk.decode_topk(logits, lengths, 2048, out, False)
        return out

    compiled = torch.compile(step, fullgraph=True)
    out = torch.full((8, 2048), POISON, dtype=torch.int32, device="cuda")
    compiled(logits, lengths, out)
    counts, first = gpu_check.check(logits, lengths, 2048, False, out)
    assert not sum(counts.values()), f"{counts} rows {first}"


@pytest.mark.parametrize("call", _entries.params())
def test_no_allocation_or_compilation_once_prepared(call):
    width = 262144
    _prepare(width)
    logits, lengths, _ = gpu_check.make_batch(64, width, seed=12)
    outs = {k: torch.empty((64, k), dtype=torch.int32, device="cuda") for k in (512, 2048)}
    for block_mode in (False, True):  # first calls: occupancy queries, lazy module loads
        for k, out in outs.items():
            call(logits, lengths, k, out, block_mode)
            call(logits[:1], lengths[:1], k, out[:1], block_mode)
    torch.cuda.synchronize()
    compiled_before = None
    if _entries._have_dsl():
        from decode_topk.kernel import decode_topk_cute as dtk

        compiled_before = len(dtk._compiled)
    allocations = torch.cuda.memory_stats()["allocation.all.allocated"]
    for block_mode in (False, True):
        for k, out in outs.items():
            for rows in (64, 8, 1):
                call(logits[:rows], lengths[:rows], k, out[:rows], block_mode)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocations, "a call allocated"
    if compiled_before is not None:
        assert len(dtk._compiled) == compiled_before, "a call compiled"


def _lengths(gen, rows, width):
    bounds = torch.tensor(gpu_check.boundary_lengths(width), device="cuda")
    pick = torch.randint(0, 3, (rows,), generator=gen, device="cuda")
    return torch.where(pick == 0, bounds[torch.randint(0, bounds.numel(), (rows,), generator=gen, device="cuda")],
                       torch.where(pick == 1, torch.randint(0, width + 1, (rows,), generator=gen, device="cuda"),
                                   torch.full((rows,), width, device="cuda"))).to(torch.int32)


# (mode, rows, width, k, next_n, replays): the sampled path, block rows of the 16-CTA
# build, and the engine's seq_lens convention.
GRAPHS = [("token", 8, 131072, 2048, 1, 1000), ("block", 4, 1048576, 2048, 1, 100),
          ("token", 16, 65536, 512, 2, 200)]


@pytest.mark.parametrize("call", _entries.params())
@pytest.mark.parametrize("mode, rows, width, k, next_n, replays", GRAPHS,
                         ids=[f"{g[0]}-{g[1]}x{g[2]}-k{g[3]}-n{g[4]}" for g in GRAPHS])
def test_cuda_graph_replays(call, mode, rows, width, k, next_n, replays):
    block_mode = mode == "block"
    _prepare(width)
    pool = [gpu_check.make_batch(rows, width, seed=100 + i)[0] for i in range(8)]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(rows + width)
    logits = torch.empty_like(pool[0])
    seq_lens = torch.zeros((rows // next_n,), dtype=torch.int32, device="cuda")
    out = torch.empty((rows, k), dtype=torch.int32, device="cuda")
    call(logits, seq_lens, k, out, block_mode, next_n)  # warm outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(logits, seq_lens, k, out, block_mode, next_n)
    bad = 0
    for i in range(replays):
        perm = torch.randperm(rows, generator=gen, device="cuda")
        logits.copy_(pool[i % len(pool)][perm])  # new logits, in the captured buffer
        seq_lens.copy_(_lengths(gen, rows // next_n, width))  # new lengths too
        out.fill_(POISON)
        graph.replay()
        lengths = gpu_check.seq_lens_lengths(seq_lens, next_n, width)
        counts, first = gpu_check.check(logits, lengths, k, block_mode, out)
        if sum(counts.values()):
            bad += 1
            assert bad < 3, f"replay {i}: {counts}, rows {first}"
    assert bad == 0, f"{bad} of {replays} replays had violations"
