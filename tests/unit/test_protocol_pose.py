"""PoSE protocol (Zhu et al. 2024, Sec. 3.2 / App. B; dwzhu-pku/PoSE src/train_pose.py):
per-example positions, the N = L_c arm as RandPos, and the static interpolation factor
L_t / L_c in training and at evaluation."""

from __future__ import annotations

import torch

from synthlab import generators
from synthlab.model import parse_positions
from synthlab.model.encoders.rotary import Rotary
from synthlab.model.indices import PoSE, Randomized
from synthlab.run.data import PositionSampler, TrainBatches, TrainStream
from synthlab.run.training import train


def _check_pose_law(pos: torch.Tensor, chunks: int, target: int) -> None:
    """Rows of (B, T) positions follow PoSE(c_i) = u_i + st_i + (0..l_i - 1), u_0 = 0."""
    T = pos.shape[-1]
    assert torch.all(pos[:, 0] == 0)  # u_0 = 0
    steps = pos[:, 1:] - pos[:, :-1]  # (B, T-1)
    assert torch.all(steps >= 1)  # chunks contiguous, skips non-negative
    assert torch.all((steps > 1).sum(-1) <= chunks - 1)  # at most N - 1 skips
    assert torch.all(pos[:, -1] <= target - 1)  # u_{N-1} <= L_t - L_c
    assert int(pos[:, -1].max()) - (T - 1) <= target - T


def test_pose_positions_are_drawn_per_example():
    """Sec. 3.2: lengths and skips are re-sampled for every training example, so a batch
    carries (B, T) positions, one distinct row per example (was one (T,) row per batch)."""
    task = generators.get_task("passkey", length=64, target_length=256, k_digits=2)
    sampler = PositionSampler(parse_positions("pose:chunks=2,target=256"), seed=0)
    items = list(TrainBatches(TrainStream(task, seed=0, batch_size=8), steps=2, positions=sampler))
    ids, _, pos = items[0]
    assert pos.shape == ids.shape == (8, 64)
    assert len({tuple(r) for r in pos.tolist()}) == 8  # every example its own draw
    _check_pose_law(pos, chunks=2, target=256)
    # deterministic per (seed, step): same bytes again, a new draw next step
    again = list(
        TrainBatches(
            TrainStream(task, seed=0, batch_size=8),
            steps=2,
            positions=PositionSampler(parse_positions("pose:chunks=2,target=256"), seed=0),
        )
    )
    assert all(torch.equal(a[2], b[2]) for a, b in zip(items, again))
    assert not torch.equal(items[0][2], items[1][2])


def test_randomized_positions_stay_shared_by_the_batch():
    """Ruoss et al.'s scheme keeps one (T,) row per batch (unchanged by the PoSE fix)."""
    task = generators.get_task("passkey", length=32, target_length=64, k_digits=2)
    sampler = PositionSampler(parse_positions("randomized:max=64"), seed=0)
    ids, _, pos = next(iter(TrainBatches(TrainStream(task, seed=0, batch_size=4), steps=1, positions=sampler)))
    assert pos.shape == (32,)


def test_pose_skip_law_per_example():
    """N = 2 (the paper's default): the cut is uniform on 1..T-1 and u_1 ~ U{0..L_t - L_c},
    each example independently (means over 4000 draws, 5 sigma tolerances)."""
    T, Lt, B = 16, 48, 4000
    pos = PoSE(chunks=2, target=Lt).sample_rows(B, T, torch.Generator().manual_seed(0))  # (B, T)
    _check_pose_law(pos, chunks=2, target=Lt)
    jump = (pos[:, 1:] - pos[:, :-1]).max(-1).values - 1  # (B,) u_1 (0 when no skip)
    room = Lt - T
    assert abs(float(jump.float().mean()) - room / 2) < 5 * (room / 12**0.5) / B**0.5
    assert int(jump.min()) == 0 and int(jump.max()) == room
    cut = torch.where((pos[:, 1:] - pos[:, :-1]) > 1, torch.arange(1, T), T).min(-1).values  # (B,) first skip
    with_skip = cut[jump > 0]
    assert int(with_skip.min()) == 1 and int(with_skip.max()) == T - 1


