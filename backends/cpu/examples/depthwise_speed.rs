//! Times the direct depthwise kernel on MobileNet-style shapes, one thread:
//! `cargo run --release -p stowage-cpu --example depthwise_speed`. Each line gives the fastest and the median of
//! 300 calls. `SHAPES="c,h,k,s;…"` times other shapes (channels, input height = width, kernel, stride); `THREADS=2`
//! runs each call on two threads of a rayon pool.
use std::time::Instant;

mod shapes;

use stowage_cpu::kernels::act::Act;
use stowage_cpu::kernels::depthwise::{depthwise, Plane};

fn main() {
    // (channels, input height = width, kernel, stride)
    let given: Option<Vec<(usize, usize, usize, usize)>> =
        shapes::asked::<4>("c,h,k,s;…").map(|v| v.into_iter().map(|[c, h, k, s]| (c, h, k, s)).collect());
    let shapes: &[(usize, usize, usize, usize)] = given.as_deref().unwrap_or(&[
        (32, 112, 3, 2),
        (16, 112, 3, 1),
        (64, 56, 3, 2),
        (64, 56, 3, 1),
        (256, 14, 5, 1),
        (256, 14, 5, 2),
        (512, 7, 5, 1),
    ]);
    let threads: usize = std::env::var("THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(1);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a thread pool");
    for &(c, h, k, s) in shapes {
        let pad = k / 2;
        let o = (h + 2 * pad - k) / s + 1;
        let x: Vec<f32> = (0..c * h * h).map(|i| (i % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..c * k * k).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut y = vec![0f32; c * o * o];
        let p = Plane { ih: h, iw: h, oh: o, ow: o, kh: k, kw: k, stride: (s, s), dilation: (1, 1), pad: (pad, pad) };
        let mut times: Vec<f64> = (0..300)
            .map(|_| {
                let t = Instant::now();
                pool.install(|| depthwise(&x, &w, None, c, 1, &p, Act::HardSwish, &mut y, threads));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!("{c} channels of {h}², {k}×{k}/{s}: fastest {:.4} ms, median {:.4} ms", times[0], times[150]);
    }
}
