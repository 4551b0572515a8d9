"""A run's resolved config: a preset and overrides validated into a :class:`RunConfig`, its task,
its lengths checked against the encoding, and its model.

``resolve_config`` for ``synthlab.train``, ``cell_config`` for a sweep's cells; ``model_for``
builds the Transformer of a run, for training and for ``load_run`` alike.
"""

from __future__ import annotations

from typing import Any

import torch

from synthlab import generators
from synthlab.core.config import RunConfig, apply_overrides, validate_fields
from synthlab.core.errors import check_seed, did_you_mean
from synthlab.model.registry import PE_REVISION, PESpec
from synthlab.plan.presets import build_config
from synthlab.run import specs
from synthlab.run.evaluation import check_metrics, decode_width


def _model_api() -> Any:
    import synthlab.model as m

    return m


def resolve_config(
    task: str,
    pe: str,
    preset: str = "quick",
    overrides: dict[str, Any] | None = None,
    *,
    seed: int = 0,
    positions: str | None = None,
    rope_scaling: str | None = None,
    probe: bool = True,
) -> RunConfig:
    """The validated :class:`RunConfig` of one run; nothing is built, trained or written.

    Raises ValueError (naming the key and what is allowed) for an unknown task / preset /
    setting, a wrong type or range, a bad pe spec or positions scheme, or an impossible
    combination (``validate_combination`` of the model, with sequence lengths probed from the
    task's splits when ``probe``).
    """
    return resolve(task, pe, preset, overrides, seed=seed, positions=positions, rope_scaling=rope_scaling, probe=probe)[
        0
    ]


def cell_config(cell: Any, preset: str, *, probe: bool = True) -> RunConfig:
    """The validated :class:`RunConfig` of a sweep cell (:class:`synthlab.plan.cells.Cell`): the config
    defaults + the cell's overrides, which hold its sweep file's whole preset, its axis values and
    ``--set``; no installed file is read by name (ValueError as :func:`resolve_config`)."""
    return resolve(
        cell.task,
        cell.encoding,
        preset,
        cell.overrides,
        seed=cell.seed,
        positions=cell.scheme,
        rope_scaling=cell.rope_scaling,
        probe=probe,
        installed=False,
        dape_k=cell.dape_k,
        pose_chunks=cell.pose_chunks,
    )[0]


def resolve(
    task: str,
    pe: str,
    preset: str,
    overrides: dict[str, Any] | None,
    *,
    seed: int,
    positions: str | None,
    rope_scaling: str | None,
    probe: bool,
    installed: bool = True,
    dape_k: int | None = None,
    pose_chunks: int | None = None,
) -> tuple[RunConfig, PESpec]:
    """:func:`resolve_config` and the parsed pe spec, which the run is handed (parsed once);
    ``installed``: start from the installed family file's preset (else the defaults);
    ``dape_k``, ``pose_chunks``: a sweep cell's axes (fields of the config, :mod:`synthlab.run.specs`)."""
    if not isinstance(task, str) or task not in generators.TASKS:
        hint = did_you_mean(task, list(generators.TASKS)) or " (see `synthlab tasks`)"
        raise ValueError(f"unknown task {task!r}{hint}")
    check_seed(seed)
    cfg = build_config(
        task, pe, preset, seed=int(seed), positions=positions, rope_scaling=rope_scaling, installed=installed
    )
    names = tuple(generators.TASKS[task].PARAMS)
    cfg = apply_overrides(cfg, overrides, names)
    t = generators.get_task(task, **cfg.task_params)  # types and checks the task parameters
    cfg.task_params = dict(t.params)
    cfg.dape_k, cfg.pose_chunks = dape_k, pose_chunks
    validate_fields(cfg)
    check_metrics(t)
    m = _model_api()
    base = m.parse_pe(cfg.pe)
    cfg.pe = base.name  # canonical; a dape_k axis's kernel stays in its field
    spec, scheme = specs.encoding(cfg, base), specs.position_scheme(cfg)
    # a pose_chunks axis's number stays in its field; "pose" named, so every check sees positions
    cfg.positions = (cfg.positions or "pose").strip() if cfg.pose_chunks else scheme.name if scheme else None
    if cfg.rope_scaling is not None and not spec.rotary:
        raise ValueError(
            f"rope_scaling={cfg.rope_scaling!r} needs a rotary encoding (rope, xpos, bipe-rope), got pe={spec.name!r}"
        )
    if not cfg.model.causal and t.scoring != "placeholder":
        raise ValueError(
            "model.causal=false (bidirectional encoder) needs a placeholder-scored task "
            f"(the CHE tasks, one length per batch); task {task!r} pads variable-length batches"
        )
    if probe:
        from synthlab.run.data import probe_lengths  # lightning: loaded once a run is built

        train_len, eval_len = probe_lengths(t, cfg.train.seed)
        validate_combination(cfg, spec, scheme, train_len, eval_extent(t, eval_len))
    return cfg, spec


