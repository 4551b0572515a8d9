"""The lesson notebooks (notebooks/*.ipynb) and the checkpoints they start from.

Fast checks: every lesson is saved with its outputs (pictures included, no error), uses the
public API only, has learning objectives, prerequisites, a time, a first cell that installs what
a fresh kernel lacks, and a solution under every exercise; nothing meant for the tests shows: the
cells the tests read are tagged ``check`` and collapsed, the solutions tagged ``solution`` and
collapsed. Every shipped checkpoint loads and is listed by make_checkpoints.py.
Slow checks (`slow`): each lesson runs top to bottom in a real Jupyter kernel (nbclient), draws
its figures, and shows the effect it states and the answers its solutions give, read from the
JSON line its ``check`` cell prints. The lessons load the checkpoints and train nothing, so the
slow checks take a few minutes on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

NB_DIR = Path(__file__).resolve().parents[2] / "notebooks"
CKPT_DIR = NB_DIR / "checkpoints"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]

# lesson -> (the checkpoints it loads, how many image/png outputs it draws at least)
LESSONS = {
    "flipflop_glitches": (["flipflop-rope", "flipflop-cope"], 5),
    "encodings": (["flipflop-rope", "flipflop-cope", "flipflop-t5", "flipflop-kerple", "flipflop-fire"], 6),
    "counting_cope": (["counting-cope", "counting-relative"], 2),
    "bipe_arithmetic": (["arithmetic-bipe-rope", "arithmetic-rope"], 2),
    "dape_recall": (["mqar-nope-dape3", "mqar-nope"], 5),
    "reading_grids": ([], 4),
}

# what a code cell may name from synthlab and synthlab.generators (the public API)
PUBLIC = {
    "synthlab": {
        "train",
        "sweep",
        "grid",
        "tidy",
        "load_run",
        "build_model",
        "parse_pe",
        "plot",
        "__version__",
        "judge_claims",
        "compare_seeds",
    },
    "generators": {"get_task", "TASKS", "Sample"},
}
ALLOWED_IMPORTS = {
    "import synthlab",
    "from synthlab import generators, plot",
    "from synthlab import generators",
    "from synthlab import plot",
}


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _code(nb: dict) -> list[str]:
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _outputs(nb: dict) -> list[dict]:
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


def _tagged(nb: dict, tag: str) -> list[dict]:
    return [c for c in nb["cells"] if tag in c.get("metadata", {}).get("tags", [])]


def _collapsed(cell: dict) -> bool:
    hidden = cell.get("metadata", {}).get("jupyter", {})
    return bool(hidden.get("source_hidden") and hidden.get("outputs_hidden"))


def _facts(nb: dict) -> dict:
    """The lesson's numbers: the JSON lines its check cells printed, merged."""
    facts: dict = {}
    for cell in _tagged(nb, "check"):
        text = "".join(
            "".join(o["text"])
            for o in cell.get("outputs", [])
            if o["output_type"] == "stream" and o["name"] == "stdout"
        )
        lines = [line for line in text.splitlines() if line.startswith("{")]
        assert len(lines) == 1, f"a check cell printed {len(lines)} JSON lines, expected 1"
        facts.update(json.loads(lines[0]))
    return facts


