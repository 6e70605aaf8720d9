"""``torch.onnx``: importable (pytorch/examples' word_language_model imports
it at the top), but ``export`` needs torch's tracer: it raises one clear
error saying what to do instead."""
from __future__ import annotations

from typing import Any


def export(*args: Any, **kwargs: Any) -> None:
    raise NotImplementedError("ONNX export is not available in ctransformer; save the state_dict with "
                              "ctransformer.save(model.state_dict(), path), load it into the same model in "
                              "PyTorch (torch.load reads the file) and call torch.onnx.export there")
