"""The model zoo: real model classes from transformers, timm and torchvision, built from small configs.

Random weights, nothing downloaded. Each entry builds a model and the keyword inputs its library's docs
call it with (`model(input_ids=..., attention_mask=..., labels=...)` for transformers, `model(x)` for
timm and torchvision), and says which output gets the backward (`"loss"` where the model computes one;
None: every differentiable output, with an all-ones cotangent, as `bw.extract` does by default).

Models are in training mode (batch norm uses batch statistics), as in a training step, with dropout
probabilities 0: the eager run computed apart from the extraction must give the same numbers (both also
start from the same seed, for what samples at random, such as a detector's proposals).
Imports of the libraries stay inside the builders: test_zoo.py runs where torchvision is not installed.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

BATCH, SEQ, VOCAB, IMAGE = 2, 8, 64, 32


@dataclass(frozen=True)
class ZooModel:
    name: str
    library: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict]
    """Keyword arguments of the model's forward; for timm and torchvision a single positional `x`."""
    output: str | None = "loss"
    positional: bool = False
    """Called as `model(*inputs.values())` (vision models), else `model(**inputs)`."""
    tied: tuple[str, ...] = field(default=())
    """Qualified names of a tied pair (first name first), where the model ties weights."""
    training: bool = True
    """False for models whose training mode draws LayerDrop's `torch.rand([]) < layerdrop` in a loop: a
    data-dependent branch there breaks the graph, and torch then runs the rest of that loop eagerly,
    outside every compiled region (the extraction's notes say which gradients that leaves out)."""

    def make(self) -> tuple[nn.Module, dict]:
        torch.manual_seed(0)
        model = self.build().train(self.training)
        torch.manual_seed(1)
        return model, self.inputs()


def _ids(vocab: int = VOCAB, seq: int = SEQ, low: int = 3) -> torch.Tensor:
    return torch.randint(low, vocab, (BATCH, seq))


def _mask(seq: int = SEQ) -> torch.Tensor:
    mask = torch.ones(BATCH, seq, dtype=torch.long)
    mask[1, -2:] = 0  # the second sequence is padded: the mask matters
    return mask


def _causal_lm() -> dict:
    ids = _ids()
    return {"input_ids": ids, "attention_mask": _mask(), "labels": ids.clone()}


def _seq2seq() -> dict:
    return {"input_ids": _ids(), "attention_mask": _mask(), "labels": _ids(seq=6)}


def _masked_lm() -> dict:
    ids = _ids()
    labels = torch.full_like(ids, -100)
    labels[:, 2:5] = ids[:, 2:5]
    return {"input_ids": ids, "attention_mask": _mask(), "labels": labels}


def _image(size: int = IMAGE) -> dict:
    return {"x": torch.randn(BATCH, 3, size, size)}


_SMALL = {"vocab_size": VOCAB, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_DECODER = {
    **_SMALL,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return GPT2LMHeadModel(config)


def llama(tied: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(**_DECODER, tie_word_embeddings=tied))


def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(**_DECODER))


def mistral():
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM(MistralConfig(**_DECODER, sliding_window=4))


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    # The experts as batched matmuls (transformers' documented `experts_implementation` switch): the default
    # grouped_mm fallback sizes its groups from the routing, a data-dependent guard no capture gets past.
    config = MixtralConfig(
        **_DECODER,
        num_local_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
        experts_implementation="batched_mm",
    )
    return MixtralForCausalLM(config)


def t5():
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        **_SMALL,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        dropout_rate=0.0,
        decoder_start_token_id=0,
    )
    return T5ForConditionalGeneration(config)


def bart():
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(
        **_SMALL,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        decoder_start_token_id=2,
    )
    return BartForConditionalGeneration(config)


_ENCODER = {
    **_SMALL,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


def roberta():
    from transformers import RobertaConfig, RobertaForMaskedLM

    return RobertaForMaskedLM(RobertaConfig(**_ENCODER))


def bert():
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(**_ENCODER, num_labels=3))


def _bert_inputs() -> dict:
    return {"input_ids": _ids(), "attention_mask": _mask(), "labels": torch.tensor([0, 2])}


