"""How much memory a run needs, estimated before anything is built: ``estimate_bytes`` and
``check_fits``. ``synthlab.run.training.run`` calls :func:`check_run_fits` before any data set or
batch is made (lengths from a few probed samples); ``train.check_memory=false`` skips it.

Peak = weights and optimiser + data + max(training, evaluation) + runtime, counted in float32;
on a GPU the device's part against ``torch.cuda.mem_get_info``. What each term counts:
docs/architecture.md, "The memory estimate".
"""

from __future__ import annotations

from typing import Any

F32 = 4
RUNTIME = 128 * 2**20
SAMPLE_TOKEN, SAMPLE_FIXED = 32, 2048
TOKEN_FLOATS = 24  # activations kept for the backward, per token, layer and d_model unit
CACHE_MAX = 256 * 2**20  # the model's TensorCache bound (model/cache.py)


def _gb(n: float) -> str:
    g = n / 1e9
    return f"{g:.1f} GB" if g < 1e5 else f"{g:.2g} GB"


def param_count(cfg: Any, spec: Any, vocab_size: int, max_len: int) -> int:
    """Parameters of the Transformer ``model_for`` would build (the encodings' small extras
    such as ALiBi's slopes or Kerple's two scalars a head left out)."""
    m = cfg.model
    C, Lyr, H = m.d_model, m.n_layers, m.n_heads
    d_h = max(1, C // H)
    n = vocab_size * C * (1 if m.tie_embeddings else 2) + Lyr * (12 * C * C + 13 * C) + 2 * C
    for comp, part in spec.parts:
        p = spec.params.get(comp, {})
        if part.kind == "absolute" and "learned" in str(part.build).lower():
            n += max_len * C
        elif comp.startswith("relative"):
            n += Lyr * (max_len if m.causal else 2 * max_len - 1) * d_h
        elif part.kind == "contextual":
            n += 0 if p.get("alibi") else npos_table(p, d_h, Lyr)
            n += Lyr * C * C if p.get("sep_keys") else 0
        elif part.kind == "processor":
            c_in = 2 * H if _scores_bias(spec) else H
            k, hid = int(p.get("k", 1)), int(p.get("hidden", 32))
            n += Lyr * (c_in * hid * k + hid + hid * H * k + H)
        elif comp == "t5":
            n += int(p.get("buckets", 32)) * H * (Lyr if p.get("layer_tables") else 1)
    return int(n)


def npos_table(p: dict[str, Any], d_h: int, layers: int) -> int:
    return int(p.get("npos", 64)) * d_h * (layers if p.get("layer_tables") else 1)


def _scores_bias(spec: Any) -> bool:
    return any(p.kind in ("bias", "contextual") for _, p in spec.parts)


def _learned_bias(spec: Any) -> bool:
    """A bias computed each forward with a gradient (all but ALiBi's fixed, cached one)."""
    return any(p.kind == "bias" and "ALiBi" not in str(p.build) for _, p in spec.parts)


def _native(kind: str) -> bool:
    """Whether the native CPU kernel of ``kind`` (cope / dape) loads here (built once, cached)."""
    from synthlab.model import native

    try:
        return (native.cope_kernel() if kind == "cope" else native.dape_kernel()) is not None
    except Exception:  # noqa: BLE001 - no kernel: the PyTorch path
        return False


def attention_maps(spec: Any, device: str, hidden_ratio: float, causal: bool = True) -> tuple[float, float, float]:
    """(kept for the backward a layer, live at once in training, live at once in evaluation),
    in (B, H, T, T) float32 maps. ``hidden_ratio``: DAPE's hidden width / heads; ``causal``:
    off the native kernel, encoder mode runs DAPE on the whole map (no packing)."""
    cope = any(p.kind == "contextual" for _, p in spec.parts)
    dape = spec.has("dape")
    query_bias = any(c.startswith("relative") for c in spec.components)
    cpu = device == "cpu"
    kept = fwd = ev = 0.0
    if cope:
        nat = cpu and _native("cope")
        kept, fwd, ev = (2, 4, 4) if nat else (9, 5, 8)
    elif query_bias:
        kept, fwd, ev = 1, 3, 3
    elif _learned_bias(spec):  # SDPA with a mask that needs its gradient: CPU takes the math path
        kept, fwd, ev = (1, 3, 1) if cpu else (0, 1, 0)
    if dape:
        k = int(spec.params["dape"].get("k", 1))
        c_in = 2 if _scores_bias(spec) else 1
        if cpu and _native("dape"):
            kept, fwd, ev = kept + 2, max(fwd, 3), max(ev, 3)
        elif not causal:  # forward_full: input, hidden map before and after LeakyReLU, output
            full = c_in + 2 * hidden_ratio
            kept, fwd, ev = kept + 1 + full, max(fwd, 3 + full), max(ev, 3 + full)
        else:  # packed lower triangle: input shifts, hidden map, the k shifted outputs
            packed = (k * c_in + hidden_ratio) / 2
            kept, fwd, ev = kept + 1 + packed, max(fwd, 3 + k / 2), max(ev, 3 + packed + k / 2)
    return kept, max(fwd, kept + 2 if kept else 0), ev


def estimate_bytes(
    cfg: Any,
    spec: Any,
    train_len: int,
    eval_len: int,
    *,
    vocab_size: int | None = None,
    max_len: int | None = None,
    device: str | None = None,
    n_eval_seqs: int | None = None,
    per_example_positions: bool = False,
    return_attention: bool = False,
    task: Any = None,
) -> dict[str, Any]:
    """Peak memory of one run in bytes, by part: params, optimizer (gradients + AdamW),
    activations (training), eval, data, runtime; ``device`` / ``host`` (what each must hold:
    both on CPU) and ``total``. ``train_len`` / ``eval_len``: the longest training / evaluated
    sequence (greedy: the decode width). ``n_eval_seqs``: evaluation samples over all splits
    and groups (from the task when None). Also ``detail``: one phrase on the largest part.
    ``task``: the run's task when the caller has it (else made from ``cfg``)."""
    from synthlab import generators

    if task is None:
        task = generators.get_task(cfg.task, **{k: v for k, v in cfg.task_params.items() if v is not None})
    V = vocab_size if vocab_size is not None else len(task.vocab) + 1
    if n_eval_seqs is None:
        groups = sum(len(task.eval_groups(s) or [None]) for s in task.splits if s != "train")
        n_eval_seqs = groups * cfg.train.eval_samples
    device = device or _device()
    m, tc = cfg.model, cfg.train
    C, Lyr, H = m.d_model, m.n_layers, m.n_heads
    T, Te = max(1, int(train_len)), max(1, int(eval_len))
    max_len = max_len or max(T, Te)
    P = param_count(cfg, spec, V, max_len)
    hidden = int(spec.params["dape"].get("hidden", 32)) if spec.has("dape") else 0
    kept, live, live_eval = attention_maps(spec, device, hidden / max(1, H), cfg.model.causal)
    biases = sum(1 for c, p in spec.parts if p.kind == "bias" and not c.startswith("relative"))
    B, Be = tc.batch_size, max(1, min(tc.eval_batch_size, tc.eval_samples))  # a chunk holds one group
    M, Me = B * H * T * T, Be * H * Te * Te  # one attention map, elements
    bias_map = (B if per_example_positions else 1) * H * T * T * biases
    if return_attention:
        kept, live_eval = max(kept, 1), live_eval + Lyr
    act = F32 * (Lyr * (TOKEN_FLOATS * B * T * C + kept * M + bias_map) + live * M + 3 * B * T * V)
    ev = F32 * (
        12 * Be * Te * C
        + live_eval * Me
        + (Be if per_example_positions else 1) * H * Te * Te * biases
        + 2 * Be * Te * V
    )
    data = (
        n_eval_seqs * (SAMPLE_TOKEN * Te + SAMPLE_FIXED)
        + (tc.n_train or 0) * (SAMPLE_TOKEN * T + SAMPLE_FIXED)
        + 2 * B * T * 8
    )
    cache = min(CACHE_MAX, F32 * (H + 1) * max(T, Te) ** 2 * (2 if biases else 0))
    out: dict[str, Any] = {
        "params": F32 * P,
        "optimizer": 3 * F32 * P,
        "activations": act,
        "eval": ev,
        "data": data,
        "runtime": RUNTIME + cache,
        "n_params": P,
        "device_kind": device,
    }
    on_device = out["params"] + out["optimizer"] + max(act, ev)
    if device in ("cpu", "mps"):  # one memory (Apple's GPU shares the host's)
        out["device"] = 0
        out["host"] = on_device + data + out["runtime"]
    else:
        out["device"] = on_device + cache
        out["host"] = data + RUNTIME + out["params"]  # the model is built on the host first
    out["total"] = out["device"] + out["host"]
    out["detail"] = _detail(out, cfg, B, Be, T, Te, kept, live_eval)
    return out


def _detail(est: dict[str, Any], cfg: Any, B: int, Be: int, T: int, Te: int, kept: float, live_eval: float) -> str:
    m = cfg.model
    parts = {
        "weights and AdamW": est["params"] + est["optimizer"],
        "activations": est["activations"],
        "evaluation": est["eval"],
        "data": est["data"],
    }
    name = max(parts, key=lambda k: parts[k])
    if name == "weights and AdamW":
        return (
            f"weights and AdamW {_gb(parts[name])}: {est['n_params']:.3g} parameters, "
            f"d_model {m.d_model} x {m.n_layers} layers"
        )
    if name == "activations":
        maps = f", {kept:g} attention maps of {B} x {m.n_heads} x {T}^2 a layer" if kept else ""
        layers = f"{m.n_layers} layer{'s' if m.n_layers != 1 else ''}"
        return f"activations {_gb(parts[name])}: batch {B} x length {T} x d_model {m.d_model} x {layers}{maps}"
    if name == "evaluation":
        maps = f", {live_eval:g} attention maps of {Be} x {m.n_heads} x {Te}^2" if live_eval else ""
        return f"evaluation {_gb(parts[name])}: eval batch {Be} x length {Te}{maps}"
    return f"data {_gb(parts[name])}: evaluation sets of length up to {Te} and the fixed training set"


def _hint(detail: str) -> str:
    if detail.startswith("weights"):
        return "lower d_model / n_layers"
    if detail.startswith("evaluation"):
        return "lower eval_batch_size or the evaluated lengths"
    if detail.startswith("data"):
        return "lower eval_samples / n_train or the sequence length"
    return "lower batch_size / d_model or the sequence length"


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is not None and mps.is_available() else "cpu"


def _cgroup_available() -> int | None:
    """Memory left under this process's cgroup limit (v2, then v1), or None without one."""
    for limit, usage in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit) as f:
                raw = f.read().strip()
            if raw == "max" or int(raw) >= 2**60:
                return None
            with open(usage) as f:
                return max(0, int(raw) - int(f.read().strip()))
        except (OSError, ValueError):
            continue
    return None


