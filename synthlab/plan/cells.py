"""Grid cells: a sweep file's preset expanded into the training runs it asks for.

:func:`expand_cells` gives every cell (one training run) in a fixed order; a cell's ``key``
names the whole run, so a resumed study finds its finished cells by it. The axes ``dape_k``
(DAPE's kernel) and ``pose_chunks`` (PoSE's chunk number) set one parameter of the encoding
and of the positions scheme: a cell carries them as fields, which the run's config takes
(:func:`synthlab.run.training.cell_config`) and its record keeps.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any

from synthlab.model import parse_pe

# bare `--set` keys the sweep normalises to dotted ones, so an axis overrides a preset setting
_ALIASES = {
    "d_model": "model.d_model",
    "n_heads": "model.n_heads",
    "n_layers": "model.n_layers",
    "lr": "train.lr",
    "steps": "train.steps",
    "batch_size": "train.batch_size",
}
# axes that name the run itself; every other axis is a `--set` key
_SPECIAL_AXES = ("task", "pe", "seed", "dape_k", "pose_chunks", "positions")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One grid cell = one training run."""

    task: str
    encoding: str  # the sweep file's pe, as written
    seed: int
    overrides: dict[str, Any]
    scheme: str | None  # the sweep file's positions, as written
    rope_scaling: str | None
    slot: int
    axes: dict[str, Any]  # the axis values that name the cell (for tables)
    dape_k: int | None = None  # the dape_k axis: the kernel of the encoding's DAPE
    pose_chunks: int | None = None  # the pose_chunks axis: PoSE's chunk number

    @property
    def pe(self) -> str:
        """The encoding with ``dape_k`` written in, as cell keys and a study's records name the
        run (``kerple+dape`` + 3 -> ``kerple+dape:k=3``); no code reads the kernel back from it."""
        return self.encoding if self.dape_k is None else _spelled_pe(self.encoding, self.dape_k)

    @property
    def positions(self) -> str | None:
        """The positions scheme with ``pose_chunks`` written in, as :attr:`pe` (``pose:target=64``
        + 3 -> ``pose:chunks=3,target=64``; no scheme -> ``pose:chunks=3``)."""
        return self.scheme if self.pose_chunks is None else _spelled_positions(self.scheme, self.pose_chunks)

    @property
    def key(self) -> str:
        return json.dumps(
            {
                "task": self.task,
                "pe": self.pe,
                "seed": self.seed,
                "positions": self.positions,
                "rope_scaling": self.rope_scaling,
                "overrides": self.overrides,
                "slot": self.slot,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.axes.items())


# the two spellings below are the cell keys of studies already run, which a resumed study looks
# its finished cells up by: the file's own text kept, the axis's parameter written last (first)
def _spelled_pe(pe: str, k: int) -> str:
    parts = pe.split("+")
    i = next(i for i, comp in enumerate(parts) if parse_pe(comp).has("dape"))
    name, _, params = parts[i].partition(":")
    kept = [p for p in params.split(",") if p and p.split("=")[0].strip() != "k"]  # an explicit default k=1
    parts[i] = f"{name}:{','.join([*kept, f'k={k}'])}"
    return "+".join(parts)


def _spelled_positions(positions: str | None, n: int) -> str:
    if positions is None:
        return f"pose:chunks={n}"
    _, _, params = positions.partition(":")
    kept = [p for p in params.split(",") if p and p.split("=")[0].strip() != "chunks"]
    return "pose:" + ",".join([f"chunks={n}", *kept])


def _tuned_value(spec: Any, slot: int, n_slots: int) -> Any:
    """Slot ``slot`` of a tuned parameter: list -> value slot mod len; range -> a point of the
    van der Corput sequence (base 2) mapped to [low, high] (log-uniform with log = true)."""
    if isinstance(spec, list):
        return spec[slot % len(spec)]
    u, f, i = 0.0, 0.5, slot + 1
    while i:
        u += f * (i & 1)
        i >>= 1
        f /= 2
    lo, hi = spec["low"], spec["high"]
    if spec["log"]:
        return float(f"{math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))):.4g}")
    return float(f"{lo + u * (hi - lo):.4g}")


def _norm_key(k: str) -> str:
    return _ALIASES.get(k, k)


def _settings(settings: dict[str, Any], task: str, fixed: dict[str, str]) -> dict[str, Any]:
    """``sweep --set`` keys made canonical for ``task`` (``steps`` -> ``train.steps``,
    ``n_pairs`` -> ``task.n_pairs``), values as given (typed where the run's config is made)."""
    from synthlab import generators
    from synthlab.core.config import resolve_key

    out: dict[str, Any] = {}
    for key, value in settings.items():
        section, name = resolve_key(str(key), tuple(generators.TASKS[task].PARAMS))
        if not section:
            flag = "--pe" if name == "pe" else "a sweep file"
            raise ValueError(f"--set {key}: {name} names the run; set it with {flag}, not --set")
        canonical = f"{section}.{name}"
        if canonical in fixed:
            raise ValueError(f"--set {key}: {canonical} is {fixed[canonical]}; change it in a sweep file")
        out[canonical] = value
    return out


def expand_cells(
    spec: Any,
    preset: str,
    pe: list[str] | None = None,
    settings: dict[str, Any] | None = None,
    seeds: list[int] | None = None,
) -> list[Cell]:
    """Every cell of the grid, in a fixed order (task, pe, other axes, seed, tuned slot).
    ``spec``: a :class:`synthlab.plan.sweepfile.SweepSpec`. ``settings``:
    ``sweep --set`` (key -> value) on top of the preset's tables in every cell; a key that is
    an axis, tuned, or names the run (pe, positions) is refused (ValueError). ``seeds``
    (``sweep --seeds``, checked by :func:`synthlab.plan.seeds.parse_seeds`) replaces the seed axis."""
    if preset not in spec.presets:
        raise ValueError(f"--preset {preset!r} is not allowed (allowed: {', '.join(spec.presets)})")
    p = spec.presets[preset]
    axes = spec.preset_axes(preset)
    if pe is not None:
        if not pe or any(not x.strip() for x in pe):
            raise ValueError(f"--pe expects a comma-separated list of encodings, got {','.join(pe)!r}")
        axes["pe"] = [x.strip() for x in pe]
    if seeds is not None:
        axes["seed"] = list(seeds)
    tune = spec.preset_tune(preset)
    n_slots = tune.get("trials_per_cell", 1)
    tuned = {k: v for k, v in tune.items() if k != "trials_per_cell"}
    other = [k for k in axes if k not in _SPECIAL_AXES]
    fixed = {_norm_key(a): f"an axis of this sweep ({', '.join(map(str, axes[a]))})" for a in other}
    fixed.update({_norm_key(a): f"tuned by this preset ({a})" for a in tuned})
    shown = ", ".join(map(str, axes["seed"][:10])) + (", ..." if len(axes["seed"]) > 10 else "")
    fixed["train.seed"] = f"the seed axis ({shown}); give the seeds with --seeds"
    cells: list[Cell] = []
    for task in axes["task"]:
        extra = _settings(settings or {}, task, fixed)
        for enc in axes["pe"]:
            dape_ks = axes.get("dape_k", [None]) if parse_pe(enc).has("dape") else [None]
            chunks = axes.get("pose_chunks", [None])
            positions_axis = axes.get("positions", [p["positions"]])
            for k, nch, pos, values in itertools.product(
                dape_ks, chunks, positions_axis, itertools.product(*(axes[a] for a in other))
            ):
                _check_axes(enc, k, pos, nch)
                for seed in axes["seed"]:
                    for slot in range(n_slots):
                        ov = {**{_norm_key(a): v for a, v in p["overrides"].items()}, **extra}
                        named: dict[str, Any] = {"task": task, "pe": enc}
                        if k is not None:
                            named["dape_k"] = k
                        if nch is not None:
                            named["pose_chunks"] = nch
                        if "positions" in axes:
                            named["positions"] = pos
                        for a, v in zip(other, values):
                            ov[_norm_key(a)] = v
                            named[a] = v
                        for a, s in tuned.items():
                            v = _tuned_value(s, slot, n_slots)
                            ov[_norm_key(a)] = v
                            named[a] = v
                        named["seed"] = seed
                        if n_slots > 1:
                            named["slot"] = slot
                        cells.append(
                            Cell(
                                task=task,
                                encoding=enc,
                                seed=int(seed),
                                overrides=dict(sorted(ov.items())),
                                scheme=pos,
                                rope_scaling=p["rope_scaling"],
                                slot=slot,
                                axes=named,
                                dape_k=k,
                                pose_chunks=nch,
                            )
                        )
    keys = [c.key for c in cells]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{spec.path}: two grid cells are identical (a repeated axis value?)")
    return cells


def _check_axes(pe: str, dape_k: int | None, positions: str | None, pose_chunks: int | None) -> None:
    """ValueError where an axis cannot set its parameter: an encoding that fixes another DAPE
    kernel, a positions scheme other than PoSE."""
    if dape_k is not None:
        parse_pe(pe, dape_k=dape_k)
    if pose_chunks is not None:
        from synthlab.model import parse_positions  # torch: paid only by a sweep with this axis

        parse_positions(positions, pose_chunks=pose_chunks)


def split_pe_list(text: str) -> list[str]:
    """``--pe`` text -> encodings. Commas separate encodings and also a spec's parameters
    (``cope:npos=16,sep_keys=1``): a piece with ``=`` but no ``:`` continues the spec before it,
    since an encoding's name never holds ``=`` (its parameters follow a ``:``)."""
    out: list[str] = []
    for piece in (x.strip() for x in text.split(",")):
        if out and "=" in piece and ":" not in piece:
            out[-1] = f"{out[-1]},{piece}"
        else:
            out.append(piece)
    return out