def test_pose_chunks_at_least_window_is_randpos():
    """App. B / Table 5's N = L_c arm is RandPos (Ruoss et al.): T distinct sorted positions
    spread over [0, L_t), not a saturated sequential law whose skips run out after a few
    chunks and leave a contiguous tail."""
    T, Lt, B = 64, 512, 16
    for chunks in (T, 1000):
        g = torch.Generator().manual_seed(1)
        pos = torch.stack([PoSE(chunks=chunks, target=Lt).sample(T, g) for _ in range(B)])  # (B, T)
        steps = pos[:, 1:] - pos[:, :-1]  # (B, T-1)
        assert torch.all(steps >= 1) and int(pos.min()) >= 0 and int(pos.max()) < Lt
        assert torch.all((steps > 1).sum(-1) >= T // 2)  # RandPos: ~ (1 - T/L_t) (T-1) = 55 gaps; saturated: ~10
        tail = pos[:, -T // 4 :]
        assert torch.all(tail[:, -1] - tail[:, 0] > T // 4 - 1)  # the last quarter is not contiguous
        assert torch.all(pos[:, -1] - pos[:, 0] > Lt // 2)  # spread over the target range
        assert len({tuple(r) for r in pos.tolist()}) == B
        # exactly Ruoss et al.'s sample with L_max = L_t, one per example
        ref = Randomized(max=Lt).sample_rows(B, T, torch.Generator().manual_seed(1))
        assert torch.equal(pos, ref)
        assert torch.equal(PoSE(chunks=chunks, target=Lt).sample_rows(B, T, torch.Generator().manual_seed(1)), ref)


def test_pose_pairs_rope_scaling_statically_in_training_and_evaluation(monkeypatch):
    """PoSE interpolates at alpha = L_t / L_c during training and evaluates with the same
    factor at every length (src/train_pose.py train(): config.rope_scaling; eval_passkey.py).
    Before: training ran unscaled and evaluation scaled dynamically by L / L_c."""
    seen: list[tuple[bool, int, float]] = []
    orig = Rotary._scale

    def spy(self, T):
        s = orig(self, T)
        seen.append((self.training, T, s))
        return s

    monkeypatch.setattr(Rotary, "_scale", spy)
    # passkey smoke: L_c = 32, ood lengths up to 64; target L_t = 128 -> alpha = 4
    rec = train("passkey", "rope", preset="smoke", positions="pose:chunks=2,target=128", rope_scaling="linear", steps=3)
    assert rec["status"] == "ok" and rec["train"]["train_len"] == 32
    in_training = [s for training, _, s in seen if training]
    at_eval = [(T, s) for training, T, s in seen if not training]
    assert in_training and all(s == 4.0 for s in in_training)
    assert {T for T, _ in at_eval} >= {32, 64}  # in-distribution and longer lengths
    assert all(s == 4.0 for _, s in at_eval)


def test_randomized_keeps_eval_time_rope_scaling(monkeypatch):
    """Only PoSE pairs statically: randomized positions + linear train unscaled and scale by
    L / L_train at evaluation beyond the training length, as before."""
    seen: list[tuple[bool, int, float]] = []
    orig = Rotary._scale
    monkeypatch.setattr(Rotary, "_scale", lambda self, T: seen.append((self.training, T, orig(self, T))) or seen[-1][2])
    rec = train("passkey", "rope", preset="smoke", positions="randomized:max=128", rope_scaling="linear", steps=3)
    assert rec["status"] == "ok"
    assert all(s == 1.0 for training, _, s in seen if training)
    assert {(T, s) for training, T, s in seen if not training and T == 64} == {(64, 2.0)}


def test_load_run_restores_poses_static_rope_factor(tmp_path):
    """A reloaded PoSE run scales its rotary positions as it trained and was evaluated (before:
    load_run built the model unscaled, so a notebook saw another function)."""
    import torch

    from synthlab import load_run

    rec = train(
        "passkey",
        "rope",
        preset="smoke",
        positions="pose:chunks=2,target=128",
        rope_scaling="linear",
        steps=3,
        out=tmp_path,
    )
    run = load_run(tmp_path / rec["run_id"])
    rot = run.model.rotary_encoders()[0]
    assert rot._scale(64) == 4.0 and rot._scale(32) == 4.0
    _, ids = run.batch("test", n=2)
    with torch.no_grad():
        a = run.model(ids)
        run.model.set_rope_scaling(None)
        b = run.model(ids)
    assert not torch.allclose(a, b)
