//! A SqueezeNet compiled into this crate at build time (`build.rs`), and what classifying a photo with it takes:
//! reading a PPM into the model's typed input, ImageNet normalisation, the top 5 of the scores.

/// SqueezeNet on the CPU: `Model::run(&Data0)` reads the image in place.
#[allow(missing_docs)]
pub mod squeezenet {
    include!(concat!(env!("OUT_DIR"), "/squeezenet.rs"));
}

/// The model suite's MLP on OpenCL: `Model::run` takes an `Aligned` buffer in place, or plain memory copied once.
#[allow(missing_docs)]
pub mod mlp_opencl {
    include!(concat!(env!("OUT_DIR"), "/mlp_opencl.rs"));
}

/// A detector's tail (`scripts/onnx/run_time_models.py`'s `nms_after_softmax`), compiled in stages: `run` takes
/// the boxes and their features; the outputs' lengths are the number of boxes NonMaxSuppression keeps.
#[allow(missing_docs)]
pub mod detections {
    include!(concat!(env!("OUT_DIR"), "/detections.rs"));
}

/// The bundled photo: "Chelsea the cat", 224×224 RGB, binary PPM.
pub const PHOTO: &[u8] = include_bytes!("../chelsea.ppm");

/// ImageNet's class names, in index order.
pub const CLASSES: &str = include_str!("../imagenet_classes.txt");

/// Fills `input` (`[1, 3, 224, 224]`, planar RGB) from a 224×224 binary PPM, normalised with ImageNet's mean
/// and standard deviation.
pub fn preprocess(ppm: &[u8], input: &mut squeezenet::Data0) -> Result<(), String> {
    let header: Vec<&[u8]> = ppm.splitn(4, |b| b.is_ascii_whitespace()).collect();
    let [magic, width, height, rest] = header.as_slice() else { return Err("not a PPM file".into()) };
    let number = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<usize>().ok());
    if *magic != b"P6" || number(width) != Some(224) || number(height) != Some(224) {
        return Err("expected a 224×224 binary PPM (P6)".into());
    }
    // The maximum value, one whitespace byte, then the pixels.
    let pixels = rest.splitn(2, |b| b.is_ascii_whitespace()).nth(1).ok_or("a PPM without pixels")?;
    if pixels.len() < 224 * 224 * 3 {
        return Err(format!("{} bytes of pixels, 150528 expected", pixels.len()));
    }
    const MEAN: [f32; 3] = [0.485, 0.456, 0.406];
    const STD: [f32; 3] = [0.229, 0.224, 0.225];
    for (c, plane) in input[0].iter_mut().enumerate() {
        for (y, row) in plane.iter_mut().enumerate() {
            for (x, v) in row.iter_mut().enumerate() {
                let byte = pixels[(y * 224 + x) * 3 + c];
                *v = (byte as f32 / 255.0 - MEAN[c]) / STD[c];
            }
        }
    }
    Ok(())
}

/// The five highest scores: class index, name and score, best first.
pub fn top5(scores: &[f32]) -> Vec<(usize, &'static str, f32)> {
    let names: Vec<&'static str> = CLASSES.lines().collect();
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order.into_iter().take(5).map(|i| (i, names.get(i).copied().unwrap_or("?"), scores[i])).collect()
}
