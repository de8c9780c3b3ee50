//! Snapshots of the expansion, pretty-printed, for a host, a discrete-device and a
//! unified-device descriptor.

fn expand(source: &str) -> String {
    let input: syn::DeriveInput = syn::parse_str(source).expect("test input parses");
    let tokens = crate::expand::derive(&input);
    let file: syn::File = syn::parse2(tokens).expect("the expansion is valid Rust");
    prettyplease::unparse(&file)
}

#[test]
fn host_storage() {
    insta::assert_snapshot!(expand(
        r#"
        #[storage(space = host, name = "host", alignment = 64, row_pitch_alignment = 64,
                  layouts(row_major, padded_rows), mappable = pointer)]
        struct HostBuffer {
            #[storage(buffer)] bytes: Vec<u8>,
            #[storage(dtype)] dt: DatumType,
            #[storage(shape)] shape: Vec<usize>,
        }
        "#
    ));
}

#[test]
fn discrete_device_storage() {
    insta::assert_snapshot!(expand(
        r#"
        #[storage(space = device, name = "gpu", alignment = 256, mappable = copy, bandwidth_gbps = 25,
                  latency_us = 8.5, context = gpu::Queue, allocate = gpu::allocate, upload = gpu::upload,
                  download = gpu::download, wait = gpu::wait, copy = gpu::copy, slice = gpu::sub_buffer,
                  map = gpu::map, unmap = gpu::unmap, is_on = gpu::is_on)]
        struct GpuBuffer {
            #[storage(buffer)] mem: gpu::Mem,
            #[storage(dtype)] dt: DatumType,
            #[storage(shape)] shape: Vec<usize>,
            #[storage(run_scoped)] scratch: bool,
        }
        "#
    ));
}

#[test]
fn unified_device_storage() {
    insta::assert_snapshot!(expand(
        r#"
        #[storage(space = unified, name = "igpu", alignment = 4096, import_alignment = 4096, mappable = pointer,
                  bandwidth_gbps = 60.0, latency_us = 1, context = Igpu, allocate = igpu::alloc,
                  upload = igpu::upload, download = igpu::share, copy = igpu::copy, wait = igpu::finish, map = igpu::map,
                  unmap = igpu::unmap, space_of = igpu::space)]
        struct IgpuBuffer {
            #[storage(buffer)] mem: igpu::Mem,
            #[storage(dtype)] dt: DatumType,
            #[storage(shape)] shape: Vec<usize>,
            label: String,
        }
        "#
    ));
}
