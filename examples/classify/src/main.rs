//! Classifies the bundled photo with the SqueezeNet compiled into this crate and prints the top 5.

use std::process::ExitCode;

use stowage_driver::model::Aligned;
use stowage_example_classify::{preprocess, squeezenet, top5, PHOTO};

fn run() -> Result<String, Box<dyn std::error::Error>> {
    let model = squeezenet::Model::new()?;
    // Page-aligned, on the heap: the model reads it in place.
    let mut image = Aligned::<squeezenet::Data0>::boxed();
    preprocess(PHOTO, &mut image)?;
    let out = model.run(&image)?;
    let scores = out.softmaxout_1.to_vec::<f32>()?;
    let mut text = String::from("chelsea.ppm, top 5:\n");
    for (rank, (class, name, score)) in top5(&scores).into_iter().enumerate() {
        text.push_str(&format!("{}. {name} (class {class}): {score:.4}\n", rank + 1));
    }
    text.push_str(&format!("{} copies\n", model.ledger().entries().len()));
    Ok(text)
}

fn main() -> ExitCode {
    match run() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
