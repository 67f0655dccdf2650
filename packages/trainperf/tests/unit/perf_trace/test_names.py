"""Readable names (issue 21.4): template and argument lists folded in tables, the full name in
the JSON and on hover in the HTML report."""

from __future__ import annotations

import io
import json
from html import escape
from pathlib import Path

import pytest
from rich.console import Console
from trainperf.analysis.trace import analyze_path
from trainperf.analysis.trace.short_names import short_name, short_names
from trainperf.present.report.document import Table
from trainperf.present.report.trace_section import _numbered
from trainperf.present.report.writers import _html_table
from trainperf.present.trace_tables import print_analysis, trace_markdown

# the kernel of the issue: 40 template arguments
_TBE = (
    "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<"
    + ", ".join(["c10::Half", "float", "int64_t"] * 13 + ["32"])
    + ">(const at::PackedTensorAccessor64<c10::Half, 1, at::RestrictPtrTraits>, int)"
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            _TBE,
            "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<…>(…)",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1>)",
            "at::native::vectorized_elementwise_kernel<…>(…)",
        ),
        ("aten::addmm", "aten::addmm"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        (
            "torch/nn/modules/module.py(1501): _call_impl",
            "torch/nn/modules/module.py(1501): _call_impl",
        ),
        (
            "<built-in method conv2d of type object at 0x7f>",
            "<built-in method conv2d of type object at 0x7f>",
        ),
        (
            "void at::native::(anonymous namespace)::k<float, float, 4>(int)",
            "at::native::(anonymous namespace)::k<…>(int)",
        ),
        ("f(a->b, c > d, e)", "f(…)"),
        ("broken<unbalanced, list", "broken<unbalanced, list"),
        ("Tensor<int>", "Tensor<int>"),
        (
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        ),
        (
            "cask_cudnn_infer::computeBOffsetsKernel(cask_cudnn_infer::ComputeBOffsetsParams)",
            "cask_cudnn_infer::computeBOffsetsKernel(…)",
        ),
    ],
)
def test_short_name_folds_template_and_argument_lists(name: str, short: str) -> None:
    assert short_name(name) == short


def test_names_that_would_read_alike_keep_what_tells_them_apart() -> None:
    add = "void k<4, at::native::AddFunctor<float>, Array<char*, 3> >(int, float, float)"
    mul = "void k<4, at::native::MulFunctor<float>, Array<char*, 3> >(int, float, float)"
    other = "void other_kernel<float, float, 128>(int, float)"
    shown = short_names([add, mul, other])
    assert shown[2] == "other_kernel<…>(…)"
    assert shown[0] != shown[1]
    assert "AddFunctor" in shown[0]
    assert "MulFunctor" in shown[1]
    assert len(set(short_names([add, add]))) == 1  # identical names stay identical (full)


def test_tables_fold_names_and_json_keeps_them_whole(traces_dir: Path) -> None:
    report = analyze_path(traces_dir / "gpu_ns_resolution_2024.pt.trace.json.gz", top_k=10)
    long_names = [d.name for d in report.top_cuda_ops if "<" in d.name]
    assert long_names, "the fixture's top kernels carry template lists"
    # JSON: full names
    dumped = json.dumps(report.as_dict())
    assert all(json.dumps(n)[1:-1] in dumped for n in long_names)
    # terminal: folded, so a row takes few lines at 100 columns
    out = io.StringIO()
    print_analysis(report, Console(file=out, width=100, color_system=None))
    text = out.getvalue()
    assert "<…>" in text
    assert all(n not in text for n in long_names)
    # Markdown: folded too
    assert "<…>" in trace_markdown(report)


def test_the_html_trace_table_shows_the_full_name_on_hover(traces_dir: Path) -> None:
    report = analyze_path(traces_dir / "gpu_ns_resolution_2024.pt.trace.json.gz", top_k=10)
    table = _numbered(["kernel", "calls"], report.top_cuda_ops, ("calls",), "Top CUDA kernels")
    html = _html_table(table)
    folded = [d for d in report.top_cuda_ops if short_name(d.name) != d.name]
    assert folded
    for d in folded:
        assert f'title="{escape(d.name)}"' in html
    plain = Table(["a"], [["x"]])
    assert "title=" not in _html_table(plain)
