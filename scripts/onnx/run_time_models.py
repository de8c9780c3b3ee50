#!/usr/bin/env python3
"""Writes the run-time-shape suite: small models in which a node needs a value that is computed from the inputs
(a `NonZero` or `Compress` of a product's result, `NonMaxSuppression` after a classifier's softmax, a `TopK` whose K
is counted from the data, a `Loop` whose trip count is, `Unique` of an `ArgMax`, an `If` whose branches make
different shapes or whose branch not taken would fail, a `ConstantOfShape` of computed sizes, a `SplitToSequence`
of computed lengths), so that stowage compiles them in stages (`compiler/driver/src/stages.rs`). Each has seeded
inputs and onnxruntime's outputs, in the node-test layout: OUT/<name>/model.onnx and
OUT/<name>/test_data_set_0/{input_N,output_N}.pb; OUT/manifest.json lists them in the real-model suite's format.

    PY=$(scripts/onnx/env -q)
    "$PY" scripts/onnx/run_time_models.py [OUT]      # OUT defaults to target/run-time-models
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(20261205)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(name, nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def nonzero_of_product():
    """The positions and values of a product's entries above a threshold, and a static sum beside them."""
    w = RNG.standard_normal((32, 16)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Greater", ["h", "t"], ["m"]),
        helper.make_node("NonZero", ["m"], ["nz"], name="hits"),
        helper.make_node("Transpose", ["nz"], ["pos"], perm=[1, 0]),
        helper.make_node("GatherND", ["h", "pos"], ["vals"]),
        helper.make_node("ReduceSum", ["h"], ["total"], keepdims=0),
    ]
    outs = [vi("pos", I64, ["n", 2]), vi("vals", F, ["n"]), vi("total", F, [])]
    m = model("nonzero_of_product", nodes, [vi("x", F, [4, 32])], outs, [init("w", w), init("t", np.float32(0.5))])
    return m, {"x": RNG.standard_normal((4, 32)).astype(np.float32)}


def nms_after_softmax():
    """A detector's tail: class scores from a softmax, boxes kept by NonMaxSuppression, then gathered."""
    wc = RNG.standard_normal((8, 3)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["feat", "wc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("Transpose", ["probs"], ["scores"], perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "thr"], ["sel"], name="nms"),
        helper.make_node("Gather", ["sel", "two"], ["box_index"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "box_index"], ["kept"], axis=0),
        helper.make_node("ReduceMax", ["kept", "one"], ["right"], keepdims=0),
    ]
    inits = [init("wc", wc), init("k", np.array([6], np.int64)), init("iou", np.array([0.4], np.float32)),
             init("thr", np.array([0.3], np.float32)), init("two", np.array(2, np.int64)),
             init("zero", np.array([0], np.int64)), init("one", np.array([1], np.int64))]
    ins = [vi("boxes", F, [1, 40, 4]), vi("feat", F, [1, 40, 8])]
    outs = [vi("sel", I64, ["k", 3]), vi("kept", F, ["k", 4]), vi("right", F, ["k"])]
    corner = RNG.uniform(0, 80, (1, 40, 2)).astype(np.float32)
    size = RNG.uniform(5, 30, (1, 40, 2)).astype(np.float32)
    boxes = np.concatenate([corner, corner + size], axis=-1)
    return model("nms_after_softmax", nodes, ins, outs, inits), {
        "boxes": boxes, "feat": RNG.standard_normal((1, 40, 8)).astype(np.float32)}


def topk_counted():
    """The largest values, as many as there are positive ones: K is counted from the data."""
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["pos_i"], to=I64),
        helper.make_node("ReduceSum", ["pos_i"], ["count"], keepdims=0),
        helper.make_node("Unsqueeze", ["count", "axis0"], ["k"]),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, name="top"),
        helper.make_node("Relu", ["values"], ["out"]),
    ]
    outs = [vi("out", F, [1, "k"]), vi("indices", I64, [1, "k"])]
    inits = [init("zero", np.float32(0)), init("axis0", np.array([0], np.int64))]
    m = model("topk_counted", nodes, [vi("x", F, [1, 64])], outs, inits)
    return m, {"x": RNG.standard_normal((1, 64)).astype(np.float32)}


