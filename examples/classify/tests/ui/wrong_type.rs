use stowage_example_classify::squeezenet;

fn main() {
    let model = squeezenet::Model::new().expect("prepares");
    // Bytes, where the model takes f32.
    let image = Box::new([[[[0u8; 224]; 224]; 3]; 1]);
    let _ = model.run(&image);
}
