//! Kernels: functions over packed row-major data and their shapes. They take their attributes as plain numbers,
//! so a generated binary can call them without the compiler.

pub mod act;
pub mod broadcast;
pub mod cast;
pub mod cols;
pub mod conv;
pub mod conv_lanes;
pub mod cumulative;
pub mod depthwise;
pub mod depthwise_lanes;
pub mod det;
pub mod dtype;
pub mod elementwise;
pub mod few_rows;
pub mod gemm;
pub mod grid_sample;
pub mod lrn;
pub mod movement;
pub mod narrow;
pub mod norm;
pub mod pool;
pub mod pool_f32;
pub mod pool_same;
pub mod pool_strided;
pub mod recurrent;
pub mod reduce;
pub mod residual;
pub mod resize;
pub mod roi_align;
pub mod scatter;
pub mod sgemm512;
pub mod shifted;
pub mod strided;
pub mod tfidf;
pub mod topk;
pub mod trees;
