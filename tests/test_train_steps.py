"""The training steps' cheaper forms (issue 73) give the numbers the plain forms gave, bit for bit: the bypassed
taps of the language model's network term as a staircase, one host read of a step's losses."""

from __future__ import annotations

import torch

from laya_cli.training.lm import summed


def test_summed_reads_the_chunks_as_one_float_each():
    head = [torch.tensor(1.1), torch.tensor(2.2), torch.tensor(1e-8)]
    lens = [torch.tensor(3.3)]
    total, local, term = summed(head, lens, torch.tensor(0.7))
    expected = 0.0
    for v in head:
        expected += float(v)
    assert (total, local, term) == (expected, float(lens[0]), float(torch.tensor(0.7)))
    assert summed([], [], None) == (0.0, 0.0, 0.0)


def test_the_staircase_of_bypassed_taps_is_the_loop_bit_for_bit(tmp_path):
    from benchmarks.synthetic import make_lm_folder, sentences
    from laya_cli.auditing.lm import each_bypassed
    from laya_cli.backbones.lm import build_language_model
    from laya_cli.backbones.spec import BackboneSpec
    from laya_cli.training import lm_alignment
    from laya_cli.training.lm_alignment import bypassed_taps

    folder = make_lm_folder(tmp_path, sentences(60), 200)
    lm = build_language_model(BackboneSpec(f"hf:{folder / 'model'}", task="lm"))
    torch.manual_seed(0)
    for T in (16, 40, 5):  # 5 positions: fewer rows than a stacked product keeps exact, so the loop runs
        x = torch.stack([torch.randint(0, 200, (1, T)), torch.ones(1, T, dtype=torch.long)], dim=1)
        loop = [states[i:] for i, states in each_bypassed(lm.backbone, x)]
        for cap in (lm_alignment.STACKED_STATES, 0):  # 0: the staircase refused for its size, the loop
            lm_alignment.STACKED_STATES = cap
            try:
                got = bypassed_taps(lm.backbone, x)
            finally:
                lm_alignment.STACKED_STATES = 1 << 25
            assert [len(t) for t in got] == [len(t) for t in loop]
            assert all(torch.equal(a, b) for s, t in zip(got, loop) for a, b in zip(s, t))