def loop_counted():
    """A Loop whose trip count is the number of positive inputs, its state and scan outputs collected."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "half"], ["h"]),
         helper.make_node("Add", ["h", "one_f"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "body",
        [vi("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), vi("s_in", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), vi("s_out", F, [4]), vi("scan", F, [4])],
        [init("half", np.float32(0.5)), init("one_f", np.float32(1.0))],
    )
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["pos_i"], to=I64),
        helper.make_node("ReduceSum", ["pos_i"], ["m"], keepdims=0),
        helper.make_node("Loop", ["m", "", "x"], ["final", "steps"], body=body, name="loop"),
    ]
    outs = [vi("final", F, [4]), vi("steps", F, ["m", 4])]
    m = model("loop_counted", nodes, [vi("x", F, [4])], outs, [init("zero", np.float32(0))])
    return m, {"x": np.array([0.5, -1.0, 2.0, 3.0], np.float32)}


def unique_of_argmax():
    """The distinct classes an ArgMax picks, with their first rows, the inverse and counts."""
    w = RNG.standard_normal((10, 6)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["cls"], axis=1, keepdims=0),
        helper.make_node("Unique", ["cls"], ["y", "first", "inverse", "counts"], sorted=1, name="classes"),
    ]
    outs = [vi("y", I64, ["u"]), vi("first", I64, ["u"]), vi("inverse", I64, [16]), vi("counts", I64, ["u"])]
    m = model("unique_of_argmax", nodes, [vi("x", F, [16, 10])], outs, [init("w", w)])
    return m, {"x": RNG.standard_normal((16, 10)).astype(np.float32)}


def compress_then_dense():
    """The rows whose mean is positive, kept by Compress, then a dense layer over them: static work after."""
    w = RNG.standard_normal((8, 4)).astype(np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["x", "one"], ["mean"], keepdims=0),
        helper.make_node("Greater", ["mean", "zero"], ["keep"]),
        helper.make_node("Compress", ["x", "keep"], ["rows"], axis=0, name="keep_rows"),
        helper.make_node("MatMul", ["rows", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
        helper.make_node("ReduceSum", ["y", "zero_i"], ["col_sum"], keepdims=0),
    ]
    inits = [init("w", w), init("one", np.array([1], np.int64)), init("zero", np.float32(0)),
             init("zero_i", np.array([0], np.int64))]
    outs = [vi("y", F, ["n", 4]), vi("col_sum", F, [4])]
    m = model("compress_then_dense", nodes, [vi("x", F, [20, 8])], outs, inits)
    return m, {"x": RNG.standard_normal((20, 8)).astype(np.float32)}


def if_shapes_differ():
    """An If on the data whose branches make different shapes: the first two rows, or all of them doubled."""
    then = helper.make_graph(
        [helper.make_node("Slice", ["x", "s0", "s2"], ["a"])], "then", [], [vi("a", F, ["r", 3])],
        [init("s0", np.array([0], np.int64)), init("s2", np.array([2], np.int64))])
    other = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["b"])], "else", [], [vi("b", F, ["r", 3])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
        helper.make_node("Greater", ["sum", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["picked"], then_branch=then, else_branch=other, name="pick"),
        helper.make_node("Sigmoid", ["picked"], ["y"]),
    ]
    m = model("if_shapes_differ", nodes, [vi("x", F, [5, 3])], [vi("y", F, ["r", 3])],
              [init("zero", np.float32(0))])
    return m, {"x": RNG.standard_normal((5, 3)).astype(np.float32) + 0.3}


def fill_counted():
    """A tensor of ones whose shape is computed from the data (row sums, rounded up): ConstantOfShape's input."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "one"], ["sums"], keepdims=0),
        helper.make_node("Abs", ["sums"], ["size"]),
        helper.make_node("Ceil", ["size"], ["up"]),
        helper.make_node("Cast", ["up"], ["shape"], to=I64),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], name="fill",
                         value=numpy_helper.from_array(np.array([1.5], np.float32))),
        helper.make_node("Mul", ["ones", "scale"], ["y"]),
    ]
    inits = [init("one", np.array([1], np.int64)), init("scale", np.float32(2.0))]
    m = model("fill_counted", nodes, [vi("x", F, [2, 3])], [vi("y", F, ["a", "b"])], inits)
    return m, {"x": np.array([[0.5, 1.0, 1.2], [2.0, -0.5, 3.3]], np.float32)}


