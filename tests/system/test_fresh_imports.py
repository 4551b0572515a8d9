"""What a fresh interpreter imports: listing and parsing encodings leaves torch out, and evaluation
leaves training out (a child process each: the test process has imported everything already).
Split from tests/unit/test_model.py and tests/unit/test_presets.py, the unit tier running no
subprocess."""

from __future__ import annotations

import subprocess
import sys


def test_listing_encodings_does_not_import_torch():
    code = (
        "import sys; from synthlab.model import ENCODINGS, parse_pe; parse_pe('kerple+dape:k=3'); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_evaluation_does_not_import_training():
    code = "import sys, synthlab.run.evaluation; print('synthlab.run.training' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
