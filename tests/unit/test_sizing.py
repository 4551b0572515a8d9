"""synthlab.run.sizing: the parameter count, the shipped presets fit, the estimate against a measured
peak, the message of a refusal."""

import functools
import json
import textwrap

import pytest

import synthlab.model as m
from synthlab.plan.cells import expand_cells
from synthlab.plan.sweepfile import installed_sweeps, load_sweep
from synthlab.run.configs import eval_extent, make_task, max_len_of, model_for, resolve, resolve_config
from synthlab.run.data import probe_lengths
from synthlab.run.sizing import check_fits, estimate_bytes, param_count

GB = 1e9


@pytest.mark.parametrize(
    "pe",
    [
        "rope",
        "learned",
        "cope",
        "cope:layer_tables=1,sep_keys=1",
        "cope-alibi",
        "relative",
        "nope+dape:k=3",
        "kerple+dape",
        "t5",
        "fire",
        "bipe-rope",
        "bipe-alibi",
    ],
)
def test_param_count_matches_the_model(pe):
    cfg = resolve_config("flipflop", pe, "smoke", {"d_model": 64, "n_layers": 3, "n_heads": 4})
    task, spec = make_task(cfg), m.parse_pe(cfg.pe)
    real = sum(p.numel() for p in model_for(cfg, task, spec, max_len=100).parameters())
    assert param_count(cfg, spec, len(task.vocab) + 1, 100) == pytest.approx(real, rel=0.01)


@functools.lru_cache(maxsize=None)
def _task_and_lengths(task, params, seed):
    from synthlab import generators

    t = generators.get_task(task, **{k: v for k, v in params if v is not None})
    tl, el = probe_lengths(t, seed)
    return t, tl, eval_extent(t, el)


def _preset_estimates(preset, device):
    """(label, estimate) for every distinct run of every installed sweep file's preset."""
    seen = {}
    for name in installed_sweeps():
        sw = load_sweep(name)
        if preset not in sw.presets:
            continue
        for c in expand_cells(sw, preset):
            key = (
                c.task,
                c.pe,
                c.positions,
                c.rope_scaling,
                json.dumps({k: v for k, v in c.overrides.items() if k != "train.lr"}, sort_keys=True),
            )
            if key in seen:
                continue
            cfg, spec = resolve(
                c.task,
                c.pe,
                preset,
                c.overrides,
                seed=0,
                positions=c.positions,
                rope_scaling=c.rope_scaling,
                probe=False,
            )
            scheme = m.parse_positions(cfg.positions) if cfg.positions else None
            task, tl, el = _task_and_lengths(cfg.task, tuple(sorted(cfg.task_params.items())), 0)
            seen[key] = estimate_bytes(
                cfg,
                spec,
                tl,
                el,
                device=device,
                task=task,
                vocab_size=len(task.vocab) + 1,
                max_len=max_len_of(cfg, scheme, tl, el),
                per_example_positions=bool(getattr(scheme, "per_example", False)),
            )
    return seen


def test_every_quick_preset_fits_a_2_core_8_gb_cpu(tasks_built_once):
    ests = _preset_estimates("quick", "cpu")
    assert len(ests) > 100
    over = {k[:2]: round(e["host"] / GB, 2) for k, e in ests.items() if e["host"] > 8 * GB}
    assert not over
    assert max(e["host"] for e in ests.values()) < 2 * GB  # the largest measured: ~0.5 GB


# materialised (B, H, T, T) maps at evaluation: 128 sequences x 8 heads x 1500^2 is 9.2 GB a map,
# and DAPE V2's packed path holds ~(2 k + 4) / 2 + 3 of them at once (k = 7: 143 GB); che.toml's
# paper preset therefore evaluates in batches of 64 (72 GB at k = 7)
@pytest.mark.slow
def test_every_paper_preset_fits_an_80_gb_gpu(tasks_built_once):
    ests = _preset_estimates("paper", "cuda")
    over = {k[:2] for k, e in ests.items() if e["device"] > 80 * GB or e["host"] > 64 * GB}
    assert not over, sorted(over)


def test_a_refusal_is_one_line_with_the_estimate_and_the_fix():
    cfg, spec = resolve(
        "flipflop", "cope", "smoke", {"batch_size": 4096}, seed=0, positions=None, rope_scaling=None, probe=False
    )
    est = estimate_bytes(cfg, spec, 8192, 8192, device="cpu", vocab_size=6)
    assert est["activations"] > 1e12 and est["host"] == est["total"]
    with pytest.raises(ValueError) as e:
        check_fits(est, host=int(7.8e9))
    msg = str(e.value)
    assert "\n" not in msg and "7.8 GB available" in msg and "lower batch_size" in msg
    check_fits(est, host=10**16)  # fits: nothing raised


def test_gpu_runs_split_device_and_host():
    cfg, spec = resolve("flipflop", "cope", "smoke", {}, seed=0, positions=None, rope_scaling=None, probe=False)
    gpu = estimate_bytes(cfg, spec, 64, 128, device="cuda", vocab_size=6)
    cpu = estimate_bytes(cfg, spec, 64, 128, device="cpu", vocab_size=6)
    assert gpu["device"] > 0 and cpu["device"] == 0
    assert gpu["activations"] > cpu["activations"]  # the PyTorch path of CoPE keeps more maps than the kernel
    with pytest.raises(ValueError, match="the GPU has"):
        check_fits(gpu, host=10**12, device=1)


# the child process of tests/system/test_sizing_peak.py, which measures the peak this estimates
_MEASURE = textwrap.dedent("""
    import json, sys
    from synthlab.run.training import train

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    ov = json.loads(sys.argv[1])
    train("flipflop", "cope", preset="smoke", overrides={"steps": 2, "warmup": 0, "threads": 1})  # warm up
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS
    base = status("VmRSS")
    train("flipflop", "cope", preset="quick", overrides=ov)
    print(json.dumps({"growth": status("VmHWM") - base}))
""")
