"""Fake mode on a tied-weight 7 B-parameter language model: transformers' Llama with Llama-2-7B shapes.

Hidden 4096, intermediate 11008, 32 layers, 32 heads, vocabulary 32000, `tie_word_embeddings=True`,
built on the meta device; batch 8, sequence 512. Goal (issue 17): under 30 s and under 2 GB peak RSS.
Checks on the way: one gradient per parameter, each named as `dict(model.named_parameters())` names
it, the tied embedding listed once with `lm_head.weight` as its alias.
Run: .venv/bin/python bench/fake_tied_7b.py [--layers 32 --batch 8 --seq 512] [--bare] [--no-cache]
`--no-cache` sets `config.use_cache = False`, as training does: no key/value cache among the outputs.
`--bare` times torch alone on the same model (Dynamo and AOT Autograd with the default partitioner,
the backward lowered, nothing recorded): the floor `bw.extract` is measured against.
"""

import argparse
import resource
import time

import torch

import bwd_widgets as bw

from _util import timed  # noqa: F401  (sets up the import path)


def llama_7b_config(layers: int, use_cache: bool = True):
    import transformers

    return transformers.LlamaConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        use_cache=use_cache,
    )


def bare_capture(model, tokens) -> None:
    """torch.compile(aot_autograd) on fake weights and inputs, the backward lowered eagerly."""
    from functorch.compile import default_partition, make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from bwd_widgets.core.fake import faked

    def boxed(gm, example_inputs):
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed, partition_fn=default_partition)
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True), faked(model, [tokens]) as inputs:
        torch.compile(model, backend=backend, dynamic=False)(*inputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--no-cache", action="store_true", help="config.use_cache = False, as in training")
    parser.add_argument("--bare", action="store_true", help="time torch alone (no bwd_widgets)")
    args = parser.parse_args()
    import transformers

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    started = time.perf_counter()
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(llama_7b_config(args.layers, not args.no_cache))
    built = time.perf_counter() - started
    tokens = torch.randint(0, 32000, (args.batch, args.seq))
    if args.bare:
        bare_capture(model, tokens)
        print(
            f"bare torch: {time.perf_counter() - started:.1f} s ({built:.1f} building the model), peak RSS "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB"
        )
        return
    extraction = bw.extract(model, tokens, mode="fake")
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    parameters = sum(p.numel() for p in model.parameters())
    gradients = [g for p in extraction.partitions for g in p.gradients]
    keys = [g.key for g in gradients]
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert len(keys) == len(set(keys)) and set(keys) == set(dict(model.named_parameters())), "names or count"
    tied = [(g.key, g.aliases) for g in gradients if g.aliases]
    print(f"parameters: {parameters / 1e9:.2f} B (meta device, each tied tensor once)")
    print(f"seconds: {seconds:.1f} (goal < 30; {built:.1f} of them building the model)")
    print(f"peak RSS: {peak:.2f} GB (goal < 2; {rss_before:.2f} GB after importing torch and transformers)")
    print(
        f"use_cache: {model.config.use_cache}; tangents: {len([t for p in extraction.partitions for t in p.tangents])}"
    )
    print(f"graphs: {len(extraction.partitions)}; gradients: {len(keys)}, one per parameter; tied: {tied}")
    print(f"forward nodes: {extraction.forward_node_count}, backward nodes: {extraction.backward_node_count}")
    print(
        f"saved: {len(extraction.saved_tensors)} values, activations {extraction.saved_activation_bytes / 1e9:.1f} GB, "
        f"forward inputs kept {extraction.saved_input_bytes / 1e9:.1f} GB"
    )


if __name__ == "__main__":
    main()