def if_guarded_gather():
    """An If on the data whose branch not taken would read out of range (an exporter's guard): only the branch
    taken may run."""
    then = helper.make_graph(
        [helper.make_node("Gather", ["x", "far"], ["a"], axis=0)], "then", [], [vi("a", F, [1])],
        [init("far", np.array([7], np.int64))])
    other = helper.make_graph(
        [helper.make_node("Slice", ["x", "s0", "s1"], ["b"])], "else", [], [vi("b", F, [1])],
        [init("s0", np.array([0], np.int64)), init("s1", np.array([1], np.int64))])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
        helper.make_node("Greater", ["sum", "big"], ["cond"]),
        helper.make_node("If", ["cond"], ["picked"], then_branch=then, else_branch=other, name="guard"),
        helper.make_node("Mul", ["picked", "x"], ["y"]),
    ]
    m = model("if_guarded_gather", nodes, [vi("x", F, [4])], [vi("y", F, [4])], [init("big", np.float32(100))])
    return m, {"x": np.array([1.0, 2.0, 3.0, 4.0], np.float32)}


def if_nested_guard():
    """An If on the data inside the branch of another: the inner branch not taken would read out of range, so
    only the branch taken may run at every depth (the CPU runs the inner If with its branches as subgraphs)."""
    inner_then = helper.make_graph(
        [helper.make_node("Gather", ["x", "far"], ["a"], axis=0)], "inner_then", [], [vi("a", F, [1])],
        [init("far", np.array([7], np.int64))])
    inner_else = helper.make_graph(
        [helper.make_node("Slice", ["x", "s0", "s1"], ["b"])], "inner_else", [], [vi("b", F, [1])],
        [init("s0", np.array([1], np.int64)), init("s1", np.array([2], np.int64))])
    outer_then = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["top"], keepdims=0),
         helper.make_node("Greater", ["top", "big"], ["c2"]),
         helper.make_node("If", ["c2"], ["t"], then_branch=inner_then, else_branch=inner_else, name="inner")],
        "outer_then", [], [vi("t", F, [1])])
    outer_else = helper.make_graph(
        [helper.make_node("ReduceMin", ["x"], ["low"], keepdims=1)], "outer_else", [], [vi("low", F, [1])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
        helper.make_node("Greater", ["sum", "zero"], ["c1"]),
        helper.make_node("If", ["c1"], ["picked"], then_branch=outer_then, else_branch=outer_else, name="outer"),
        helper.make_node("Mul", ["picked", "x"], ["y"]),
    ]
    inits = [init("zero", np.float32(0)), init("big", np.float32(100))]
    m = model("if_nested_guard", nodes, [vi("x", F, [4])], [vi("y", F, [4])], inits)
    return m, {"x": np.array([1.0, 2.0, 3.0, 4.0], np.float32)}


def if_in_loop():
    """A Loop of a known trip count (unrolled) whose body halves its state when the state's sum passes 10 and adds
    one otherwise: an If on the data in every iteration, nothing staged."""
    halve = helper.make_graph([helper.make_node("Mul", ["s_in", "half"], ["h"])], "halve", [], [vi("h", F, [4])])
    grow = helper.make_graph([helper.make_node("Add", ["s_in", "one_f"], ["g"])], "grow", [], [vi("g", F, [4])])
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["s_in"], ["total"], keepdims=0),
         helper.make_node("Greater", ["total", "ten"], ["big"]),
         helper.make_node("If", ["big"], ["s_out"], then_branch=halve, else_branch=grow, name="step"),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [vi("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), vi("s_in", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), vi("s_out", F, [4])],
    )
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["final"], body=body, name="steps")]
    inits = [init("trips", np.array(6, np.int64)), init("half", np.float32(0.5)), init("one_f", np.float32(1.0)),
             init("ten", np.float32(10.0))]
    m = model("if_in_loop", nodes, [vi("x", F, [4])], [vi("final", F, [4])], inits)
    return m, {"x": np.array([1.0, 2.0, 3.0, 0.5], np.float32)}