def distilbert():
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    config = DistilBertConfig(
        **_SMALL, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, dropout=0.0
    )
    config.attention_dropout = 0.0
    return DistilBertForMaskedLM(config)


def albert():
    from transformers import AlbertConfig, AlbertForMaskedLM

    config = AlbertConfig(**_ENCODER, embedding_size=16, classifier_dropout_prob=0.0)
    return AlbertForMaskedLM(config)


def vit():
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        image_size=IMAGE,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=5,
    )
    return ViTForImageClassification(config)


def _vit_inputs() -> dict:
    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE), "labels": torch.tensor([1, 4])}


def whisper():
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        **_SMALL,
        num_mel_bins=16,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=16,
        max_target_positions=32,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        decoder_start_token_id=1,
    )
    return WhisperForConditionalGeneration(config)


def _whisper_inputs() -> dict:
    return {"input_features": torch.randn(BATCH, 16, 32), "labels": _ids(seq=6)}


TRANSFORMERS = [
    ZooModel("gpt2", "transformers", gpt2, _causal_lm, tied=("transformer.wte.weight", "lm_head.weight")),
    ZooModel("llama", "transformers", lambda: llama(tied=False), _causal_lm),
    ZooModel(
        "llama_tied",
        "transformers",
        lambda: llama(tied=True),
        _causal_lm,
        tied=("model.embed_tokens.weight", "lm_head.weight"),
    ),
    ZooModel("qwen2", "transformers", qwen2, _causal_lm),
    ZooModel("mistral", "transformers", mistral, _causal_lm),
    ZooModel("mixtral_moe", "transformers", mixtral, _causal_lm),
    ZooModel("t5", "transformers", t5, _seq2seq, tied=("shared.weight", "encoder.embed_tokens.weight")),
    ZooModel(
        "bart",
        "transformers",
        bart,
        _seq2seq,
        tied=("model.shared.weight", "model.encoder.embed_tokens.weight"),
        training=False,
    ),
    ZooModel(
        "roberta_mlm",
        "transformers",
        roberta,
        _masked_lm,
        tied=("roberta.embeddings.word_embeddings.weight", "lm_head.decoder.weight"),
    ),
    ZooModel("bert_classifier", "transformers", bert, _bert_inputs),
    ZooModel(
        "distilbert_mlm",
        "transformers",
        distilbert,
        _masked_lm,
        tied=("distilbert.embeddings.word_embeddings.weight", "vocab_projector.weight"),
    ),
    ZooModel(
        "albert_mlm",
        "transformers",
        albert,
        _masked_lm,
        tied=("albert.embeddings.word_embeddings.weight", "predictions.decoder.weight"),
    ),
    ZooModel("vit", "transformers", vit, _vit_inputs),
    ZooModel(
        "whisper",
        "transformers",
        whisper,
        _whisper_inputs,
        tied=("model.decoder.embed_tokens.weight", "proj_out.weight"),
        training=False,
    ),
]


def _timm(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build():
        import timm

        return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)

    return build


def _torchvision(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build():
        import torchvision

        return torchvision.models.get_model(name, weights=None, **kwargs)

    return build


def fasterrcnn():
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    return fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None,
        weights_backbone=None,
        num_classes=3,
        min_size=64,
        max_size=64,
        rpn_pre_nms_top_n_train=50,
        rpn_post_nms_top_n_train=20,
        rpn_batch_size_per_image=16,
        box_batch_size_per_image=16,
    )


def _detection() -> dict:
    """Training mode, as torchvision's detection docs call it: `model(images, targets)` gives the losses."""
    images = [torch.rand(3, 64, 64), torch.rand(3, 64, 64)]
    targets = [
        {"boxes": torch.tensor([[4.0, 4.0, 30.0, 40.0]]), "labels": torch.tensor([1])},
        {"boxes": torch.tensor([[10.0, 8.0, 50.0, 60.0], [2.0, 30.0, 20.0, 62.0]]), "labels": torch.tensor([2, 1])},
    ]
    return {"images": images, "targets": targets}


