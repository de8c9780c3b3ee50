//! Times products of few rows against constant weights (`few_rows.rs`: a text recogniser's classifier, a batch of
//! a few inputs through a large layer) on one and two threads: `cargo run --release -p stowage-cpu --example
//! few_rows_speed`. Each figure is the fastest of 30 calls. `SHAPES="m,k,n;…"` times other shapes (rows, inner
//! dimension, outputs).
use std::time::Instant;

mod shapes;

use stowage_cpu::kernels::few_rows::FewRows;

fn main() {
    let given = shapes::asked::<3>("m,k,n;…");
    // ddddocr's classifier (20 × 1024 × 8210, 34 MB of weights), and the same at 12, 32 and 64 rows.
    let shapes = given.unwrap_or_else(|| vec![[20, 1024, 8210], [12, 1024, 8210], [32, 1024, 8210], [64, 512, 4096]]);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a thread pool");
    for [m, k, n] in shapes {
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.01).collect();
        let Some(p) = FewRows::new(&w[..], (n, 1), k, n, 1.0, Some(vec![0.5; n])) else {
            println!("{m} × {k} × {n}: not packed on this CPU");
            continue;
        };
        let mut y = vec![0f32; m * n];
        let mut best = |threads: usize| {
            (0..30)
                .map(|_| {
                    let t = Instant::now();
                    pool.install(|| p.run(m, &a, (k, 1), &mut y, threads));
                    t.elapsed().as_secs_f64() * 1e3
                })
                .fold(f64::MAX, f64::min)
        };
        let (one, two) = (best(1), best(2));
        println!("{m} × {k} × {n}: {one:.3} ms on one thread, {two:.3} ms on two");
    }
}