def loop_in_loop():
    """A Loop of three iterations (unrolled) whose body holds a while loop: the state doubles until its largest
    element passes a limit that grows with the outer iteration, so the inner loop's iterations come from the data
    (the CPU runs it with its body as a subgraph)."""
    inner = helper.make_graph(
        [helper.make_node("Mul", ["t_in", "two"], ["t_out"]),
         helper.make_node("ReduceMax", ["t_out"], ["top"], keepdims=0),
         helper.make_node("Less", ["top", "limit"], ["more"])],
        "inner",
        [vi("j", I64, []), helper.make_tensor_value_info("again", TensorProto.BOOL, []), vi("t_in", F, [4])],
        [helper.make_tensor_value_info("more", TensorProto.BOOL, []), vi("t_out", F, [4])],
        [init("two", np.float32(2.0))],
    )
    outer = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["i_f"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["i_f", "hundred"], ["extra"]),
         helper.make_node("Add", ["extra", "base"], ["limit"]),
         helper.make_node("Loop", ["", "go", "s_in"], ["doubled"], body=inner, name="double_until"),
         helper.make_node("Mul", ["doubled", "shrink"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "outer",
        [vi("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), vi("s_in", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), vi("s_out", F, [4])],
        [init("hundred", np.float32(100.0)), init("base", np.float32(50.0)), init("shrink", np.float32(0.25))],
    )
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["final"], body=outer, name="rounds")]
    inits = [init("trips", np.array(3, np.int64)), init("go", np.array(True))]
    m = model("loop_in_loop", nodes, [vi("x", F, [4])], [vi("final", F, [4])], inits)
    return m, {"x": np.array([0.5, -1.0, 2.0, 3.0], np.float32)}


def scan_long():
    """A Scan of 5,000 steps (more than stowage unrolls; the CPU runs it with its body as a subgraph): a running
    sum carried as its state over the rows of `x` read from the end and the columns of `z` (axis 1), scaled by
    `w`, read from around the node; each step's sum doubled, stacked along axis 1, and its product with `w`,
    stacked along axis 0 with the last step first, then negated (so that it is collected in the arena, not in
    memory handed to the caller)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["partial"]),
         helper.make_node("Add", ["partial", "col"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "two"], ["y"]),
         helper.make_node("Mul", ["s_out", "w"], ["v"])],
        "body",
        [vi("s_in", F, [3]), vi("row", F, [3]), vi("col", F, [3])],
        [vi("s_out", F, [3]), vi("y", F, [3]), vi("v", F, [3])],
        [init("two", np.float32(2.0))],
    )
    nodes = [helper.make_node("Scan", ["s0", "x", "z"], ["s", "ys", "vs_in"], body=body, num_scan_inputs=2,
                              scan_input_directions=[1, 0], scan_input_axes=[0, -1], scan_output_axes=[1, 0],
                              scan_output_directions=[0, 1], name="running"),
             helper.make_node("Neg", ["vs_in"], ["vs"])]
    outputs = [vi("s", F, [3]), vi("ys", F, [3, 5000]), vi("vs", F, [5000, 3])]
    inputs = [vi("s0", F, [3]), vi("x", F, [5000, 3]), vi("z", F, [3, 5000]), vi("w", F, [3])]
    m = model("scan_long", nodes, inputs, outputs)
    return m, {"s0": np.array([1.0, -1.0, 0.5], np.float32),
               "x": RNG.standard_normal((5000, 3)).astype(np.float32) * 0.01,
               "z": RNG.standard_normal((3, 5000)).astype(np.float32) * 0.01,
               "w": np.array([0.5, 2.0, -1.0], np.float32)}


def loop_until():
    """A while loop: the state grows until its largest element passes 100, the body computing the condition; the
    sums of each step scanned."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "k"], ["m"]),
         helper.make_node("Add", ["m", "one_f"], ["s_out"]),
         helper.make_node("ReduceMax", ["s_out"], ["top"], keepdims=0),
         helper.make_node("Less", ["top", "limit"], ["c_out"]),
         helper.make_node("ReduceSum", ["s_out"], ["total"], keepdims=0)],
        "body",
        [vi("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), vi("s_in", F, [4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), vi("s_out", F, [4]), vi("total", F, [])],
        [init("k", np.float32(1.5)), init("one_f", np.float32(1.0))],
    )
    nodes = [helper.make_node("Loop", ["", "go", "x"], ["final", "totals"], body=body, name="grow")]
    inits = [init("go", np.array(True)), init("limit", np.float32(100.0))]
    m = model("loop_until", nodes, [vi("x", F, [4])], [vi("final", F, [4]), vi("totals", F, ["n"])], inits)
    return m, {"x": np.array([0.5, -1.0, 2.0, 3.0], np.float32)}


def loop_long():
    """A Loop of 4,500 iterations (more than stowage unrolls) over a carried state, without a condition."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "decay"], ["m"]),
         helper.make_node("Add", ["m", "step"], ["s_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body",
        [vi("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), vi("s_in", F, [8])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), vi("s_out", F, [8])],
        [init("decay", np.float32(0.999))],
    )
    nodes = [helper.make_node("Loop", ["trips", "", "x"], ["final"], body=body, name="decay_loop")]
    inits = [init("trips", np.array(4500, np.int64)), init("step", np.float32(0.01))]
    m = model("loop_long", nodes, [vi("x", F, [8])], [vi("final", F, [8])], inits)
    return m, {"x": RNG.standard_normal(8).astype(np.float32)}


def loop_rows():
    """A Loop whose body slices row i of an outer tensor (the iteration number sets the slice: each iteration's
    body is its own version) and ends on a condition computed from the sum so far."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "axis0"], ["start"]),
         helper.make_node("Add", ["start", "one_i"], ["end"]),
         helper.make_node("Slice", ["rows", "start", "end", "axis0"], ["row"]),
         helper.make_node("Squeeze", ["row", "axis0"], ["flat"]),
         helper.make_node("Add", ["s_in", "flat"], ["s_out"]),
         helper.make_node("ReduceSum", ["s_out"], ["sum"], keepdims=0),
         helper.make_node("Less", ["sum", "cap"], ["c_out"])],
        "body",
        [vi("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), vi("s_in", F, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), vi("s_out", F, [3])],
        [init("axis0", np.array([0], np.int64)), init("one_i", np.array([1], np.int64))],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["rows"]),
        helper.make_node("Loop", ["trips", "go", "zeros"], ["acc"], body=body, name="rows_loop"),
    ]
    inits = [init("trips", np.array(4, np.int64)), init("go", np.array(True)), init("zeros", np.zeros(3, np.float32)),
             init("cap", np.float32(1000.0))]
    m = model("loop_rows", nodes, [vi("x", F, [5, 3])], [vi("acc", F, [3])], inits)
    return m, {"x": RNG.uniform(0, 2, (5, 3)).astype(np.float32)}


