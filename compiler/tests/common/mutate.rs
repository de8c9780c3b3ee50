//! Mutations that fuzzing applies to ONNX models: byte edits (the decoder's side) and edits of a decoded model that
//! keep the protobuf valid (the importer's, planner's and kernels' side). Shared by the import fuzz test here and the
//! whole-pipeline one in `tests/tests/fuzz_run.rs`.

use stowage_compiler::onnx::proto::ModelProto;

const OPS: &[&str] = &[
    "Conv",
    "MaxPool",
    "Reshape",
    "Slice",
    "Gather",
    "Concat",
    "Split",
    "Pad",
    "Resize",
    "Range",
    "Expand",
    "Tile",
    "Gemm",
    "MatMul",
    "Softmax",
    "ReduceSum",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "ConstantOfShape",
    "Shape",
    "Cast",
    "Where",
    "Clip",
    "LayerNormalization",
    "BatchNormalization",
    "Dropout",
    "ArgMax",
    "Identity",
];
const EDGES: &[i64] = &[0, 1, -1, 2, -2, 3, 7, 1 << 20, 1 << 40, i64::MAX, i64::MIN];

/// One edit that keeps the protobuf valid: an attribute, a dimension, an op type, an input name, an opset.
pub fn mutate_model(rng: &mut fastrand::Rng, m: &mut ModelProto) {
    let edge = |rng: &mut fastrand::Rng| EDGES[rng.usize(..EDGES.len())];
    let Some(g) = m.graph.as_mut() else { return };
    match rng.u8(0..6) {
        0 | 1 if !g.node.is_empty() => {
            let n = rng.usize(..g.node.len());
            let node = &mut g.node[n];
            if node.attribute.is_empty() {
                return;
            }
            let a = rng.usize(..node.attribute.len());
            let attr = &mut node.attribute[a];
            if !attr.ints.is_empty() {
                let i = rng.usize(..attr.ints.len());
                attr.ints[i] = edge(rng);
                if rng.bool() {
                    attr.ints.pop();
                }
            } else if attr.i.is_some() {
                attr.i = Some(edge(rng));
            } else if attr.f.is_some() {
                attr.f = Some([0.0, -1.0, f32::NAN, f32::INFINITY, 1e30][rng.usize(..5)]);
            } else {
                attr.r#type = Some(rng.i32(0..15));
            }
        }
        2 if !g.node.is_empty() => {
            let n = rng.usize(..g.node.len());
            g.node[n].op_type = Some(OPS[rng.usize(..OPS.len())].to_string());
        }
        3 if !g.node.is_empty() => {
            let n = rng.usize(..g.node.len());
            let node = &mut g.node[n];
            match rng.u8(0..3) {
                0 => {
                    node.input.pop();
                }
                1 => node.input.push(String::new()),
                _ => {
                    if let Some(first) = node.input.first().cloned() {
                        node.input.push(first);
                    }
                }
            }
        }
        4 => {
            let k = rng.usize(..g.initializer.len().max(1));
            if let Some(t) = g.initializer.get_mut(k) {
                if let Some(d) = t.dims.first_mut() {
                    *d = edge(rng);
                } else {
                    t.data_type = Some(rng.i32(0..25));
                }
            } else if let Some(vi) = g.input.first_mut() {
                vi.r#type = None;
            }
        }
        _ => {
            if let Some(o) = m.opset_import.first_mut() {
                o.version = Some(rng.i64(1..30));
            }
        }
    }
}

/// One random edit: flip bits, overwrite with a boundary value, insert, delete, or duplicate a span.
pub fn mutate(rng: &mut fastrand::Rng, bytes: &mut Vec<u8>) {
    let len = bytes.len().max(1);
    match rng.u8(0..6) {
        0 => {
            for _ in 0..rng.usize(1..4) {
                let i = rng.usize(..len).min(bytes.len().saturating_sub(1));
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << rng.u8(0..8);
                }
            }
        }
        1 => {
            let i = rng.usize(..len);
            let v = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.usize(..5)];
            if let Some(b) = bytes.get_mut(i) {
                *b = v;
            }
        }
        2 => {
            let i = rng.usize(..=bytes.len());
            let n = rng.usize(1..8);
            for _ in 0..n {
                bytes.insert(i, rng.u8(..));
            }
        }
        3 => {
            let i = rng.usize(..len);
            let end = (i + rng.usize(1..16)).min(bytes.len());
            if i < end {
                bytes.drain(i..end);
            }
        }
        4 => {
            let i = rng.usize(..len);
            let end = (i + rng.usize(1..32)).min(bytes.len());
            if i < end {
                let span: Vec<u8> = bytes[i..end].to_vec();
                let at = rng.usize(..=bytes.len());
                bytes.splice(at..at, span);
            }
        }
        _ => {
            // A large varint where a small one was: dims, attribute ints, lengths.
            let i = rng.usize(..len);
            if i < bytes.len() {
                bytes.splice(i..i + 1, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
        }
    }
}
