//! Times convolutions of SqueezeNet's and ResNet-50's shapes (packed weights, bias, ReLU) on one and two threads:
//! `cargo run --release -p stowage-cpu --example conv_threads`. Each figure is the fastest of many calls inside a
//! two-thread rayon pool, so the second worker is awake as it is in a program's run.
//! `SHAPES="c,m,k,s,pad,h;…"` times other shapes, `ACT=silu|none` another activation than ReLU: on this machine
//! SiLU costs half again a 48 → 48 1 × 1 convolution at 104 × 104 (0.50 → 0.76 ms at one thread) and a third a 12
//! → 24 3 × 3 one at 208 × 208 (1.86 → 2.44 ms), against 5 % on a 96 → 96 3 × 3 at 52 × 52.
use std::time::Instant;

mod shapes;

use stowage_cpu::kernels::conv::{conv_packed, ConvParams, PackedWeights, Post};

fn main() {
    // (input channels, output channels, kernel, stride, pad, input height = width)
    let shapes: &[(usize, usize, usize, usize, usize, usize)] = &[
        (3, 64, 7, 2, 3, 224),
        (3, 64, 3, 2, 0, 224),
        (3, 16, 3, 2, 1, 224),
        (1, 32, 3, 1, 1, 128),
        (2, 32, 3, 1, 1, 128),
        (3, 32, 3, 2, 1, 224),
        (64, 16, 1, 1, 0, 55),
        (16, 64, 1, 1, 0, 55),
        (16, 64, 3, 1, 1, 55),
        (128, 16, 1, 1, 0, 55),
        (256, 32, 1, 1, 0, 27),
        (32, 128, 1, 1, 0, 27),
        (32, 128, 3, 1, 1, 27),
        (384, 48, 1, 1, 0, 13),
        (64, 256, 3, 1, 1, 13),
        (512, 1000, 1, 1, 0, 13),
        (256, 64, 1, 1, 0, 56),
        (64, 64, 3, 1, 1, 56),
        (64, 256, 1, 1, 0, 56),
        (512, 128, 1, 1, 0, 28),
        (1024, 256, 1, 1, 0, 14),
        (512, 2048, 1, 1, 0, 7),
        (512, 512, 3, 1, 1, 7),
        (128, 128, 3, 1, 1, 28),
        (256, 256, 3, 1, 1, 14),
        (128, 512, 1, 1, 0, 28),
    ];
    // `SHAPES=c,m,k,s,pad,h;…` times those instead, `ACT=silu|none` another activation than ReLU.
    let asked: Option<Vec<_>> = shapes::asked::<6>("c,m,k,s,pad,h;…")
        .map(|v| v.into_iter().map(|[c, m, k, s, p, h]| (c, m, k, s, p, h)).collect());
    let shapes = asked.as_deref().unwrap_or(shapes);
    let act = match std::env::var("ACT").as_deref() {
        Ok("silu") => stowage_cpu::kernels::act::Act::Silu,
        Ok("none") => stowage_cpu::kernels::act::Act::None,
        _ => stowage_cpu::kernels::act::Act::Relu,
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    println!("{:>28} {:>9} {:>9} {:>6}", "shape", "1 thread", "2 threads", "gain");
    for &(c, m, k, s, pad, h) in shapes {
        let o = (h + 2 * pad - k) / s + 1;
        let mut x: Vec<f32> = (0..c * h * h).map(|i| (i % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..m * c * k * k).map(|i| (i % 5) as f32 * 0.01).collect();
        let bias = vec![0.5f32; m];
        let mut y = vec![0f32; m * o * o];
        let p = ConvParams { kernel: &[k, k], strides: &[s, s], dilations: &[1, 1], pads: &[pad; 4], group: 1 };
        // Packed as a program packs them (`LANES=0`: never with the channels in lanes, for comparing).
        let packed = match std::env::var("LANES").as_deref() {
            Ok("0") => PackedWeights::new(&w, &[m, c, k, k], 1),
            _ => PackedWeights::for_output(
                stowage_cpu::kernels::weights::Weights::Slice(&w),
                &[m, c, k, k],
                &p,
                &[1, m, o, o],
            ),
        };
        let post = Post { packed: packed.as_ref(), act, residual: None };
        let mut time = |threads: usize, touch: usize| {
            pool.install(|| {
                let mut best = f64::MAX;
                for r in 0..200 {
                    // touch 1: the input written by both threads (a parallel producer) before each call; 2: by
                    // the other thread alone.
                    if touch == 1 {
                        use rayon::prelude::*;
                        let half = x.len() / 2 + 1;
                        x.par_chunks_mut(half).for_each(|c| c.iter_mut().for_each(|v| *v += 1e-7 * r as f32));
                    }
                    let t = Instant::now();
                    conv_packed(
                        &x,
                        &[1, c, h, h],
                        &w,
                        &[m, c, k, k],
                        Some(&bias),
                        &p,
                        &mut y,
                        &[1, m, o, o],
                        threads,
                        post,
                    );
                    best = best.min(t.elapsed().as_secs_f64());
                }
                best * 1e3
            })
        };
        let (one, two) = (time(1, 0), time(2, 0));
        let (one_t, two_t) = (time(1, 1), time(2, 1));
        let name = format!("{c}->{m} {k}x{k}/{s} at {h}x{h}");
        println!(
            "{name:>28} {one:9.3} {two:9.3} {:6.2}   after a parallel producer {one_t:9.3} {two_t:9.3} {:6.2}",
            one / two,
            one_t / two_t
        );
    }
}