def seq_chunks():
    """Chunks of a vector as long as its positive entries are many, plus one: a sequence whose length is counted
    from the data, written out whole, counted and joined back."""
    nodes = [
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["pos_i"], to=I64),
        helper.make_node("ReduceSum", ["pos_i"], ["count"], keepdims=0),
        helper.make_node("Add", ["count", "one"], ["size"]),
        helper.make_node("SplitToSequence", ["x", "size"], ["chunks"], name="chunk", axis=0),
        helper.make_node("SequenceLength", ["chunks"], ["n"]),
        helper.make_node("ConcatFromSequence", ["chunks"], ["joined"], axis=0),
        helper.make_node("Mul", ["joined", "two"], ["y"]),
    ]
    inits = [init("zero", np.float32(0)), init("one", np.int64(1)), init("two", np.float32(2))]
    outs = [helper.make_tensor_sequence_value_info("chunks", F, None), vi("n", I64, []), vi("y", F, [12])]
    m = model("seq_chunks", nodes, [vi("x", F, [12])], outs, inits)
    return m, {"x": RNG.standard_normal(12).astype(np.float32)}


def seq_split_lengths():
    """A vector split in two, as many entries in the second item as the vector has negative ones: items whose
    lengths come from the data, each read back from the sequence."""
    nodes = [
        helper.make_node("Less", ["x", "zero"], ["neg"]),
        helper.make_node("Cast", ["neg"], ["neg_i"], to=I64),
        helper.make_node("ReduceSum", ["neg_i"], ["count"], keepdims=1),
        helper.make_node("Sub", ["ten", "count"], ["head"]),
        helper.make_node("Concat", ["head", "count"], ["lengths"], axis=0),
        helper.make_node("SplitToSequence", ["x", "lengths"], ["pieces"], name="split", axis=0),
        helper.make_node("SequenceAt", ["pieces", "zero_i"], ["first"]),
        helper.make_node("SequenceAt", ["pieces", "one_i"], ["second"]),
        helper.make_node("ReduceSum", ["first"], ["first_sum"], keepdims=0),
        helper.make_node("Relu", ["second"], ["second_relu"]),
    ]
    inits = [init("zero", np.float32(0)), init("ten", np.array([10], np.int64)),
             init("zero_i", np.int64(0)), init("one_i", np.int64(1))]
    outs = [vi("first_sum", F, []), vi("second_relu", F, ["m"])]
    m = model("seq_split_lengths", nodes, [vi("x", F, [10])], outs, inits)
    return m, {"x": RNG.standard_normal(10).astype(np.float32)}


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "run-time-models"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest = []
    for make in [nonzero_of_product, nms_after_softmax, topk_counted, loop_counted, unique_of_argmax,
                 compress_then_dense, if_shapes_differ, fill_counted, if_guarded_gather, loop_until, loop_long,
                 loop_rows, seq_chunks, seq_split_lengths, if_nested_guard, if_in_loop,
                 loop_in_loop, scan_long]:
        onx, feeds = make()
        name = onx.graph.name
        d = out / name
        (d / "test_data_set_0").mkdir(parents=True)
        (d / "model.onnx").write_bytes(onx.SerializeToString())
        session = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for k, n in enumerate(names):
            (d / "test_data_set_0" / f"input_{k}.pb").write_bytes(
                numpy_helper.from_array(feeds[n], n).SerializeToString())
        for k, value in enumerate(session.run(None, feeds)):
            oname = session.get_outputs()[k].name
            # A sequence output is written as ONNX writes one: a SequenceProto of its tensors.
            proto = (numpy_helper.from_list([np.asarray(v) for v in value], oname) if isinstance(value, list)
                     else numpy_helper.from_array(np.asarray(value), oname))
            (d / "test_data_set_0" / f"output_{k}.pb").write_bytes(proto.SerializeToString())
        ops = sorted({n.op_type for n in onx.graph.node})
        manifest.append({"name": name, "kind": "hand-built", "dataset": "", "ops": ops, "inputs": names, "ci": True})
        print(f"{name:<24} {' '.join(ops)}")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