def host_available() -> int:
    """Bytes this machine can still give (psutil, else /proc/meminfo MemAvailable; the cgroup
    limit where lower). Unknown: a very large number (nothing is refused)."""
    avail = None
    try:
        import psutil

        avail = int(psutil.virtual_memory().available)
    except ImportError:
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        avail = int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            pass
    cg = _cgroup_available()
    if cg is not None:
        avail = cg if avail is None else min(avail, cg)
    return avail if avail is not None else 2**62


def device_available() -> int:
    import torch

    free, _ = torch.cuda.mem_get_info()
    return int(free)


def check_fits(est: dict[str, Any], host: int | None = None, device: int | None = None, what: str = "this run") -> None:
    """ValueError (one line: the estimate, its largest part, what this machine has, what to
    lower) when ``est`` (from :func:`estimate_bytes`) exceeds the memory available."""
    host = host_available() if host is None else host
    checks = [(est["host"], host, "this machine has")]
    if est["device"]:
        checks.append((est["device"], device_available() if device is None else device, "the GPU has"))
    for need, have, where in checks:
        if need > have:
            raise ValueError(
                f"{what} needs ~{_gb(need)} ({est['detail']}), {where} {_gb(have)} available; "
                f"{_hint(est['detail'])} (train.check_memory=false skips this check)"
            )


def check_run_fits(cfg: Any, spec: Any, scheme: Any, task: Any) -> None:
    """:func:`check_fits` for a resolved run, its lengths probed from a few samples a split."""
    from synthlab.run.data import probe_lengths, probe_train_length
    from synthlab.run.evaluation import decode_width

    def check(train_len: int, eval_len: int) -> None:
        eval_len = decode_width(eval_len) if task.scoring == "greedy" else eval_len
        max_len = cfg.model.max_len or max(train_len, eval_len, int(getattr(scheme, "max_position", 0) or 0))
        est = estimate_bytes(
            cfg,
            spec,
            train_len,
            eval_len,
            max_len=max_len,
            vocab_size=len(task.vocab) + 1,
            per_example_positions=bool(getattr(scheme, "per_example", False)),
            task=task,
        )
        check_fits(est, what=f"{cfg.task} {spec.name}")

    seed = cfg.train.seed
    first = probe_train_length(task, seed, 1)
    check(first, first)  # evaluated sequences are as long at least: a huge length is refused here already
    check(*probe_lengths(task, seed))