VISION = [
    ZooModel("timm_resnet", "timm", _timm("resnet10t"), _image, output=None, positional=True),
    ZooModel(
        "timm_vit_tiny",
        "timm",
        _timm("vit_tiny_patch16_224", img_size=IMAGE, patch_size=8, depth=2, drop_rate=0.0),
        _image,
        output=None,
        positional=True,
    ),
    ZooModel(
        "timm_convnext",
        "timm",
        _timm("convnext_atto", depths=(1, 1, 1, 1), dims=(16, 32, 48, 64)),
        _image,
        output=None,
        positional=True,
    ),
    ZooModel("timm_mobilenetv3", "timm", _timm("mobilenetv3_small_050"), _image, output=None, positional=True),
    ZooModel(
        "timm_efficientnet",
        "timm",
        _timm("efficientnet_b0", drop_rate=0.0, drop_path_rate=0.0),
        _image,
        output=None,
        positional=True,
    ),
    ZooModel(
        "tv_resnet18", "torchvision", _torchvision("resnet18", num_classes=10), _image, output=None, positional=True
    ),
    ZooModel(
        "tv_mobilenet_v3_small",
        "torchvision",
        _torchvision("mobilenet_v3_small", num_classes=10, dropout=0.0),
        _image,
        output=None,
        positional=True,
    ),
    ZooModel(
        "tv_lraspp_segmentation",
        "torchvision",
        _torchvision("lraspp_mobilenet_v3_large", num_classes=4, weights_backbone=None),
        lambda: _image(64),
        output=None,
        positional=True,
    ),
]

# Faster R-CNN in training mode (`model(images, targets)`, the losses summed) extracts in real mode (9
# compiled regions) and its replay gives eager's gradients, but it stays out of VISION until three product
# failures are fixed, the last of which aborts the whole test process: fake mode leaves the tensors inside
# the `images` list real ("Please convert all Tensors to FakeTensors first"); the written samples call
# torch.ops.torchvision.* without importing torchvision; and the reloaded roi_align backward sample draws
# its rois (column 0: the batch index) from mean/std, so `_roi_align_backward` writes out of bounds.
DETECTION = [ZooModel("tv_fasterrcnn_detection", "torchvision", fasterrcnn, _detection, output=None, positional=True)]

# Issue 43's second zoo: the families that broke as their libraries' docs call them (items 14-17).


class RecurrentLM(nn.Module):
    """A recurrent language model as torch's word_language_model example builds one: an embedding, two recurrent
    layers (`cell`: nn.LSTM or nn.GRU), a linear decoder; `forward(input_ids)` returns the logits."""

    def __init__(self, cell: type[nn.RNNBase]) -> None:
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, 16)
        self.rnn = cell(16, 32, num_layers=2, batch_first=True)
        self.decoder = nn.Linear(32, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        output, _ = self.rnn(self.embedding(input_ids))
        return self.decoder(output)


class RecurrentLMWithState(RecurrentLM):
    """The same model with the example's other signature, an optional state (`forward(input_ids, state=None)`):
    a defaulted argument sends it to Dynamo, which leaves RNNs out unless `torch._dynamo.config.allow_rnn`."""

    def forward(self, input_ids: torch.Tensor, state: torch.Tensor | None = None) -> torch.Tensor:
        output, _ = self.rnn(self.embedding(input_ids), state)
        return self.decoder(output)


def _tokens() -> dict:
    return {"input_ids": _ids()}


RECURRENT = [
    ZooModel(f"{cell.__name__.lower()}_lm{suffix}", "torch", functools.partial(model, cell), _tokens, output=None)
    for cell in (nn.LSTM, nn.GRU)
    for suffix, model in (("", RecurrentLM), ("_state", RecurrentLMWithState))
]


def vae():
    """diffusers' AutoencoderKL, tiny; its mid-block attention left out (`mid_block_add_attention=False`): with it,
    torch 2.13's CPU group norm refuses the non-contiguous tensor the attention hands it, in plain
    `torch.compile(backend="aot_eager")` too."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(8,),
        latent_channels=4,
        norm_num_groups=4,
        sample_size=16,
        mid_block_add_attention=False,
    )


def unet_conditional():
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        norm_num_groups=4,
        attention_head_dim=4,
    )


def unet():
    """diffusers' UNet2DModel, tiny, without its attention blocks (see `vae`: the same group norm refusal)."""
    from diffusers import UNet2DModel

    return UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
        add_attention=False,
    )


