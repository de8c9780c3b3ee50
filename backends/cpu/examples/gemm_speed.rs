//! Prints single-thread GFLOP/s of the f32 matrix product for a few sizes: `cargo run --release -p stowage-cpu --example gemm_speed`.
use std::time::Instant;

fn main() {
    for &(m, n, k) in &[(1024usize, 1024usize, 1024usize), (64, 3136, 576), (256, 784, 1152), (128, 784, 512)] {
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
}
