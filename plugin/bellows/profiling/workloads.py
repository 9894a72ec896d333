"""A user's PyTorch model turned into one timed training iteration on synthetic data.

``bellows profile --model pkg.module:factory`` (or ``path/to/file.py:factory``) calls the
factory with the given keyword arguments to get an ``nn.Module``; each iteration then does
what training does to the device: forward on a batch of random inputs, a loss, backward,
an optimizer step. Random data costs the same as real data for dense models, and needs no
dataset on the machine that profiles. torch is imported only here and only when used.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bellows.inputs import check_int, parse_int
from bellows.jobs import SpecError

if TYPE_CHECKING:
    import torch

__all__ = [
    "MAX_CLASSES",
    "MAX_SAMPLE_VALUES",
    "MAX_SHAPE_DIMS",
    "SyntheticBatch",
    "TorchWorkload",
    "load_object",
    "parse_shape",
]


def load_object(reference: str, *, option: str = "--model") -> Any:
    """The object named ``module:attribute`` or ``file.py:attribute``."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise SpecError(option, reference, "'package.module:factory' or 'file.py:factory'")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None or not path.is_file():
                raise SpecError(option, reference, f"an existing Python file ({path} is not)")
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as error:
        raise SpecError(option, reference, f"an importable module ({error})") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise SpecError(option, reference, f"a name defined in {module_name}") from None


MAX_SHAPE_DIMS = 8
MAX_CLASSES = 1 << 24  # output classes or vocabulary size (16 Mi)
MAX_SAMPLE_VALUES = 1 << 28  # one sample of at most 256 Mi values (1 GiB of float32)


def parse_shape(text: str, *, option: str = "--input-shape") -> tuple[int, ...]:
    """``"3,224,224"`` → ``(3, 224, 224)``: the shape of one sample, without the batch.

    At most :data:`MAX_SHAPE_DIMS` dimensions of at most :data:`MAX_SAMPLE_VALUES` values in
    all (a larger sample would not fit one GPU at any batch).
    """
    valid = (
        f"at most {MAX_SHAPE_DIMS} positive integers separated by commas, e.g. 3,224,224, "
        f"with at most {MAX_SAMPLE_VALUES} values in all"
    )
    if not isinstance(text, str):
        raise SpecError(option, text, valid)
    parts = [p.strip() for p in text.replace("x", ",").split(",", MAX_SHAPE_DIMS) if p.strip()]
    if not parts or len(parts) > MAX_SHAPE_DIMS:
        raise SpecError(option, text, valid)
    try:
        shape = tuple(parse_int(option, p, minimum=1, maximum=MAX_SAMPLE_VALUES) for p in parts)
    except SpecError:
        raise SpecError(option, text, valid) from None
    if math.prod(shape) > MAX_SAMPLE_VALUES:
        raise SpecError(option, text, valid)
    return shape


@dataclass(frozen=True)
class SyntheticBatch:
    """What one sample looks like: float features of ``shape``, or token ids below ``vocab``.

    ``classes`` set: the loss is cross-entropy against random labels (the model must return
    ``[batch, classes]``); unset: the mean square of the output, whatever its shape.
    """

    shape: tuple[int, ...]
    classes: int | None = None
    vocab: int | None = None

    def __post_init__(self) -> None:
        if self.classes is not None:
            check_int("--classes", self.classes, minimum=2, maximum=MAX_CLASSES)
        if self.vocab is not None:
            check_int("--vocab", self.vocab, minimum=1, maximum=MAX_CLASSES)


@dataclass
class TorchWorkload:
    """One model, its optimizer and a device; :meth:`make_step` builds an iteration."""

    factory: Callable[..., Any]
    batch: SyntheticBatch
    device: str = "cpu"
    optimizer: str = "sgd"
    factory_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import torch  # noqa: PLC0415 (optional dependency, only for profiling)

        if self.optimizer not in ("sgd", "adam"):
            raise SpecError("--optimizer", self.optimizer, "'sgd' or 'adam'")
        try:
            self._device = torch.device(self.device)
        except RuntimeError as error:
            raise SpecError("--device", self.device, f"a torch device ({error})") from None
        model = self.factory(**self.factory_kwargs)
        if not isinstance(model, torch.nn.Module):
            raise SpecError("--model", type(model).__name__, "a factory returning nn.Module")
        self.model = model.to(self._device).train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise SpecError("--model", type(model).__name__, "a model with trainable weights")
        self.weights = sum(int(p.numel()) for p in params)
        self._optimizer: torch.optim.Optimizer = (
            torch.optim.SGD(params, lr=1e-6, momentum=0.9)
            if self.optimizer == "sgd"
            else torch.optim.Adam(params, lr=1e-6)
        )

    def _inputs(self, local_batch: int) -> torch.Tensor:
        import torch  # noqa: PLC0415

        size = (local_batch, *self.batch.shape)
        if self.batch.vocab is not None:
            return torch.randint(0, self.batch.vocab, size, device=self._device)
        return torch.randn(size, device=self._device)

    def make_step(self, local_batch: int) -> Callable[[], None]:
        """One training iteration at per-device batch ``local_batch``."""
        import torch  # noqa: PLC0415

        inputs, labels = self._inputs(local_batch), self._labels(local_batch)
        optimizer = self._optimizer

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(self._loss(inputs, labels))
            optimizer.step()

        return step

    def _labels(self, local_batch: int) -> torch.Tensor | None:
        import torch  # noqa: PLC0415

        if self.batch.classes is None:
            return None
        return torch.randint(0, self.batch.classes, (local_batch,), device=self._device)

    def _loss(self, inputs: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
        """The batch's mean loss: cross-entropy against ``labels``, else the output's mean
        square."""
        import torch  # noqa: PLC0415

        output = _first_tensor(self.model(inputs))
        if labels is None:
            return output.float().pow(2).mean()
        return torch.nn.functional.cross_entropy(output.float(), labels)

    def gradient_norm(self, local_batch: int) -> float:
        """``|g|^2`` of one mini-batch gradient at ``local_batch`` fresh synthetic samples
        (the mean loss's gradient), without an optimizer step: what
        :func:`bellows.profiling.noise.gradient_noise` estimates the noise from."""
        import torch  # noqa: PLC0415

        self._optimizer.zero_grad(set_to_none=True)
        loss = self._loss(self._inputs(local_batch), self._labels(local_batch))
        torch.autograd.backward(loss)
        total = 0.0
        for p in self.model.parameters():
            if p.grad is not None:
                total += float(p.grad.detach().float().pow(2).sum())
        self._optimizer.zero_grad(set_to_none=True)
        return total

    def synchronize(self) -> None:
        import torch  # noqa: PLC0415

        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def release(self) -> None:
        import torch  # noqa: PLC0415

        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    @staticmethod
    def is_out_of_memory(error: BaseException) -> bool:
        import torch  # noqa: PLC0415

        return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error)

    def describe(self) -> str:
        name = getattr(self.factory, "__qualname__", repr(self.factory))
        return f"{name} ({self.weights} weights) on {self._device}, optimizer {self.optimizer}"


def _first_tensor(output: Any) -> torch.Tensor:
    """The tensor to put the loss on: the output itself, or its first tensor."""
    import torch  # noqa: PLC0415

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        candidates = list(output.values())
    elif isinstance(output, tuple | list):
        candidates = list(output)
    else:
        candidates = []
    for value in candidates:
        if isinstance(value, torch.Tensor):
            return value
    raise SpecError("--model", type(output).__name__, "a model whose output holds a tensor")
