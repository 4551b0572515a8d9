"""Batches from generators: padding, addressable training stream, fixed sets, eval groups."""

import numpy as np
import pytest
import torch

from synthlab import generators
from synthlab.run.data import (
    IGNORE,
    PositionSampler,
    TrainBatches,
    TrainStream,
    collate,
    eval_sets,
    group_key,
    pad_ids,
    scatter_targets,
)


def test_pad_ids_right_pads_and_keeps_values():
    seqs = [np.array([1, 2, 3]), np.array([4]), np.array([], dtype=np.int64), np.array([5, 6])]
    out, lengths = pad_ids(seqs, pad_id=9)
    assert out.tolist() == [[1, 2, 3], [4, 9, 9], [9, 9, 9], [5, 6, 9]]
    assert lengths.tolist() == [3, 1, 0, 2]


def test_scatter_targets():
    out = scatter_targets(
        [np.array([0, 2]), np.array([], dtype=np.int64)], [np.array([7, 8]), np.array([], dtype=np.int64)], (2, 3)
    )
    assert out.tolist() == [[7, IGNORE, 8], [IGNORE] * 3]


def test_collate_matches_samples():
    task = generators.get_task("selective_copy", n_copy=4, n_blank=3)
    samples = task.sample("train", 5, seed=1)
    b = collate(samples, pad_id=len(task.vocab))
    for r, s in enumerate(samples):
        T = len(s.ids)
        assert b.ids[r, :T].tolist() == s.ids.tolist()
        assert (b.ids[r, T:] == len(task.vocab)).all()
        pos = torch.nonzero(b.scored[r] != IGNORE).flatten().tolist()
        assert pos == s.scored.tolist()
        assert b.scored[r, s.scored].tolist() == s.target_ids.tolist()
        assert b.targets[r, s.loss_positions].tolist() == s.loss_targets.tolist()


def test_flipflop_loss_covers_the_whole_sequence_but_scores_reads():
    task = generators.get_task("flipflop", n_pairs=8)
    b = collate(task.sample("train", 3, seed=0), pad_id=5)
    assert (b.targets[:, :-1] != IGNORE).all()  # next-token loss everywhere
    assert (b.scored != IGNORE).sum() < (b.targets != IGNORE).sum()


def test_train_stream_is_addressable():
    task = generators.get_task("flipflop", n_pairs=8)
    a = TrainStream(task, seed=3, batch_size=4)
    b = TrainStream(task, seed=3, batch_size=4)
    # batch 5 alone equals batch 5 after batches 0..4, and holds samples 20..23
    first = b.batch(5).ids
    for s in range(6):
        last = a.batch(s).ids
    assert torch.equal(first, last)
    direct = collate(task.sample("train", 4, seed=3, start=20), pad_id=5).ids
    assert torch.equal(first, direct)
    assert not torch.equal(a.batch(0).ids, a.batch(1).ids)
    assert not torch.equal(TrainStream(task, seed=4, batch_size=4).batch(5).ids, first)


def test_che_stream_one_length_per_batch():
    task = generators.get_task("parity_check", train_max_length=12, test_min_length=13, test_max_length=14)
    st = TrainStream(task, seed=0, batch_size=8)
    lengths = set()
    for s in range(20):
        b = st.batch(s)
        assert (b.lengths == b.lengths[0]).all()
        lengths.add(int(b.lengths[0]))
    assert len(lengths) > 3
    assert st.max_len == max(lengths)


def test_fixed_training_set_cycles_through_n_train_samples():
    task = generators.get_task("counting", n_vars=1, max_steps=8)
    st = TrainStream(task, seed=0, batch_size=4, n_train=12)
    seen = set()
    for s in range(3):  # one epoch
        for smp in st.samples(s):
            seen.add(smp.index)
    assert seen == set(range(12))
    # the next epoch uses the same samples in another order
    epoch2 = [smp.index for s in range(3, 6) for smp in st.samples(s)]
    assert sorted(epoch2) == list(range(12))
    assert epoch2 != [smp.index for s in range(3) for smp in st.samples(s)]


def test_fixed_set_with_batch_overrides_keeps_one_length_per_batch():
    task = generators.get_task("parity_check", train_max_length=12, test_min_length=13, test_max_length=14)
    st = TrainStream(task, seed=0, batch_size=4, n_train=10)
    for s in range(7):
        b = st.batch(s)
        assert (b.lengths == b.lengths[0]).all()


