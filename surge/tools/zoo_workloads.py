"""The model zoo, ``python -m surge bench --suite models``: models nobody here wrote.

Image classifiers from timm and torchvision, and transformers models (decoders,
encoders, encoder-decoders, speech, vision, text towers), each built from its library's
own config with random weights: nothing is downloaded. Every model is two workloads,
``<library>.<model>.infer`` (under no_grad, bfloat16 on CUDA) and ``<library>.<model>.train``
(forward, loss and backward, under bfloat16 autocast on CUDA); on the CPU both run in
float32 at small sizes. A library that is not importable here (or torchvision's CPU
stand-in, which has no models) makes the workload raise ``Unavailable`` with the
reason, which the bench shows in the row.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .workloads import Instance, Unavailable, pick, workload


# ---------------------------------------------------------------- shared pieces

def import_library(name: str):
    """The library, or Unavailable saying it is missing; transformers and timm never reach the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        return importlib.import_module(name)
    except Exception as e:  # a missing library or one that cannot load against this torch
        raise Unavailable(f"{name} is not importable here ({type(e).__name__}: {str(e)[:120]})") from None


def without_randomness(model: nn.Module) -> nn.Module:
    """Dropout, stochastic depth and drop-path off, so that a training step is comparable with eager."""
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
        if isinstance(getattr(m, "drop_prob", None), float):  # timm's DropPath
            m.drop_prob = 0.0
    return model


def config_without_dropout(config):
    """A transformers config with every dropout and layer-drop probability at 0."""
    for key, value in vars(config).items():
        if "drop" in key and isinstance(value, float):
            setattr(config, key, 0.0)
    return config


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of a model: token ids below ``vocab`` (``vocab`` set) or a float tensor."""

    shape: tuple
    vocab: int | None = None


def input_maker(device: str, float_dtype: torch.dtype, specs: list[InputSpec]):
    def make_inputs(seed: int):
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(
            torch.randint(0, s.vocab, s.shape, generator=gen, device=device) if s.vocab is not None
            else torch.randn(s.shape, generator=gen, device=device, dtype=float_dtype)
            for s in specs
        )
    return make_inputs


def mean_square(out, inputs):
    return out.float().square().mean()


def zoo_instance(model: nn.Module, specs: list[InputSpec], device: str, training: bool, sizes: dict,
                 loss_fn: Callable = mean_square) -> Instance:
    """The model on ``device`` as an inference or a training workload.

    On CUDA inference runs in bfloat16 (weights and float inputs); training keeps float32
    weights and runs forward and loss under bfloat16 autocast. On the CPU both are float32."""
    cuda = device.startswith("cuda")
    weights = torch.bfloat16 if cuda and not training else torch.float32
    model = without_randomness(model).to(device=device, dtype=weights).train(training)
    return Instance(
        model, input_maker(device, weights, specs), sizes=sizes,
        dtype=torch.bfloat16 if cuda else torch.float32, training=training,
        loss_fn=loss_fn if training else None, autocast=torch.bfloat16 if cuda and training else None,
    )


# (library, model, description, build(device, scale, training)) of every model, in suite order.
MODELS: list[tuple[str, str, str, Callable[[str, str, bool], Instance]]] = []


def register_model(library: str, model: str, description: str, build: Callable[[str, str, bool], Instance]):
    MODELS.append((library, model, description, build))


def suite_order(models: list) -> list:
    """The libraries' models taken in turn (timm, torchvision, transformers, timm, ...): a run
    stopped by its time limit has measured some of each."""
    by_library: dict[str, list] = {}
    for m in models:
        by_library.setdefault(m[0], []).append(m)
    queues = list(by_library.values())
    return [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]


def register_workloads() -> None:
    """``<library>.<model>.infer`` for every model, then ``.train`` for every model: a run
    stopped by its time limit has measured inference first."""
    for mode, training in (("infer", False), ("train", True)):
        what = "inference" if not training else "one training step"
        for library, model, description, build in suite_order(MODELS):
            workload(f"{library}.{model}.{mode}", f"{description}, {what}", suite="models")(
                lambda device, scale, training=training, build=build: build(device, scale, training))


# ---------------------------------------------------------------- vision: timm and torchvision

def image_sizes(device: str, scale: str, training: bool) -> tuple[int, int]:
    """(batch, image side): ImageNet's 224 on CUDA; small images on the CPU."""
    return pick(device, scale, gpu=(32 if not training else 16, 224), cpu=(2, 96), quick=(2, 64), tiny=(1, 32))