def _unet_conditional_inputs() -> dict:
    return {
        "sample": torch.randn(1, 4, 8, 8),
        "timestep": torch.tensor([10]),
        "encoder_hidden_states": torch.randn(1, 3, 16),
    }


DIFFUSERS = [
    ZooModel("diffusers_vae", "diffusers", vae, lambda: {"sample": torch.randn(1, 3, 16, 16)}, output=None),
    ZooModel("diffusers_unet_conditional", "diffusers", unet_conditional, _unet_conditional_inputs, output=None),
    ZooModel(
        "diffusers_unet", "diffusers", unet, lambda: {"sample": torch.randn(1, 3, 8, 8), "timestep": 10}, output=None
    ),
]
"""diffusers' outputs are `BaseOutput` pytree nodes registered without a keys function; called without `output=`."""


def checkpointed(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """The model with transformers' `gradient_checkpointing_enable()`, as its docs call it to save memory."""

    def checkpointed_build():
        model = build()
        model.gradient_checkpointing_enable()
        return model

    return checkpointed_build


CHECKPOINTED = [
    ZooModel("mixtral_moe_checkpointed", "transformers", checkpointed(mixtral), _causal_lm),
    ZooModel(
        "gpt2_checkpointed",
        "transformers",
        checkpointed(gpt2),
        _causal_lm,
        tied=("transformer.wte.weight", "lm_head.weight"),
    ),
    ZooModel("llama_checkpointed", "transformers", checkpointed(lambda: llama(tied=False)), _causal_lm),
]
"""Mixtral's checkpointed layers record their router logits, a side effect Dynamo will not replay in the
recomputation, so it breaks the graph there unless `skip_fwd_side_effects_in_bwd_under_checkpoint`."""


def _speech_config(config_class):
    return config_class(
        vocab_size=32,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        mask_time_prob=0.0,
    )


def wav2vec2_ctc():
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    return Wav2Vec2ForCTC(_speech_config(Wav2Vec2Config))


def wav2vec2():
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return Wav2Vec2Model(_speech_config(Wav2Vec2Config))


def hubert_ctc():
    from transformers import HubertConfig, HubertForCTC

    return HubertForCTC(_speech_config(HubertConfig))


def _speech_with_labels() -> dict:
    return {"input_values": torch.randn(BATCH, 800), "labels": torch.randint(1, 32, (BATCH, 5))}


SPEECH = [
    ZooModel("wav2vec2_ctc", "transformers", wav2vec2_ctc, _speech_with_labels),
    ZooModel("wav2vec2", "transformers", wav2vec2, lambda: {"input_values": torch.randn(BATCH, 800)}, output=None),
    ZooModel("hubert_ctc", "transformers", hubert_ctc, _speech_with_labels),
]
"""Speech models whose feature encoder sets `requires_grad` on its features in training (so that gradients reach
a frozen encoder's output): torch refuses that on a tensor computed from an input that has a gradient."""

ZOO = TRANSFORMERS + VISION
BY_NAME = {entry.name: entry for entry in ZOO + DETECTION + RECURRENT + DIFFUSERS + CHECKPOINTED + SPEECH}


def tested() -> list[ZooModel]:
    """The zoo every check runs on: each family called as its docs call it, the timm and torchvision models where
    torchvision loads beside this torch (`BWD_ZOO=all`, set by scripts/test_newest_torch.sh). Detection and the
    speech models have their own tests (tests/test_zoo.py)."""
    vision = VISION if os.environ.get("BWD_ZOO") == "all" else []
    return TRANSFORMERS + RECURRENT + DIFFUSERS + CHECKPOINTED + vision


# The checks every zoo model goes through; test_zoo.py runs them by model name.


def call_model(entry: ZooModel, model: nn.Module, inputs: dict):
    return model(*inputs.values()) if entry.positional else model(**inputs)


def extract(entry: ZooModel, model: nn.Module, inputs: dict, **options):
    """`bw.extract` called as a user calls the model: keywords for transformers, positionally for vision."""
    import bwd_widgets as bw

    if entry.output is not None:
        options["output"] = entry.output
    with seeded():
        if entry.positional:
            return bw.extract(model, *inputs.values(), name=entry.name, **options)
        return bw.extract(model, name=entry.name, **inputs, **options)


@contextlib.contextmanager
def seeded():
    """The same random numbers for the extraction and the eager run (a detector samples its proposals)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        yield


def eager_gradients(entry: ZooModel, model: nn.Module, inputs: dict) -> dict[str, torch.Tensor]:
    """Plain eager autograd on a copy of the model, apart from bw: the gradient of the chosen output
    (the loss, or every differentiable output with an all-ones cotangent), by first qualified name."""
    import torch.utils._pytree as pytree

    names = argument_names(entry, model, inputs)
    model = copy.deepcopy(model)
    # a training step's data gets no gradient from its loss (the zoo's tensors are made without requires_grad);
    # where the backward starts from other outputs, every floating input gets one (GraphNet's rule)
    data = entry.output == "loss"
    inputs = {
        k: v.detach().clone().requires_grad_(v.is_floating_point() and not data) if isinstance(v, torch.Tensor) else v
        for k, v in inputs.items()
    }
    with seeded():
        output = call_model(entry, model, inputs)
    if entry.output is not None:
        output = output[entry.output]
    differentiable = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.requires_grad]
    wrt = {n: v for n, v in zip(names, inputs.values()) if isinstance(v, torch.Tensor) and v.requires_grad}
    wrt.update((k, p) for k, p in model.named_parameters() if p.requires_grad)
    grads = torch.autograd.grad(
        differentiable, list(wrt.values()), [torch.ones_like(t) for t in differentiable], allow_unused=True
    )
    return {k: g for k, g in zip(wrt, grads) if g is not None}


def first_names(model: nn.Module) -> dict[str, str]:
    """Every qualified name of a parameter (aliases of tied ones too) -> the first one."""
    first: dict[int, str] = {}
    names = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names[name] = first.setdefault(id(parameter), name)
    return names


def replayed_gradients(extraction, model: nn.Module, arguments: dict) -> dict[str, torch.Tensor]:
    """Each partition's backward graph run on its own recorded inputs, by first qualified name
    (summed over compiled regions, as autograd sums a parameter's gradient)."""
    canonical = first_names(model)
    shapes = {k: tuple(v.shape) for k, v in arguments.items() if isinstance(v, torch.Tensor)}
    found: dict[str, torch.Tensor] = {}
    for partition in extraction.partitions:
        assert partition.backward_inputs is not None, "real mode keeps the backward's inputs"
        with torch.no_grad():
            outputs = partition.backward(*partition.backward_inputs)
        assert len(outputs) == len(partition.gradients)
        for value, gradient in zip(outputs, partition.gradients):
            if gradient.kind == "input" and shapes.get(gradient.key) != tuple(value.shape):
                continue  # a value one compiled region hands the next (a graph break), not the model's input
            key = canonical.get(gradient.key, gradient.key)
            found[key] = value if key not in found else found[key] + value
    return found


def assert_gradients_match(replayed: dict, eager: dict) -> None:
    missing, extra = sorted(eager.keys() - replayed.keys()), sorted(replayed.keys() - eager.keys())
    assert not missing and not extra, (
        f"gradients eager autograd has and the backward lacks: {missing[:5]}, extra: {extra[:5]}"
    )
    # float32 rounding is relative to the sums a gradient is made of, not to the gradient: a batch-norm
    # bias feeding another batch norm gets a near-zero gradient out of terms as large as the biggest
    # gradient in the model (thousands, for an all-ones cotangent on a 64x64 segmentation map).
    scale = max((float(g.abs().max()) for g in eager.values()), default=1.0)
    atol = 1e-5 * max(1.0, scale)
    for key, expected in eager.items():
        torch.testing.assert_close(replayed[key], expected, rtol=1e-4, atol=atol, msg=lambda m, key=key: f"{key}: {m}")


def argument_names(entry: ZooModel, model: nn.Module, inputs: dict) -> list[str]:
    """The names the inputs have as the forward's arguments."""
    if not entry.positional:
        return list(inputs)
    import inspect

    return list(inspect.signature(model.forward).parameters)[: len(inputs)]


def check_replay(entry: ZooModel, model: nn.Module, inputs: dict, extraction) -> None:
    assert extraction.mode == "real" and extraction.partitions
    assert_gradients_match(
        replayed_gradients(extraction, model, named_arguments(entry, model, inputs)),
        eager_gradients(entry, model, inputs),
    )


def check_argument_names(entry: ZooModel, model: nn.Module, inputs: dict, extraction) -> None:
    """Every tensor argument is named as the forward's argument, by name and by key."""
    sources = [s for p in extraction.partitions for s in p.inputs if s.kind == "input"]
    names = {s.name for s in sources} | {s.key for s in sources}
    expected = [a for a, v in zip(argument_names(entry, model, inputs), inputs.values()) if isinstance(v, torch.Tensor)]
    assert set(expected) <= names, f"arguments {expected} are named {sorted(names)}"
    assert all(s.name == s.key for s in sources), sources
    named = named_arguments(entry, model, inputs)
    for gradient in extraction.gradients:
        if gradient.kind == "input" and gradient.key in named:
            shape = tuple(named[gradient.key].shape)
            assert tuple(gradient.shape) == shape, f"a {tuple(gradient.shape)} value is named {gradient.key} {shape}"


def check_gradient_names(entry: ZooModel, model: nn.Module, inputs: dict, extraction) -> None:
    """One gradient per parameter, under its first qualified name in `model.named_parameters()`."""
    parameters = dict(model.named_parameters())
    keys = [g.key for g in extraction.gradients if g.kind == "parameter"]
    for partition in extraction.partitions:  # a parameter used in several compiled regions has a part in each
        own = [g.key for g in partition.gradients if g.kind == "parameter"]
        twice = sorted({k for k in own if own.count(k) > 1})
        assert not twice, f"a parameter has two gradients in compiled region {partition.index}: {twice}"
    unknown = [k for k in keys if k not in parameters or k not in extraction.autograd_gradients]
    assert not unknown, f"gradient keys not named as named_parameters() and autograd_gradients: {unknown[:5]}"
    if entry.tied:
        first, alias = entry.tied
        assert model.get_parameter(first) is model.get_parameter(alias), "the config ties these"
        assert first in keys and alias not in keys


def check_fake(entry: ZooModel, model: nn.Module, inputs: dict, extraction) -> None:
    """Fake mode: no real compute, the same backward graph (nodes, saved values, gradients) as real mode, and the
    same storages kept for backward, in the regions and between them, at the capture's budget and min-cut's 0.5
    (real mode's are held against torch.compile's own count in tests/test_torch_partition.py)."""
    fake = extract(entry, model, inputs, mode="fake")
    for real_one, fake_one in ((extraction, fake), (extraction.rerun("min_cut", 0.5), fake.rerun("min_cut", 0.5))):
        kept = [sorted(e.saved_storage_bytes) + [-1] + sorted(e.saved_outside_regions) for e in (real_one, fake_one)]
        assert kept[0] == kept[1], kept
    assert fake.mode == "fake" and fake.backward_node_count > 0
    assert fake.saved_tensors, "fake mode lists what is saved for backward"
    assert all(s.name for s in fake.saved_tensors), [s for s in fake.saved_tensors if not s.name][:3]
    assert fake.backward_node_count == extraction.backward_node_count, (fake, extraction)
    assert len(fake.saved_tensors) == len(extraction.saved_tensors), (fake, extraction)
    assert sorted(g.key for g in fake.gradients) == sorted(g.key for g in extraction.gradients)
    assert all(p.backward_inputs is None for p in fake.partitions)


def check_min_cut(entry: ZooModel, model: nn.Module, inputs: dict, extraction) -> None:
    from bwd_widgets.views.payload import graph_payload

    half = extraction.rerun(0.5)
    assert half.partitioner == "min_cut" and half.memory_budget == 0.5
    for index in range(len(half.partitions)):
        assert_one_direction(graph_payload(half, index), model)
    assert len(half.partitions) == len(extraction.partitions) and half.backward_node_count > 0
    assert_gradients_match(
        replayed_gradients(half, model, named_arguments(entry, model, inputs)), eager_gradients(entry, model, inputs)
    )


def check_graphnet(entry: ZooModel, model: nn.Module, inputs: dict, extraction, tmp_path) -> None:
    """`save_graphnet` writes forward and backward samples; each loads back and runs to the recorded shapes."""
    from _batch_util import run_written_sample

    written = extraction.save_graphnet(tmp_path, entry.name)
    assert set(written) == {"train_forward", "train_backward"}
    for split, folder in written.items():
        for partition in extraction.partitions:
            sample = folder / f"subgraph_{partition.index}" if len(extraction.partitions) > 1 else folder
            gm = partition.forward if split == "train_forward" else partition.backward
            run_written_sample(sample, gm)


def check_payload(entry: ZooModel, model: nn.Module, inputs: dict, extraction) -> None:
    """What the widget shows, built without a browser, for every compiled region."""
    import json

    from bwd_widgets.views.payload import graph_payload

    for index, partition in enumerate(extraction.partitions):
        payload = graph_payload(extraction, index)
        assert len(payload["nodes"]) == sum(1 for n in partition.backward.graph.nodes if n.op != "output")
        kinds = {n["kind"] for n in payload["nodes"]}
        assert {"saved", "tangent", "gradient"} <= kinds, kinds
        assert payload["code"]["backward"] and payload["saved"]
        assert_one_direction(payload, model)
        json.dumps(payload)


def assert_one_direction(payload, model: nn.Module) -> None:
    """In the all-collapsed view and in every first view, the edges that carry backward data flow go one
    way between any two boxes and form no cycle, so the tangent ranks first whatever the partition: a
    forward value read (saved: dashed; recomputed: dotted; neither ranks the layout) may point back,
    gradient flow does not (issue 22, item 2). The one exception torch's module stack makes: a module the
    model does not register (RoBERTa's head calls a module-level `gelu`) sits between two ops of the
    module calling it, so data does flow out of that module and back in."""
    from bwd_widgets.views.grouping import GROUP_PREFIX, visible_graph

    registered = {path for path, _ in model.named_modules()}

    def foreign(box: str) -> bool:
        return box.startswith(GROUP_PREFIX) and box[len(GROUP_PREFIX) :] not in registered

    for opened in [[], *payload["views"]["first"]]:
        shown = visible_graph(payload["nodes"], payload["edges"], set(opened))
        flow = [
            e
            for e in shown.edges
            if e not in shown.saved_only and shown.edge_kinds.get(e) not in ("saved", "recomputed")
        ]
        flow = [e for e in flow if not (foreign(e[0]) or foreign(e[1]))]
        both_ways = sorted(e for e in flow if (e[1], e[0]) in set(flow))
        assert not both_ways, f"opened {opened}: drawn both ways {both_ways[:6]}"
        assert_acyclic(flow, opened)


def assert_acyclic(edges: list[tuple[str, str]], label: object) -> None:
    into: dict[str, int] = {}
    out: dict[str, list[str]] = {}
    for a, b in edges:
        out.setdefault(a, []).append(b)
        into[b] = into.get(b, 0) + 1
        into.setdefault(a, 0)
    ready = [n for n, k in into.items() if k == 0]
    while ready:
        for b in out.get(ready.pop(), []):
            into[b] -= 1
            if into[b] == 0:
                ready.append(b)
    assert all(k == 0 for k in into.values()), f"{label}: a cycle through {sorted(n for n, k in into.items() if k)[:6]}"


def named_arguments(entry: ZooModel, model: nn.Module, inputs: dict) -> dict:
    return dict(zip(argument_names(entry, model, inputs), inputs.values()))