def test_train_batches_iterable_with_positions():
    class Scheme:
        name = "randomized"

        def sample(self, T, gen):
            return torch.sort(torch.randperm(64, generator=gen)[:T]).values

    task = generators.get_task("flipflop", n_pairs=4)
    st = TrainStream(task, seed=0, batch_size=2)
    items = list(TrainBatches(st, steps=3, positions=PositionSampler(Scheme(), seed=0)))
    assert len(items) == 3 and all(len(it) == 3 for it in items)
    again = list(
        TrainBatches(TrainStream(task, seed=0, batch_size=2), steps=3, positions=PositionSampler(Scheme(), seed=0))
    )
    assert all(torch.equal(a[2], b[2]) for a, b in zip(items, again))  # positions depend on (seed, step)
    assert not torch.equal(items[0][2], items[1][2])


def test_eval_sets_groups_per_length():
    task = generators.get_task("parity_check", train_max_length=5, test_min_length=6, test_max_length=8)
    sets = eval_sets(task, seed=0, n=3)
    assert "train" not in sets and "ood" in sets
    keys = [k for k, _, _ in sets["ood"]]
    assert keys == ["6", "7", "8"]
    for k, _, samples in sets["ood"]:
        assert len(samples) == 3 and all(s.params["length"] == int(k) for s in samples)
    ff = eval_sets(generators.get_task("flipflop", n_pairs=8), seed=0, n=2)
    assert set(ff) == {"test", "ood-sparse", "ood-dense"} and ff["test"][0][0] is None


def test_group_key():
    assert group_key({"length": 41}) == "41"
    assert group_key({"n_kv": 4, "length": 64}) == "length=64,n_kv=4"


@pytest.mark.parametrize("name", ["flipflop", "arithmetic", "bucket_sort", "mqar"])
def test_batches_fit_the_vocab(name):
    task = generators.get_task(name)
    b = collate(task.sample("test", 4, seed=0), pad_id=len(task.vocab))
    assert int(b.ids.max()) <= len(task.vocab)
    assert int(b.targets.max()) < len(task.vocab)


def test_the_training_loader_pins_batches_only_for_a_cuda_trainer():
    # a pageable batch's copy to the GPU may hold the host (see StepLoader.for_trainer)
    from types import SimpleNamespace

    from synthlab.run.data import StepLoader

    def trainer(kind):
        return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(kind)))

    ds = torch.utils.data.TensorDataset(torch.zeros(2))
    assert StepLoader.for_trainer(ds, trainer("cuda")).pin_memory
    assert not StepLoader.for_trainer(ds, trainer("cpu")).pin_memory
    assert not StepLoader.for_trainer(ds, None).pin_memory


@pytest.mark.parametrize("workers", [1, 2])
def test_loader_workers_deliver_the_in_process_sequence(workers):
    # worker w builds steps start + w, start + w + k, ...; the loader takes them in turn: step order
    from types import SimpleNamespace

    from synthlab.run.data import StepLoader

    task = generators.get_task("arithmetic")  # lengths vary from batch to batch
    alone = TrainStream(task, 3, 4)
    want = [alone.batch(s).ids for s in range(2, 11)]
    stream = TrainStream(task, 3, 4)
    cpu = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))
    loader = StepLoader.for_trainer(TrainBatches(stream, 11, start=2), cpu, workers, [stream])
    got = [ids for ids, _ in loader]
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
    # the longest batch, built in the workers, is noted in this process's stream (the record's train_len)
    assert stream.max_len == max(int(w.shape[1]) for w in want) and stream.max_len > int(want[0].shape[1])


def test_loader_workers_default_to_two_on_a_gpu_and_none_on_cpu():
    from types import SimpleNamespace

    from synthlab.run.data import StepLoader

    def trainer(kind):
        return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(kind)))

    ds = torch.utils.data.TensorDataset(torch.zeros(2))
    assert StepLoader.for_trainer(ds, trainer("cuda")).num_workers == 2
    assert StepLoader.for_trainer(ds, trainer("cpu")).num_workers == 0
    assert StepLoader.for_trainer(ds, trainer("cpu"), 2).num_workers == 2