def vision_instance(model: nn.Module, device: str, scale: str, training: bool, side: int) -> Instance:
    batch, _ = image_sizes(device, scale, training)
    return zoo_instance(model, [InputSpec((batch, 3, side, side))], device, training,
                        {"batch": batch, "image": side})


# timm models: (name in timm, what it is, extra create_model arguments at a small image side
# for models whose layout is fixed by the image size).
TIMM_MODELS = (
    ("resnet18", "ResNet-18", False),
    ("resnet50", "ResNet-50", False),
    ("resnext50_32x4d", "ResNeXt-50 32x4d", False),
    ("regnety_008", "RegNetY-800MF", False),
    ("efficientnet_b0", "EfficientNet-B0", False),
    ("mobilenetv3_large_100", "MobileNetV3-Large", False),
    ("convnext_tiny", "ConvNeXt-T", False),
    ("densenet121", "DenseNet-121", False),
    ("ghostnet_100", "GhostNet", False),
    ("vit_base_patch16_224", "ViT-B/16", True),
    ("deit_small_patch16_224", "DeiT-S", True),
    ("swin_tiny_patch4_window7_224", "Swin-T", True),
    ("mixer_b16_224", "MLP-Mixer-B/16", True),
    ("levit_128s", "LeViT-128S", True),
)


def timm_model(name: str, sized_by_image: bool, side: int) -> nn.Module:
    timm = import_library("timm")
    kwargs = {}
    if sized_by_image and side != 224:
        kwargs["img_size"] = side
        if name.startswith("swin"):
            kwargs["window_size"] = side // 32  # the last stage's grid: windows must tile every stage
    return timm.create_model(name, pretrained=False, drop_rate=0.0, **kwargs)


def _register_timm(name, title, sized_by_image):
    def build(device, scale, training):
        _, side = image_sizes(device, scale, training)
        torch.manual_seed(0)
        return vision_instance(timm_model(name, sized_by_image, side), device, scale, training, side)
    register_model("timm", name, f"timm {title}, random weights", build)


for _name, _title, _sized in TIMM_MODELS:
    _register_timm(_name, _title, _sized)


TORCHVISION_MODELS = (
    ("resnet18", "ResNet-18"),
    ("resnet50", "ResNet-50"),
    ("mobilenet_v3_large", "MobileNetV3-Large"),
    ("efficientnet_b0", "EfficientNet-B0"),
    ("regnet_y_800mf", "RegNetY-800MF"),
    ("convnext_tiny", "ConvNeXt-T"),
    ("vit_b_16", "ViT-B/16"),
    ("swin_t", "Swin-T"),
)


def torchvision_model(name: str, side: int) -> nn.Module:
    torchvision = import_library("torchvision")
    if str(getattr(torchvision, "__version__", "")).endswith("+stub"):
        raise Unavailable("torchvision here is the CPU stand-in for timm, without models")
    kwargs = {"image_size": side} if name.startswith("vit") else {}
    return torchvision.models.get_model(name, weights=None, **kwargs)


def _register_torchvision(name, title):
    def build(device, scale, training):
        _, side = image_sizes(device, scale, training)
        torch.manual_seed(0)
        return vision_instance(torchvision_model(name, side), device, scale, training, side)
    register_model("tv", name, f"torchvision {title}, random weights", build)


for _name, _title in TORCHVISION_MODELS:
    _register_torchvision(_name, _title)


# ---------------------------------------------------------------- transformers

@dataclasses.dataclass(frozen=True)
class TextSizes:
    batch: int
    seq: int
    layers: int
    width: int
    heads: int
    vocab: int

    @property
    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def text_sizes(device: str, scale: str) -> TextSizes:
    # The families' own widths on CUDA with 4 layers (compile time grows with depth, speed
    # per layer does not); two narrow layers on the CPU.
    return TextSizes(*pick(device, scale, gpu=(8, 512, 4, 768, 12, 32000), cpu=(2, 64, 2, 128, 4, 2048),
                           quick=(2, 16, 2, 64, 4, 512), tiny=(1, 8, 1, 32, 2, 128)))


