use stowage_example_classify::squeezenet;

fn main() {
    let model = squeezenet::Model::new().expect("prepares");
    // A batch of two, where the model was compiled for one image.
    let images = Box::new([[[[0f32; 224]; 224]; 3]; 2]);
    let _ = model.run(&images);
}