def _make_checkpoints():
    spec = importlib.util.spec_from_file_location("make_checkpoints", NB_DIR / "make_checkpoints.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- fast: what is committed


def test_every_lesson_is_known():
    assert NOTEBOOKS, "notebooks/ has no lesson"
    assert set(IDS) == set(LESSONS), "a lesson was added or renamed: list it in LESSONS (and notebooks/README.md)"
    readme = (NB_DIR / "README.md").read_text(encoding="utf-8")
    for name in IDS:
        assert f"{name}.ipynb" in readme, f"notebooks/README.md does not list {name}.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_is_saved_with_its_outputs(path):
    """Executed top to bottom (execution counts 1, 2, ...), no error output, its figures kept."""
    nb = _nb(path)
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for c in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: not saved after one top-to-bottom run: {counts}"
    outs = _outputs(nb)
    errors = [o for o in outs if o["output_type"] == "error"]
    assert not errors, f"{path.name}: saved with an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    stderr = "".join("".join(o["text"]) for o in outs if o["output_type"] == "stream" and o["name"] == "stderr")
    assert "Traceback" not in stderr, f"{path.name}: a traceback on stderr"
    pngs = sum("image/png" in o.get("data", {}) for o in outs)
    assert pngs >= LESSONS[path.stem][1], f"{path.name}: {pngs} saved figures, expected {LESSONS[path.stem][1]}+"
    assert path.stat().st_size < 3_000_000, f"{path.name}: over 3 MB with its outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_uses_the_public_api_only(path):
    src = "\n".join(_code(_nb(path)))
    assert "synthlab._" not in src and "from synthlab." not in src, f"{path.name} imports a private module"
    for line in src.splitlines():
        s = line.strip()
        if re.match(r"(import|from)\s+(synthlab|generators)\b", s):
            assert s in ALLOWED_IMPORTS, f"{path.name}: {s!r} (allowed: {sorted(ALLOWED_IMPORTS)})"
    for module, names in PUBLIC.items():
        used = set(re.findall(rf"(?<![\w.]){module}\.(\w+)", src))
        assert used <= names, f"{path.name} uses {module}.{sorted(used - names)}, not public API"


# what a student must not see: the plumbing the tests once needed
PLUMBING = re.compile(r"RESULTS\[|SYNTHLAB_LESSON_OUT|the tests read|test_notebooks")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_shows_no_test_plumbing(path):
    nb = _nb(path)
    checks = _tagged(nb, "check")
    assert checks, f"{path.name}: no cell tagged 'check' (what the slow test reads)"
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if "check" in cell.get("metadata", {}).get("tags", []):
            assert _collapsed(cell), f"{path.name}: a check cell is not collapsed (source and output hidden)"
        else:
            assert not PLUMBING.search(src), f"{path.name}: test plumbing in a visible cell: {src[:80]!r}"
    facts = _facts(nb)  # the saved run's check line parses
    assert facts, f"{path.name}: its check cell printed nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_has_objectives_prerequisites_time_and_solved_exercises(path):
    nb = _nb(path)
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for heading in ("**Learning objectives.**", "**Prerequisites.**", "**Time.**"):
        assert heading in text, f"{path.name}: no {heading}"
    # the exercises: numbered items after the Exercises heading, each followed by a solution cell
    cells = nb["cells"]
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "Exercises" in "".join(c["source"]))
    numbered, solutions = [], 0
    for c in cells[start:]:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown":
            if src.lstrip().startswith("## ") and "Exercises" not in src:
                break  # the next section (going further)
            numbered += re.findall(r"^(\d+)\. \*\*", src, re.M)
        elif "solution" in c.get("metadata", {}).get("tags", []):
            assert _collapsed(c), f"{path.name}: a solution is not collapsed"
            solutions += 1
    assert numbered == [str(i) for i in range(1, len(numbered) + 1)] and numbered, f"{path.name}: exercises {numbered}"
    assert solutions == len(numbered), f"{path.name}: {len(numbered)} exercises, {solutions} solution cells"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_first_code_cell_installs_only_what_is_missing(path):
    first = _code(_nb(path))[0]
    assert 'find_spec("synthlab") is None' in first and "torch==2.13.0" in first
    assert "pip" in first and "[notebooks]" in first


