//! Prints single-thread GFLOP/s of the f32 matrix product for a few sizes: `cargo run --release -p stowage-cpu --example gemm_speed`.
use std::time::Instant;

fn main() {
    for &(m, n, k) in &[
        (1024usize, 1024usize, 1024usize),
        (64, 3136, 576),
        (256, 784, 1152),
        (128, 784, 512),
        (32, 3136, 1152),
        (64, 12321, 27),
    ] {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0f32; m * n];
        let reps = 5;
        let mut best = f64::MAX;
        for _ in 0..reps {
            let t = Instant::now();
            stowage_cpu::kernels::gemm::gemm_strided(m, n, k, &mut c, n, false, 0.0, &a, k, 1, &b, n, 1, 1.0, 1);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{m}x{n}x{k}: {:.1} GFLOP/s", 2.0 * (m * n * k) as f64 / best / 1e9);
    }
    // A DenseNet 3×3 convolution (128 → 32 channels, 56×56) against the bare product of its size.
    let (c, m, h) = (128usize, 32usize, 56usize);
    let x: Vec<f32> = (0..c * h * h).map(|i| (i % 7) as f32 * 0.1).collect();
    let w: Vec<f32> = (0..m * c * 9).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut y = vec![0f32; m * h * h];
    let p = stowage_cpu::kernels::conv::ConvParams {
        kernel: &[3, 3],
        strides: &[1, 1],
        dilations: &[1, 1],
        pads: &[1, 1, 1, 1],
        group: 1,
    };
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        stowage_cpu::kernels::conv::conv(&x, &[1, c, h, h], &w, &[m, c, 3, 3], None, &p, &mut y, &[1, m, h, h], 1);
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("conv 3x3 {c}->{m} at {h}x{h}: {:.1} GFLOP/s", 2.0 * (m * c * 9 * h * h) as f64 / best / 1e9);
    // SqueezeNet's first convolution: 3 → 64 channels, 3×3 with stride 2 on 224×224 (a product with K = 27).
    let (c, m, h, o) = (3usize, 64usize, 224usize, 111usize);
    let x: Vec<f32> = (0..c * h * h).map(|i| (i % 7) as f32 * 0.1).collect();
    let w: Vec<f32> = (0..m * c * 9).map(|i| (i % 5) as f32 * 0.1).collect();
    let bias = vec![0.5f32; m];
    let mut y = vec![0f32; m * o * o];
    let p = stowage_cpu::kernels::conv::ConvParams { strides: &[2, 2], pads: &[0, 0, 0, 0], ..p };
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        stowage_cpu::kernels::conv::conv(
            &x,
            &[1, c, h, h],
            &w,
            &[m, c, 3, 3],
            Some(&bias),
            &p,
            &mut y,
            &[1, m, o, o],
            1,
        );
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("conv 3x3/2 {c}->{m} at {h}x{h}: {:.1} GFLOP/s", 2.0 * (m * c * 9 * o * o) as f64 / best / 1e9);
}
