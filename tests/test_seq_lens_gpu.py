"""The engine's call convention on a GPU: decode_topk_seq_lens (rows of next_n speculative
tokens a request) on logits that are a row view of a wider buffer, through every entry
point; outputs checked against the contract on reference.topk.seq_lens_lengths."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _entries  # noqa: E402
from decode_topk.conformance.checker import check  # noqa: E402
from decode_topk.conformance.gpu_impl import POISON  # noqa: E402
from decode_topk.reference.topk import seq_lens_lengths  # noqa: E402

pytestmark = pytest.mark.gpu


def _view(bits, stride):
    """bits (uint16 [rows, width]) as a BF16 row view of a [rows, stride] buffer whose
    columns past the width hold NaN and garbage."""
    rows, width = bits.shape
    rng = np.random.default_rng(stride)
    full = rng.integers(0, 1 << 16, size=(rows, stride), dtype=np.uint16)
    full[:, width::3] = 0x7FC0
    full[:, :width] = bits
    buffer = torch.from_numpy(full.view(np.int16)).cuda()
    return buffer.view(torch.bfloat16)[:, :width]


@pytest.mark.parametrize("call", _entries.params())
@pytest.mark.parametrize("next_n", [1, 2, 4])
@pytest.mark.parametrize("block_mode", [False, True], ids=["token", "block"])
@pytest.mark.parametrize("width, stride", [(40960, 65536), (3000, 3008), (131072, 131080)])
def test_seq_lens_on_row_views(call, next_n, block_mode, width, stride):
    rng = np.random.default_rng(width + next_n)
    requests = 6
    rows = requests * next_n
    bits = rng.integers(0, 1 << 16, size=(rows, width), dtype=np.uint16)
    bits[::3] = np.where(rng.random((len(bits[::3]), width)) < 0.5, 0x3F80, 0x4000)  # ties
    seq = np.array([width, width - 1, 0, next_n - 2, 2049 + next_n, width // 2][:requests], dtype=np.int64)
    seq[3] = max(seq[3], -3)  # shorter than the drafts: the first rows clamp at 0
    logits = _view(bits, stride)
    assert logits.stride(0) == stride
    seq_lens = torch.tensor(seq, dtype=torch.int32, device="cuda")
    lengths = seq_lens_lengths(seq, next_n, width)
    for k in (512, 2048):
        out = torch.full((rows, k), POISON, dtype=torch.int32, device="cuda")
        call(logits, seq_lens, k, out, block_mode=block_mode, next_n=next_n)  # next_n 1: lengths
        violations = check(bits, lengths, k, block_mode, out.cpu().numpy())
        assert not violations, f"k={k} next_n={next_n}: {violations[0]} (lengths {lengths.tolist()})"