class Output(nn.Module):
    """Calls a transformers model with its inputs by name and returns one tensor of its output."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...], output: str, **fixed):
        super().__init__()
        self.model, self.input_names, self.output, self.fixed = model, input_names, output, fixed

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.input_names, inputs)), **self.fixed)
        return getattr(out, self.output)


def token_loss(logits, inputs):
    """Cross-entropy of the logits against the last token-id input (the labels a model reconstructs)."""
    labels = [t for t in inputs if not t.is_floating_point()][-1]
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten())


def next_token_loss(logits, inputs):
    (tokens,) = inputs
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


def hf_causal_lm(config_class: str, model_class: str, **extra):
    """A decoder-only language model; ``extra`` maps config fields to functions of the sizes."""
    def make(tf, s: TextSizes):
        config = getattr(tf, config_class)(
            vocab_size=s.vocab, hidden_size=s.width, intermediate_size=(s.width * 8 // 3 + 63) // 64 * 64,
            num_hidden_layers=s.layers, num_attention_heads=s.heads, max_position_embeddings=max(s.seq, 64),
            **{k: f(s) for k, f in extra.items()})
        model = getattr(tf, model_class)(config_without_dropout(config))
        return Output(model, ("input_ids",), "logits", use_cache=False), [InputSpec((s.batch, s.seq), s.vocab)], \
            next_token_loss
    return make


def hf_gpt2(tf, s: TextSizes):
    config = tf.GPT2Config(vocab_size=s.vocab, n_positions=max(s.seq, 64), n_embd=s.width, n_layer=s.layers,
                           n_head=s.heads, bos_token_id=0, eos_token_id=0)
    model = tf.GPT2LMHeadModel(config_without_dropout(config))
    return Output(model, ("input_ids",), "logits", use_cache=False), [InputSpec((s.batch, s.seq), s.vocab)], \
        next_token_loss


def hf_masked_lm(config_class: str, model_class: str, **config_names):
    """An encoder with a masked-LM head; ``config_names`` renames BERT's config fields."""
    def make(tf, s: TextSizes):
        fields = {"vocab_size": s.vocab, "hidden_size": s.width, "num_hidden_layers": s.layers,
                  "num_attention_heads": s.heads, "intermediate_size": 4 * s.width,
                  "max_position_embeddings": s.seq + 2}  # RoBERTa's positions start after its padding id
        config = getattr(tf, config_class)(**{config_names.get(k, k): v for k, v in fields.items()})
        model = getattr(tf, model_class)(config_without_dropout(config))
        return Output(model, ("input_ids",), "logits"), [InputSpec((s.batch, s.seq), s.vocab)], token_loss
    return make


def hf_t5(tf, s: TextSizes):
    config = tf.T5Config(vocab_size=s.vocab, d_model=s.width, d_kv=s.width // s.heads, d_ff=4 * s.width,
                         num_layers=s.layers, num_heads=s.heads, decoder_start_token_id=0)
    model = tf.T5ForConditionalGeneration(config_without_dropout(config))
    specs = [InputSpec((s.batch, s.seq), s.vocab), InputSpec((s.batch, s.seq), s.vocab)]
    return Output(model, ("input_ids", "decoder_input_ids"), "logits", use_cache=False), specs, token_loss


def hf_bart(tf, s: TextSizes):
    config = tf.BartConfig(vocab_size=s.vocab, d_model=s.width, encoder_layers=s.layers, decoder_layers=s.layers,
                           encoder_attention_heads=s.heads, decoder_attention_heads=s.heads,
                           encoder_ffn_dim=4 * s.width, decoder_ffn_dim=4 * s.width, max_position_embeddings=s.seq)
    model = tf.BartForConditionalGeneration(config_without_dropout(config))
    specs = [InputSpec((s.batch, s.seq), s.vocab), InputSpec((s.batch, s.seq), s.vocab)]
    return Output(model, ("input_ids", "decoder_input_ids"), "logits", use_cache=False), specs, token_loss


