//! Times f32 MaxPools of SqueezeNet's, ResNet's and GoogLeNet's shapes on one and two threads:
//! `cargo run --release -p stowage-cpu --example pool_threads`. Each figure is the fastest of many calls inside a
//! two-thread rayon pool, with the input rewritten by both threads before each call (as a parallel convolution
//! leaves it). `SHAPES="c,h,k,s,pad,ceil;…"` times other shapes (square planes and windows; `ceil` 1 for
//! `ceil_mode`).
use std::time::Instant;

mod shapes;

use rayon::prelude::*;
use stowage_cpu::kernels::pool::{max_pool_f32, PoolParams};

fn main() {
    // (channels, input height = width, kernel, stride, pad, ceil mode)
    let shapes: &[(usize, usize, usize, usize, usize, usize)] = &[
        (96, 109, 3, 2, 0, 1),
        (256, 54, 3, 2, 0, 1),
        (512, 27, 3, 2, 0, 1),
        (64, 112, 3, 2, 1, 0),
        (64, 112, 3, 2, 0, 1),
        (192, 56, 3, 2, 0, 1),
        (480, 28, 3, 2, 0, 1),
        (832, 14, 2, 2, 0, 1),
        (64, 224, 2, 2, 0, 0),
        (512, 28, 2, 2, 0, 0),
        (256, 28, 3, 1, 1, 0),
    ];
    let asked: Option<Vec<_>> = shapes::asked::<6>("c,h,k,s,pad,ceil;…")
        .map(|v| v.into_iter().map(|[c, h, k, s, p, ceil]| (c, h, k, s, p, ceil)).collect());
    let shapes = asked.as_deref().unwrap_or(shapes);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    println!("{:>30} {:>9} {:>9} {:>6}", "shape", "1 thread", "2 threads", "gain");
    for &(c, h, k, s, pad, ceil) in shapes {
        let span = h + 2 * pad - k;
        let o = if ceil == 1 { span.div_ceil(s) + 1 } else { span / s + 1 };
        let mut x: Vec<f32> = (0..c * h * h).map(|i| ((i * 37) % 101) as f32 * 0.1).collect();
        let mut y = vec![0f32; c * o * o];
        // ceil_mode: the end padding that makes the last window start inside the input.
        let end = (o - 1) * s + k - h - pad;
        let pads = [pad, pad, end, end];
        let p = PoolParams { kernel: &[k, k], strides: &[s, s], dilations: &[1, 1], pads: &pads };
        let mut time = |threads: usize| {
            pool.install(|| {
                let mut best = f64::MAX;
                for r in 0..300 {
                    let half = x.len() / 2 + 1;
                    if std::env::var_os("NOTOUCH").is_none() {
                        x.par_chunks_mut(half).for_each(|c| c.iter_mut().for_each(|v| *v += 1e-7 * r as f32));
                    }
                    let t = Instant::now();
                    max_pool_f32(&x, &[1, c, h, h], &p, &mut y, &[1, c, o, o], threads);
                    best = best.min(t.elapsed().as_secs_f64());
                }
                best * 1e3
            })
        };
        let (one, two) = (time(1), time(2));
        let name = format!("{c} of {h}x{h} {k}x{k}/{s} pad {pad}{}", if ceil == 1 { " ceil" } else { "" });
        println!("{name:>30} {one:9.3} {two:9.3} {:6.2}", one / two);
    }
}
