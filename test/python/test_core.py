"""attnc's core without torch: the error classes and how C API messages map to them, compile's
argument checks, KernelInfo's fields, and that `import attnc` loads neither torch nor the
library."""
import ctypes
import os
import subprocess
import sys

import pytest

import attnc
from attnc._errors import error_from_code, error_from_message

_PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def test_error_classes():
    assert issubclass(attnc.AttncError, RuntimeError)
    for cls in (attnc.SpecError, attnc.ArgumentError):
        assert issubclass(cls, attnc.AttncError) and issubclass(cls, ValueError)
    assert issubclass(attnc.CompileError, attnc.AttncError)
    assert not issubclass(attnc.CompileError, ValueError)


@pytest.mark.parametrize("message, cls", [
    ("spec.yaml:3:11: error: head_dim: must be ...\nhead_dim: 100\n          ^\n", "SpecError"),
    ("<spec text>:4:12: error: mask: unknown identifier 'kk'", "SpecError"),
    ("spec 'doc_causal': error: mask: unknown identifier 'kk'", "SpecError"),
    ("ForwardArgs.q.stride_s: expected a multiple of 8 elements, got 100", "ArgumentError"),
    ("attnc_backward_args.reserved: expected 0, got 1", "ArgumentError"),
    ("unknown target 'sm_12'; known targets: sm_80 sm_90a", "ArgumentError"),
    ("NVRTC not found (set ATTNC_NVRTC_PATH or CUDA_HOME): ...", "CompileError"),
    ("no target given and no CUDA device to take it from: CUDA driver not found", "CompileError"),
])
def test_messages_map_to_their_class_and_keep_their_text(message, cls):
    error = error_from_message(message)
    assert type(error).__name__ == cls
    assert str(error) == message


@pytest.mark.parametrize("code, message, cls", [
    (2, "spec.yaml: error: cannot read spec file: No such file or directory", "SpecError"),
    (3, "attnc_compile_text: yaml is null", "ArgumentError"),
    (5, "spec 'x': error: looks like a spec message", "CompileError"),
    (1, "ForwardArgs.q.stride_s: expected a multiple of 8 elements, got 100", "ArgumentError"),
])
def test_codes_map_to_their_class_before_messages(code, message, cls):
    error = error_from_code(code, message)
    assert type(error).__name__ == cls
    assert str(error) == message


def test_unknown_target_is_an_argument_error():
    with pytest.raises(attnc.ArgumentError, match="unknown target 'sm_12'"):
        attnc.compile(attnc.Spec(64, heads=4), target="sm_12")


def _driver_loads():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_driver_loads(), reason="a CUDA driver is present: target None would work")
def test_no_gpu_is_a_compile_error():
    with pytest.raises(attnc.CompileError, match="no CUDA device"):
        attnc.compile(attnc.Spec(64, heads=4))


@pytest.mark.parametrize("kwargs, argument", [
    (dict(spec="name: x"), "spec"), (dict(target=90), "target"), (dict(timeout=-1), "timeout"),
    (dict(cache_dir=3), "cache_dir")])
def test_compile_argument_errors_name_the_argument(kwargs, argument):
    kwargs.setdefault("spec", attnc.Spec(64, heads=4))
    with pytest.raises(attnc.ArgumentError, match=f"^{argument}: expected"):
        attnc.compile(**kwargs)


def test_kernel_info_reports_the_spec():
    spec = attnc.Spec(64, heads=(8, 2), head_dim_v=32, dtype="fp16", scale=0.25,
                      mask={"document": "doc"}, score={"alibi": "slopes"},
                      dropout={"p": 0.125, "rounds": 9},
                      inputs={"doc": {"dtype": "i32", "dims": ["pos"]},
                              "slopes": {"dtype": "f32", "dims": ["h"]}},
                      name="info_check")
    kernel = attnc.compile(spec, target="sm_80", backward=True)
    info = kernel.info
    assert isinstance(info, attnc.KernelInfo)
    assert (info.name, info.target, info.dtype) == ("info_check", "sm_80", "fp16")
    assert info.entry.startswith("info_check")
    assert (info.head_dim, info.head_dim_v, info.heads_q, info.heads_kv) == (64, 32, 8, 2)
    assert info.input_names == ("doc", "slopes")
    assert info.scale == 0.25 and info.dropout == 0.125 and info.dropout_rounds == 9
    assert info.has_backward is True
    assert info.threads > 0 and info.smem_bytes > 0
    assert kernel.spec is spec
    assert kernel.backward_workspace_bytes(2, 128) > 0


def test_forward_only_kernel_reports_no_backward():
    kernel = attnc.compile(attnc.Spec(64, heads=2, name="fwd_only"), target="sm_80",
                           use_cache=False)
    assert kernel.info.has_backward is False and kernel.info.dropout_rounds == 0
    assert kernel.backward_workspace_bytes(2, 128) == 0


def test_import_needs_no_torch_and_loads_no_library():
    code = ("import sys, attnc; print('torch' in sys.modules, "
            "any(k.startswith('attnc.torch_ops') for k in sys.modules), attnc.__version__)")
    env = dict(os.environ, PYTHONPATH=_PYTHON_DIR, ATTNC_LIB="/nonexistent/libattnc.so")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", attnc.__version__]
