"""Evaluation of a trained model on every split: token_acc, seq_acc, the task's headline metrics.

Teacher-forced scoring at the scored positions (:func:`score_samples`); greedy decoding from
the prompt for tasks scored by their decoded answer (:func:`greedy_right`, arithmetic); a split
spanning lengths is scored per length group and averaged (:func:`evaluate`, :func:`by_length`).
Every metric is a fraction in [0, 1] (``read_error = 1 - token_acc``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, cast

import numpy as np
import torch

# headline metric name -> (source metric, transform). Every metric is a fraction.
_HEADLINE: dict[str, tuple[str, Callable[[float], float]]] = {
    "read_error": ("token_acc", lambda a: 1.0 - a),  # flip-flop: error per read
    "glitch_rate": ("seq_acc", lambda a: 1.0 - a),  # flip-flop: sequences with any wrong read
    "token_error": ("token_acc", lambda a: 1.0 - a),
    "seq_error": ("seq_acc", lambda a: 1.0 - a),
    "error": ("token_acc", lambda a: 1.0 - a),
    "query_acc": ("token_acc", lambda a: a),
    "accuracy": ("token_acc", lambda a: a),
    "acc": ("token_acc", lambda a: a),
    "length_mean_acc": ("token_acc", lambda a: a),  # CHE: mean over lengths of per-token accuracy
    "seq_acc": ("seq_acc", lambda a: a),
    "token_acc": ("token_acc", lambda a: a),
    "answer_acc": ("answer_acc", lambda a: a),  # arithmetic: greedy decoding from the prompt
}


def check_metrics(task: Any) -> None:
    unknown = [m for m in task.metrics if m not in _HEADLINE]
    if unknown:  # a generator declared a metric the trainer cannot compute
        raise ValueError(
            f"task {task.name!r}: headline metric {unknown[0]!r} is not computed by synthlab "
            f"(known: {', '.join(_HEADLINE)})"
        )


def decode_width(length: int) -> int:
    """Greedy decoding's room for a chunk whose longest sample has ``length`` tokens: 1.5x + 4,
    so a model that writes a longer chain than the reference still reaches its ``<eos>``."""
    return int(length * 1.5) + 4


@dataclass
class EvalContext:
    """What evaluation needs besides the model and the samples."""

    task: Any
    pad_id: int
    batch_size: int
    device: torch.device
    causal: bool = True
    rope_scaling: str | None = None
    rotary: bool = False
    train_len: int = 0
    positions: Any = None  # a PositionSampler for schemes also used at evaluation (randomized)
    precision: str = "fp32"  # train.precision: a bf16-mixed run is evaluated under the autocast it trained with


def autocast(ctx: EvalContext) -> Any:
    """The autocast a run's forward passes run under (none for fp32)."""
    if ctx.precision == "bf16-mixed":
        return torch.autocast(torch.device(ctx.device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _chunks(
    order: list[int], samples: list[Any], size: int, same_length: bool, length: Callable[[Any], int] = len
) -> list[list[int]]:
    """``order`` cut into chunks of at most ``size``; with ``same_length``, each chunk of one
    ``length`` (a sample's tokens; greedy decoding: its prompt's)."""
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and (len(cur) == size or (same_length and length(samples[i]) != length(samples[cur[0]]))):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


@contextlib.contextmanager
def _rope_scaled(model: torch.nn.Module, ctx: EvalContext, length: int):
    """Rope scaling with s = length / train_len for sequences longer than training."""
    on = bool(ctx.rope_scaling and ctx.rotary and ctx.train_len and length > ctx.train_len)
    if on:
        cast(Any, model).set_rope_scaling(ctx.rope_scaling, length / ctx.train_len)
    try:
        yield
    finally:
        if on:
            cast(Any, model).set_rope_scaling(None)


def _forward(model: torch.nn.Module, ids: torch.Tensor, ctx: EvalContext, key: int) -> torch.Tensor:
    if ctx.positions is not None:
        pos = ctx.positions(ids.shape[1], key).to(ids.device)
        return model(ids, positions=pos)
    return model(ids)


@torch.no_grad()
def score_samples(model: torch.nn.Module, samples: list[Any], ctx: EvalContext, key: int = 0) -> dict[str, float]:
    """token_acc (over all scored tokens) and seq_acc (samples with every scored token right),
    teacher-forced, at the scored positions."""
    from synthlab.run.data import IGNORE, collate

    n = len(samples)
    ok = np.zeros(n, dtype=np.int64)
    tot = np.zeros(n, dtype=np.int64)
    order = sorted(range(n), key=lambda i: len(samples[i]))  # less padding
    # one length per chunk where the chunk's longest sample would set a shorter one's rope
    # factor or sampled positions (its score would depend on the eval batch size)
    same = not ctx.causal or ctx.positions is not None or bool(ctx.rope_scaling and ctx.rotary)
    for c, idx in enumerate(_chunks(order, samples, ctx.batch_size, same)):
        b = collate([samples[i] for i in idx], ctx.pad_id)
        ids, sc = b.ids.to(ctx.device), b.scored.to(ctx.device)
        with _rope_scaled(model, ctx, int(b.lengths.max())):
            logits = _forward(model, ids, ctx, key * 1_000_003 + c)  # (B, T, V)
        mask = sc != IGNORE
        right = (logits.argmax(-1) == sc) & mask
        ok[idx] = right.sum(1).cpu().numpy()
        tot[idx] = mask.sum(1).cpu().numpy()
    return {
        "token_acc": float(ok.sum() / max(1, tot.sum())),
        "seq_acc": float(np.mean(ok == tot)) if n else float("nan"),
    }


@torch.no_grad()
def greedy_right(model: torch.nn.Module, samples: list[Any], ctx: EvalContext, key: int = 0) -> np.ndarray:
    """Arithmetic: decode greedily from each prompt (``task.prompt_length``) until ``<eos>``;
    a sample is right when the token before the generated ``<eos>`` is ``task.answer_id``.
    Returns one bool per sample, (N,). Batched: every row advances one token per step (no KV
    cache, causal model) up to its own :func:`decode_width` (not its chunk's longest sample's:
    a verbose model's answers would otherwise depend on the eval batch size)."""
    task = ctx.task
    eos = task.token_id("<eos>")
    n = len(samples)
    right = np.zeros(n, dtype=bool)
    order = sorted(range(n), key=lambda i: task.prompt_length(samples[i]))
    # under rope scaling each step's factor is the batch's current length / train_len: rows of one
    # prompt length advance in step, so each is scaled at its own length, whatever the batch size
    same = bool(ctx.rope_scaling and ctx.rotary)
    for c, idx in enumerate(_chunks(order, samples, ctx.batch_size, same, task.prompt_length)):
        chunk = [samples[i] for i in idx]
        plen = torch.tensor([task.prompt_length(s) for s in chunk])
        limit = torch.tensor([decode_width(len(s)) for s in chunk])  # (B,) each row's room
        width = int(limit.max())  # the model never sees more (max_len covers it)
        budget = width - int(plen.min())  # new tokens allowed
        buf = torch.full((len(chunk), width), ctx.pad_id, dtype=torch.long)
        for r, s in enumerate(chunk):
            buf[r, : plen[r]] = torch.from_numpy(s.ids[: plen[r]])
        buf, cur, limit = buf.to(ctx.device), plen.to(ctx.device), limit.to(ctx.device)
        rows = torch.arange(len(chunk), device=ctx.device)
        done = torch.zeros(len(chunk), dtype=torch.bool, device=ctx.device)
        answer = torch.full((len(chunk),), -1, dtype=torch.long, device=ctx.device)
        pos = ctx.positions(width, key * 1_000_003 + c).to(ctx.device) if ctx.positions is not None else None
        for _ in range(budget):
            t_now = int(cur.max())
            with _rope_scaled(model, ctx, t_now):
                ids = buf[:, :t_now]
                logits = model(ids) if pos is None else model(ids, positions=pos[:t_now])  # (B, t, V)
            nxt = logits[rows, cur - 1].argmax(-1)  # (B,)
            live = ~done & (cur < limit)
            buf[rows[live], cur[live]] = nxt[live]
            ended = live & (nxt == eos)
            answer[ended] = buf[rows[ended], cur[ended] - 1]
            cur = cur + live.long()
            done |= ended | (cur >= limit)
            if bool(done.all()):
                break
        want = torch.tensor([task.answer_id(s) for s in chunk], device=ctx.device)
        right[idx] = (answer == want).cpu().numpy()
    return right


def answer_acc_by_ops(task: Any, split: str, samples: list[Any], right: np.ndarray) -> dict[str, float]:
    """Arithmetic: ``answer_acc_ops_k`` = answer accuracy over the samples with k operators, for
    each k of ``task.op_counts(split)`` (the training mix on ``test-mix``, where the headline
    ``answer_acc`` averages over counts); NaN (None in the record) for a count with no sample."""
    counts = task.op_counts(split) if hasattr(task, "op_counts") else ()
    if not counts:
        return {}
    ops = np.array([task.op_count(s) for s in samples])  # (N,)
    return {f"answer_acc_ops_{k}": _fraction(right[ops == k]) for k in counts}


def _fraction(right: np.ndarray) -> float:
    return float(right.mean()) if len(right) else float("nan")


def _headline(task: Any, m: dict[str, float]) -> dict[str, float]:
    out = dict(m)
    for name in task.metrics:
        src, fn = _HEADLINE[name]
        if src in m:
            out[name] = fn(m[src])
    return out


def evaluate(
    model: torch.nn.Module, sets: dict[str, list[tuple[str | None, dict[str, Any], list[Any]]]], ctx: EvalContext
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """Metrics per split (a split spanning lengths: the mean over its groups) and per group;
    greedy tasks add ``answer_acc`` and, on a split mixing operator counts, ``answer_acc_ops_k``.

    Returns (metrics[split][name], groups[split][group key][name]).
    """
    was_training = model.training
    model.eval()
    try:
        with autocast(ctx):
            return _evaluate_sets(model, sets, ctx)
    finally:
        model.train(was_training)


def _evaluate_sets(
    model: torch.nn.Module, sets: dict[str, list[tuple[str | None, dict[str, Any], list[Any]]]], ctx: EvalContext
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    metrics: dict[str, dict[str, float]] = {}
    groups: dict[str, dict[str, dict[str, float]]] = {}
    for s_i, (split, parts) in enumerate(sets.items()):
        per: dict[str, dict[str, float]] = {}
        for g_i, (gkey, _ov, samples) in enumerate(parts):
            key = s_i * 100_003 + g_i
            m = score_samples(model, samples, ctx, key)
            if ctx.task.scoring == "greedy":
                right = greedy_right(model, samples, ctx, key)  # (N,) bool
                m["answer_acc"] = _fraction(right)
                m.update(answer_acc_by_ops(ctx.task, split, samples, right))
            per[gkey if gkey is not None else ""] = _headline(ctx.task, m)
        if len(parts) == 1 and parts[0][0] is None:
            metrics[split] = per[""]
        else:
            groups[split] = per
            names = next(iter(per.values())).keys()
            metrics[split] = {k: float(np.mean([g[k] for g in per.values()])) for k in names}
    return metrics, groups


def by_length(task: Any, groups: dict[str, dict[str, dict[str, float]]]) -> dict[str, float] | None:
    """Flat {length: accuracy} of the grouped splits (keys ``split/length`` when several
    splits are grouped). The value is the task's headline accuracy per group (CHE: per-token
    accuracy, its per-length score; passkey: sequence accuracy), token_acc otherwise."""
    if not groups:
        return None
    accs = [m for m in task.metrics if m.endswith("acc") or m == "accuracy"]
    name = accs[0] if accs else "token_acc"
    flat = len(groups) == 1
    out: dict[str, float] = {}
    for split, per in groups.items():
        for k, m in per.items():
            out[k if flat else f"{split}/{k}"] = m.get(name, m["token_acc"])
    return out


def format_result(record: dict[str, Any]) -> str:
    """A compact table: one row per split, metrics in %."""
    metrics = record.get("metrics") or {}
    head = f"{record['task']}  pe={record['pe']}  seed={record['train']['seed']}  status={record['status']}"
    if record.get("status") != "ok":
        return head + f"\nerror: {record.get('error')}"
    names: list[str] = []
    for m in metrics.values():
        names += [k for k in m if k not in names]
    rows = [
        [split] + [("-" if m.get(k) is None else f"{100 * m[k]:.2f}") for k in names] for split, m in metrics.items()
    ]
    cells = [["split"] + [f"{k} %" for k in names]] + rows
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    tail = (
        f"params={record['model']['params']}  train_len={record['train']['train_len']}  "
        f"wall={record['wall_s']}s  device={record['device']}"
    )
    return "\n".join([head, *lines, tail])
