from bwd_widgets.core.naming import module_path, parse_flat_name, parse_source_name, source_line


def test_flat_names_as_graphnet_keeps_them():
    assert parse_flat_name("L_self_modules_embeddings_modules_word_embeddings_parameters_weight_") == (
        "parameter",
        "embeddings.word_embeddings.weight",
    )
    assert parse_flat_name("L_self_modules_features_modules_0_modules_1_buffers_running_mean_") == (
        "buffer",
        "features.0.1.running_mean",
    )
    assert parse_flat_name("L_x_") == ("input", "x")
    assert parse_flat_name("in_0") == ("input", "in_0")


def test_dynamo_sources():
    assert parse_source_name("L['self']._modules['l1']._parameters['weight']") == ("parameter", "l1.weight")
    assert parse_source_name("L['tokens']") == ("input", "tokens")


def test_module_paths_from_nn_module_stack():
    stack = lambda path: {"key": (path, object)}  # noqa: E731
    assert module_path(stack("L['self'].features[0].conv")) == "features.0.conv"
    assert module_path(stack("L['self']._modules['l1']")) == "l1"
    assert module_path(stack("getattr(L['self'], '<img src=x onerror=alert(1)>')")) == "<img src=x onerror=alert(1)>"
    assert module_path(stack("L['self']")) is None
    # the advisor's pasted checkpoint wrapper: `block.forward = functools.partial(checkpoint, block.forward)`
    wrapped = "L['self'].blocks.0.forward.args[0].__self__.attn.qkv"
    assert module_path(stack(wrapped)) == "blocks.0.attn.qkv"
    assert module_path(stack("L['self'].blocks[1].forward.__self__")) == "blocks.1"
    assert module_path(None) is None


def test_source_line_takes_the_last_frame():
    trace = '  File "/a/model.py", line 3, in forward\n    y = f(x)\n  File "/a/model.py", line 9, in f\n    return x.relu()\n'
    assert source_line(trace) == "/a/model.py:9: return x.relu()"
    assert source_line("") is None