def make_task(cfg: RunConfig) -> Any:
    """The task of a resolved config (parameters left at None keep the task's default)."""
    return generators.get_task(cfg.task, **{k: v for k, v in cfg.task_params.items() if v is not None})


def eval_extent(task: Any, eval_len: int) -> int:
    """The longest sequence evaluation feeds the model: greedy decoding may run past the data."""
    return decode_width(eval_len) if task.scoring == "greedy" else eval_len


def _position_extent(scheme: Any) -> int:
    """Largest index a training-time scheme can produce + 1 (randomized: max; PoSE: target)."""
    return int(scheme.max_position) if scheme is not None else 0


def max_len_of(cfg: RunConfig, scheme: Any, train_len: int, eval_len: int) -> int:
    """The model's position range: ``model.max_len``, else the longest sequence it will see."""
    if cfg.model.max_len is not None:
        return cfg.model.max_len
    return max(train_len, eval_len, _position_extent(scheme))


def validate_combination(cfg: RunConfig, spec: PESpec, scheme: Any, train_len: int, eval_len: int) -> int:
    """The model's position range (:func:`max_len_of`); ValueError for a combination the
    encoding, the positions scheme or these lengths do not allow."""
    max_len = max_len_of(cfg, scheme, train_len, eval_len)
    _model_api().validate_combination(spec, scheme, cfg.model.causal, max_len, eval_len)
    if scheme is not None and train_len > scheme.max_position:
        raise ValueError(
            f"--positions {scheme.name}: the training sequences ({train_len} tokens) are longer than "
            f"its range ({scheme.max_position}); raise it to at least {train_len}"
        )
    return max_len


def model_for(
    cfg: RunConfig, task: Any, spec: PESpec | None = None, *, max_len: int, revision: int = PE_REVISION
) -> torch.nn.Module:
    """The Transformer of a run (the one place it is built, for training and for
    ``load_run``): ``cfg.model``'s shape, the task's vocabulary (+ the pad id) and BiPE tokens,
    the encoding ``spec`` (``cfg.pe`` parsed when not given). ``revision``: the encodings'
    forms; ``load_run`` passes the one a saved run trained with."""
    m = _model_api()
    return m.Transformer(
        specs.encoding(cfg) if spec is None else spec,
        vocab_size=len(task.vocab) + 1,
        d_model=cfg.model.d_model,
        n_layers=cfg.model.n_layers,
        n_heads=cfg.model.n_heads,
        max_len=max_len,
        dropout=cfg.model.dropout,
        tie_embeddings=cfg.model.tie_embeddings,
        causal=cfg.model.causal,
        separator_ids=tuple(task.token_id(s) for s in task.separators),
        segment_start_ids=tuple(task.token_id(s) for s in task.segment_starts),
        revision=revision,
    )