def hf_whisper(tf, s: TextSizes):
    mels, frames = 80, 2 * s.seq  # the encoder's two convolutions halve the frames to max_source_positions
    config = tf.WhisperConfig(vocab_size=s.vocab, num_mel_bins=mels, d_model=s.width, encoder_layers=s.layers,
                              decoder_layers=s.layers, encoder_attention_heads=s.heads,
                              decoder_attention_heads=s.heads, encoder_ffn_dim=4 * s.width,
                              decoder_ffn_dim=4 * s.width, max_source_positions=s.seq,
                              max_target_positions=s.seq, decoder_start_token_id=0, pad_token_id=0,
                              bos_token_id=0, eos_token_id=0)
    model = tf.WhisperForConditionalGeneration(config_without_dropout(config))
    specs = [InputSpec((s.batch, mels, frames)), InputSpec((s.batch, s.seq), s.vocab)]
    return Output(model, ("input_features", "decoder_input_ids"), "logits", use_cache=False), specs, token_loss


def hf_vit(tf, s: TextSizes):
    image, patch = (224, 16) if s.width >= 768 else (32, 8)
    config = tf.ViTConfig(hidden_size=s.width, num_hidden_layers=s.layers, num_attention_heads=s.heads,
                          intermediate_size=4 * s.width, image_size=image, patch_size=patch, num_labels=10)
    model = tf.ViTForImageClassification(config_without_dropout(config))
    return Output(model, ("pixel_values",), "logits"), [InputSpec((s.batch, 3, image, image))], mean_square


def hf_clip_text(tf, s: TextSizes):
    config = tf.CLIPTextConfig(vocab_size=s.vocab, hidden_size=s.width, intermediate_size=4 * s.width,
                               num_hidden_layers=s.layers, num_attention_heads=s.heads,
                               max_position_embeddings=s.seq, bos_token_id=0, eos_token_id=2)
    model = tf.CLIPTextModel(config_without_dropout(config))
    return Output(model, ("input_ids",), "last_hidden_state"), [InputSpec((s.batch, s.seq), s.vocab)], mean_square


TRANSFORMERS_MODELS = (
    ("gpt2", "GPT-2", hf_gpt2),
    ("llama", "Llama", hf_causal_lm("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=lambda s: s.heads)),
    ("mistral", "Mistral (grouped-query attention)",
     hf_causal_lm("MistralConfig", "MistralForCausalLM", num_key_value_heads=lambda s: max(1, s.heads // 2),
                  sliding_window=lambda s: None)),
    ("qwen2", "Qwen2 (grouped-query attention, biased projections)",
     hf_causal_lm("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=lambda s: max(1, s.heads // 2))),
    ("bert", "BERT masked LM", hf_masked_lm("BertConfig", "BertForMaskedLM")),
    ("roberta", "RoBERTa masked LM", hf_masked_lm("RobertaConfig", "RobertaForMaskedLM")),
    ("distilbert", "DistilBERT masked LM", hf_masked_lm(
        "DistilBertConfig", "DistilBertForMaskedLM", hidden_size="dim", num_hidden_layers="n_layers",
        num_attention_heads="n_heads", intermediate_size="hidden_dim")),
    ("t5", "T5 encoder-decoder", hf_t5),
    ("bart", "BART encoder-decoder", hf_bart),
    ("whisper", "Whisper speech encoder-decoder", hf_whisper),
    ("vit", "ViT image classifier", hf_vit),
    ("clip_text", "CLIP text tower", hf_clip_text),
)


def _register_transformers(name, title, make):
    def build(device, scale, training):
        tf = import_library("transformers")
        sizes = text_sizes(device, scale)
        torch.manual_seed(0)
        model, specs, loss_fn = make(tf, sizes)
        return zoo_instance(model, specs, device, training, sizes.as_dict, loss_fn)
    register_model("hf", name, f"transformers {title} from a config, random weights", build)


for _name, _title, _make in TRANSFORMERS_MODELS:
    _register_transformers(_name, _title, _make)

register_workloads()
