"""A synthlab plugin: the encoding row lives here, torch-free, so `synthlab encodings` lists it
without importing torch; its module (``bias.py``) is imported on the first model build."""

from synthlab.model.registry import POSITIVE, Encoding

PLUGIN_PE = Encoding(
    "plugin_pe",
    "bias",
    "b = -w |i - j|, one learned slope w shared by the heads",
    "synthlab-plugin-demo (no paper)",
    build="synthlab_plugin_demo.bias:LinearDistanceBias",
    params={"w0": 0.1},
    checks={"w0": POSITIVE},
)
