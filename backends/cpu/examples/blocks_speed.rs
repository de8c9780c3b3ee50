//! Times convolutions in channel blocks (`conv_blocks.rs`, blocks in and out) against the packed NCHW path a
//! program takes otherwise (`conv_packed`), on one thread, fastest of 200 calls each:
//! `cargo run --release -p stowage-cpu --example blocks_speed`. `SHAPES="c,m,k,s,pad,h;…"` times other shapes.
use std::time::Instant;

mod shapes;

use stowage_cpu::kernels::act::Act;
use stowage_cpu::kernels::blocked::Blocks;
use stowage_cpu::kernels::conv::{conv_packed, ConvParams, PackedWeights, Post};
use stowage_cpu::kernels::conv_blocks::{conv2d, Form};
use stowage_cpu::kernels::conv_lanes::LanePack;
use stowage_cpu::kernels::depthwise::Plane;

fn best(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..200 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best * 1e3
}

fn main() {
    if !stowage_cpu::kernels::conv_blocks::available() {
        println!("no AVX-512F: no channel blocks on this CPU");
        return;
    }
    // (input channels, output channels, kernel, stride, pad, input height = width): SqueezeNet's and ResNet-50's.
    let shapes: &[(usize, usize, usize, usize, usize, usize)] = &[
        (64, 16, 1, 1, 0, 55),
        (16, 64, 1, 1, 0, 55),
        (16, 64, 3, 1, 1, 55),
        (32, 128, 1, 1, 0, 27),
        (32, 128, 3, 1, 1, 27),
        (384, 48, 1, 1, 0, 13),
        (48, 192, 1, 1, 0, 13),
        (64, 256, 1, 1, 0, 13),
        (64, 256, 3, 1, 1, 13),
        (512, 1008, 1, 1, 0, 13),
        (256, 64, 1, 1, 0, 56),
        (64, 64, 3, 1, 1, 56),
        (64, 256, 1, 1, 0, 56),
        (128, 128, 3, 2, 1, 56),
        (512, 128, 1, 1, 0, 28),
        (1024, 256, 1, 1, 0, 14),
        (256, 256, 3, 1, 1, 14),
        (512, 2048, 1, 1, 0, 7),
        (512, 512, 3, 1, 1, 7),
    ];
    let asked: Option<Vec<_>> = shapes::asked::<6>("c,m,k,s,pad,h;…")
        .map(|v| v.into_iter().map(|[c, m, k, s, p, h]| (c, m, k, s, p, h)).collect());
    let shapes = asked.as_deref().unwrap_or(shapes);
    println!("{:>28} {:>9} {:>9} {:>6}", "shape", "packed", "blocks", "ratio");
    for &(c, m, k, s, pad, h) in shapes {
        let o = (h + 2 * pad - k) / s + 1;
        let x: Vec<f32> = (0..c * h * h).map(|i| (i % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..m * c * k * k).map(|i| (i % 5) as f32 * 0.01).collect();
        let bias = vec![0.5f32; m];
        let p = ConvParams { kernel: &[k, k], strides: &[s, s], dilations: &[1, 1], pads: &[pad; 4], group: 1 };
        let packed = PackedWeights::for_output(
            stowage_cpu::kernels::weights::Weights::Slice(&w),
            &[m, c, k, k],
            &p,
            &[1, m, o, o],
        );
        let post = Post { packed: packed.as_ref(), act: Act::Relu, residual: None };
        let mut y = vec![0f32; m * o * o];
        let plain =
            best(|| conv_packed(&x, &[1, c, h, h], &w, &[m, c, k, k], Some(&bias), &p, &mut y, &[1, m, o, o], 1, post));
        let lanes = LanePack::new(m, c * k * k, &w[..]);
        let (xb, yb) = (Blocks { n: 1, c, h, w: h }, Blocks { n: 1, c: m, h: o, w: o });
        let xs = vec![0.1f32; xb.len()];
        let mut ys = vec![0f32; yb.len()];
        let g = Plane { ih: h, iw: h, oh: o, ow: o, kh: k, kw: k, stride: (s, s), dilation: (1, 1), pad: (pad, pad) };
        let blocks = best(|| {
            conv2d(&xs, (1, c), &g, Form::Blocked, &lanes, Some(&bias), Act::Relu, None, &mut ys, Form::Blocked, 1)
        });
        let name = format!("{c}->{m} {k}x{k}/{s} at {h}x{h}");
        println!("{name:>28} {plain:9.3} {blocks:9.3} {:6.2}", blocks / plain);
    }
}