def test_shipped_checkpoints_load_and_are_listed():
    import synthlab

    made = _make_checkpoints().CHECKPOINTS
    shipped = sorted(p.name for p in CKPT_DIR.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert shipped == sorted(made), "notebooks/checkpoints/ and make_checkpoints.CHECKPOINTS differ"
    needed = {name for ckpts, _ in LESSONS.values() for name in ckpts}
    assert needed <= set(shipped), f"lessons need {sorted(needed - set(shipped))}"
    records = {
        json.loads(line)["checkpoint"]: json.loads(line)
        for line in (CKPT_DIR / "results.jsonl").read_text().splitlines()
        if line.strip()
    }
    assert sorted(records) == shipped, "checkpoints/results.jsonl has one record per checkpoint"
    for name in shipped:
        d = CKPT_DIR / name
        assert {"config.json", "metrics.jsonl", "model.safetensors"} <= {p.name for p in d.iterdir()}, name
        assert (d / "model.safetensors").stat().st_size < 1_000_000, f"{name}: over 1 MB"
        run = synthlab.load_run(d)
        task, pe, _, _ = made[name]
        assert (run.config["task"], run.config["pe"]) == (task, pe), name
        assert records[name]["run_id"] == run.config["run_id"], f"{name}: its record is another run's"
        assert records[name]["status"] == "ok"


# ---- slow: run every lesson in a Jupyter kernel, check its effect


def _check_flipflop_glitches(r: dict) -> None:
    err = r["read_error"]
    assert err["rope"]["test"] < 0.01 and err["cope"]["test"] < 0.01, "both learned the task in distribution"
    assert err["rope"]["ood-sparse"] > 0.10, "RoPE glitches on ood-sparse"
    assert err["cope"]["ood-sparse"] < 0.01, "CoPE does not"
    assert r["error_near"]["rope"] < 0.01 and r["error_far"]["rope"] > 0.2, "RoPE's errors are the long gaps"
    assert r["far_share"]["train"] < 0.05 < 0.5 < r["far_share"]["ood-sparse"], (
        "far reads: rare in training, common OOD"
    )
    # the zoomed figure's sample: RoPE answers wrong, CoPE right
    assert r["answers"]["cope"] == r["target"] != r["answers"]["rope"]
    # on 20 glitching sequences CoPE's last layer looks at the start (the only write) far more than RoPE's
    assert r["start_attention"]["cope"] > 2 * r["start_attention"]["rope"]
    assert max(r["start_attention_heads"]["cope"]) > 0.3
    # exercise 1: dense writes keep every gap short
    assert r["ex1_longest_gap"]["ood-dense"] < 64 <= r["ex1_longest_gap"]["ood-sparse"]
    # exercise 2: the head named is the one with the most attention on the write
    assert r["ex2_best_head_share"] == max(r["start_attention_heads"]["cope"])
    # exercise 3: more reads per sequence, a larger glitch rate / read error multiple (ood-dense)
    rates = r["ex3_rates"]
    assert rates["ood-dense"]["reads per sequence"] > rates["ood-sparse"]["reads per sequence"]
    assert rates["ood-dense"]["glitch rate / read error"] > rates["ood-sparse"]["glitch rate / read error"] >= 1
    # exercise 4: RoPE answers some far read right
    assert r["ex4_gap"] >= 64 and 0 <= r["ex4_reach_wrong"] <= 1 and 0 <= r["ex4_reach_right"] <= 1


def _check_encodings(r: dict) -> None:
    assert r["alibi_decreasing"] and r["alibi_slopes"] == sorted(r["alibi_slopes"], reverse=True)
    # trained KERPLE: a nearly flat head and a steep one in each layer; it learned flip-flop and does not glitch
    for heads in r["kerple_bias_at_127"].values():
        assert max(heads) > -0.5 and min(heads) < -4
    ff = r["flipflop_read_error"]
    assert ff["kerple"]["test"] < 0.01 and ff["kerple"]["ood-sparse"] < 0.01 < 0.1 < ff["rope"]["ood-sparse"]
    assert ff["t5"]["test"] > 0.1 and ff["fire"]["test"] > 0.1, "T5 and FIRE have not learned it at this budget"
    e = r["rope_scaling_read_error"]
    assert max(e[f"128/{k}"] for k in ("none", "linear", "ntk", "yarn")) < 0.01, "no change at the training length"
    for length in (256, 512):
        assert e[f"{length}/none"] > 0.05, "plain RoPE degrades past its training length"
        assert e[f"{length}/linear"] >= e[f"{length}/none"], "linear interpolation does not help this task"
        assert e[f"{length}/yarn"] < e[f"{length}/ntk"] < e[f"{length}/none"], "NTK helps, YaRN most"
    # CoPE: a head of layer 0 sees the last write far fewer positions back than tokens on ood-sparse
    sparse = r["cope_last_write"]["ood-sparse"]
    assert min(v for k, v in sparse.items() if k.startswith("CoPE")) < sparse["token distance"] / 4
    # exercises: the flattest ALiBi head; T5's steps; 16 geometric slopes; scalings at 1024; CoPE counts writes
    assert r["ex1_flattest"] == len(r["alibi_slopes"]) - 1 and max(r["ex1_at_500"]) > -5
    assert len(r["ex2_steps"]["64"]) > len(r["ex2_steps"]["8"])
    ratios = [b / a for a, b in zip(r["ex3_slopes"], r["ex3_slopes"][1:])]
    assert len(r["ex3_slopes"]) == 16 and max(ratios) - min(ratios) < 1e-4 and ratios[0] < 1
    e = r["ex4_at_1024"]
    assert min(e["ntk"], e["yarn"]) < e["none"], "NTK or YaRN helps at 8x the training length"
    layer0 = [v for k, v in r["ex5_gates"].items() if k.startswith("layer 0")]
    assert any(g["w"] > 5 * g["i"] for g in layer0), "a layer-0 head opens on writes and shuts on ignores"


def _check_counting_cope(r: dict) -> None:
    err = r["error"]
    assert err["cope"]["test"] < 0.01 and err["cope"]["ood-long"] < 0.01, "CoPE counts, also with more noise"
    assert err["cope"]["ood-short"] < err["relative"]["ood-short"]
    # every layer-0 head opens its gates on the increments and shuts them on the passes ...
    assert min(r["gate_contrast"][0]) > 0.8
    # ... so the CoPE position of the '=' is the answer plus a constant
    assert min(r["position_answer_correlation"]) > 0.99
    # exercise 1: on ood-short the layer-0 count still follows the answer
    assert min(r["ex1_correlation"]) > 0.95
    # exercise 2: relative PE's share on the increments is a share; exercise 3: layer 1 opens on every kind
    assert 0 <= r["ex2_on_increments"] <= 1 and 0 < r["ex2_increment_share"] < 1
    assert r["ex3_layer1_min_gate"] > 0.4


def _check_bipe_arithmetic(r: dict) -> None:
    assert r["ids_reset_at_each_segment"]
    assert r["segments"] == r["equals_signs"] + 1
    # at d 32 on the reference's mix both get most tokens right, the final answer one time in three,
    # BiPE-RoPE not ahead of RoPE, both at chance beyond the training lengths
    bipe, rope = r["answer_acc_by_ops"]["bipe-rope"], r["answer_acc_by_ops"]["rope"]
    assert set(bipe) == set(rope) == {"3", "4", "5", "6"}, "test-mix holds 3 and 4 operators only"
    assert all(r["token_acc"][pe]["test"] > 0.85 for pe in ("bipe-rope", "rope"))
    assert all(0.25 < acc[n] < 0.45 for acc in (bipe, rope) for n in ("3", "4"))
    assert abs(r["answer_acc"]["bipe-rope"]["test"] - r["answer_acc"]["rope"]["test"]) < 0.05, "no BiPE gap"
    assert max(bipe["5"], rope["5"], bipe["6"], rope["6"]) < 0.3, "both at chance on longer chains"
    # exercise 1: index 0 at <bos> and right after each '='
    firsts = [r["ex1_tokens"][0]] + [t for prev, t in zip(r["ex1_tokens"], r["ex1_tokens"][1:]) if prev == "="]
    assert r["ex1_firsts"] == firsts
    assert set(r["ex2_ood"]["rope"]) == {"ood-ops-5", "ood-ops-6"}
    # exercise 3: no cost within one's own segment, a cost per segment back
    assert all(row[0] == 0 and row[1] < 0 for row in r["ex3_bias"])
    # exercise 4: a counting program's segments are its statements (a new one after each ';')
    seg, toks = r["ex4_segments"], r["ex4_tokens"]
    assert seg[-1] == toks[:-1].count(";") and all(b == a + (t == ";") for a, b, t in zip(seg, seg[1:], toks))


def _check_dape_recall(r: dict) -> None:
    acc = r["token_acc"]
    assert acc["nope+dape:k=3"]["test"] > 0.95 and acc["nope+dape:k=3"]["ood-length"] > 0.9
    assert acc["nope"]["test"] < 0.25, "NoPE stays near chance (1 / 8)"
    assert r["value_peak_share"]["nope+dape:k=3"] > 0.9 > 0.3 > r["value_peak_share"]["nope"]
    assert r["ex1_longer_share"] > 0.9, "the dots survive at 2x / 4x the length"
    assert r["ex2_peak_k1"] == r["ex2_peak_k3"] - 1, "a 1 x 1 kernel leaves the peak on the match"
    assert 0 <= r["ex3_layer1_share"] <= 1
    assert all(p == r["ex4_match"] + 1 for p in r["ex4_attention_peak"]), "attention on the value after the match"


def _check_reading_grids(r: dict) -> None:
    assert r["verdict_cope_vs_rope"].startswith("inconclusive (too few seeds to decide (1 a side; the test needs 6)")
    assert r["three_seed_p"] == 0.25
    assert r["paper_cells"] == []  # a quick grid carries no paper-scale number
    assert {"rope/ood-sparse", "cope/ood-sparse"} <= set(r["paper_values"])
    dense = {k.split("/")[0]: v for k, v in r["flipflop_grid"].items() if k.endswith("/ood-dense")}
    assert r["ex1_best"] == min(dense, key=dense.get)
    assert r["ex2_columns"] == ["64"] and r["ex3_splits"] == ["test-mix"]


CHECKS = {name: globals()[f"_check_{name}"] for name in LESSONS}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_runs_in_a_kernel_and_shows_its_effect(path):
    """The kernel inherits this process's environment (PYTHONPATH included), so it imports the
    synthlab under test."""
    nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[test]' (nbclient, nbformat, ipykernel)")
    nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[test]' (nbclient, nbformat, ipykernel)")
    pytest.importorskip("ipykernel", reason="pip install -e '.[test]' (nbclient, nbformat, ipykernel)")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}
    )
    client.execute()  # raises CellExecutionError naming the cell on any error
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outs if o.output_type == "error"]
    pngs = sum("image/png" in o.get("data", {}) for o in outs)
    assert pngs >= LESSONS[path.stem][1], f"{path.name} drew {pngs} figures"
    CHECKS[path.stem](_facts(json.loads(nbformat.writes(nb))))
