//! Tensors: construction, typed access, views, and bad input (errors, never panics).

use stowage_runtime::{DatumType, LayoutKind, RuntimeError, Tensor};

#[test]
fn typed_access_round_trips_every_datum_type() {
    fn check<T: stowage_runtime::Datum + PartialEq>(values: &[T]) {
        let t = Tensor::from_slice(&[values.len()], values).unwrap();
        assert_eq!(t.dt(), T::DATUM_TYPE);
        assert_eq!(t.as_slice::<T>().unwrap(), values);
        assert_eq!(t.to_vec::<T>().unwrap(), values);
    }
    check(&[true, false]);
    check(&[1u8, 2]);
    check(&[1u16, 2]);
    check(&[1u32, 2]);
    check(&[1u64, 2]);
    check(&[-1i8, 2]);
    check(&[-1i16, 2]);
    check(&[-1i32, 2]);
    check(&[-1i64, 2]);
    check(&[half::f16::from_f32(1.5)]);
    check(&[half::bf16::from_f32(-2.0)]);
    check(&[1.5f32, f32::NAN.copysign(1.0).min(0.0)]);
    check(&[1.5f64, f64::INFINITY]);
}

#[test]
fn a_wrong_datum_type_is_an_error_naming_the_tensor() {
    let t = Tensor::from_slice(&[2], &[1i64, 2]).unwrap().with_name("ids");
    let err = t.as_slice::<f32>().unwrap_err();
    assert_eq!(err, RuntimeError::DatumType { tensor: "ids".into(), expected: DatumType::F32, found: DatumType::I64 });
    assert_eq!(err.to_string(), "tensor ids: expected datum type f32, found i64");
    assert!(t.to_vec::<i32>().is_err());
    let mut t = t;
    assert!(t.as_slice_mut::<u64>().is_err());
}

#[test]
fn byte_lengths_that_do_not_match_the_shape_are_errors() {
    let err = Tensor::from_bytes(DatumType::F32, &[2, 3], &[0u8; 20]).unwrap_err();
    assert_eq!(err.to_string(), "tensor <unnamed>: f32 [2, 3] with this layout needs 24 bytes, got 20");
    assert!(Tensor::from_bytes(DatumType::F32, &[2, 3], &[0u8; 28]).is_err());
    let err = Tensor::from_bytes(DatumType::Bool, &[2], &[1, 7]).unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidBits { dt: DatumType::Bool, .. }), "{err}");
}

#[test]
fn zero_sized_shapes_are_fine() {
    for shape in [&[0][..], &[3, 0, 2], &[0, 0]] {
        let t = Tensor::zeros(DatumType::F32, shape).unwrap();
        assert_eq!(t.len(), 0);
        assert!(t.as_slice::<f32>().unwrap().is_empty());
        assert!(t.to_vec::<f32>().unwrap().is_empty());
        assert!(t.permute(&(0..shape.len()).rev().collect::<Vec<_>>()).unwrap().to_vec::<f32>().unwrap().is_empty());
    }
    let scalar = Tensor::from_slice(&[], &[7i32]).unwrap();
    assert_eq!(scalar.as_slice::<i32>().unwrap(), &[7]);
}

#[test]
fn huge_shapes_are_errors_not_overflows() {
    for shape in [&[usize::MAX, 2][..], &[1 << 40, 1 << 40], &[usize::MAX / 4 + 1], &[1 << 62, 0, 1 << 62, 3]] {
        // Even with a zero dimension, strides that overflow cannot be represented.
        let err = Tensor::zeros(DatumType::F32, shape).unwrap_err();
        assert!(matches!(err, RuntimeError::TooLarge { .. }), "{shape:?}: {err}");
    }
    // Fits in usize, not in memory: a clean error.
    let err = Tensor::zeros(DatumType::U8, &[1 << 50, 1 << 10]).unwrap_err();
    assert!(matches!(err, RuntimeError::OutOfMemory { .. }), "{err}");
    assert!(Tensor::from_bytes(DatumType::F64, &[usize::MAX / 2], &[]).is_err());
}

#[test]
fn views_share_storage_and_read_through_their_layout() {
    let t = Tensor::from_slice(&[2, 3], &[0, 1, 2, 3, 4, 5i32]).unwrap();
    let row = t.slice(0, 1..2).unwrap();
    assert!(row.shares_storage_with(&t));
    assert_eq!(row.as_slice::<i32>().unwrap(), &[3, 4, 5]);
    let col = t.slice(1, 1..3).unwrap();
    assert_eq!(col.layout_kind(), LayoutKind::PaddedRows { axis: 0, pitch: 12 });
    assert_eq!(col.to_vec::<i32>().unwrap(), vec![1, 2, 4, 5]);
    assert!(col.as_slice::<i32>().is_err(), "a strided view has no packed slice");
    let tr = t.permute(&[1, 0]).unwrap();
    assert_eq!(tr.shape(), &[3, 2]);
    assert_eq!(tr.layout_kind(), LayoutKind::ColumnMajor);
    assert_eq!(tr.to_vec::<i32>().unwrap(), vec![0, 3, 1, 4, 2, 5]);
    let flat = t.reshape(&[3, 2]).unwrap();
    assert!(flat.shares_storage_with(&t));
    assert_eq!(flat.slice(0, 2..3).unwrap().as_slice::<i32>().unwrap(), &[4, 5]);
    assert_eq!(tr.to_row_major().unwrap().as_slice::<i32>().unwrap(), &[0, 3, 1, 4, 2, 5]);
}

#[test]
fn bad_view_arguments_are_errors_naming_the_tensor() {
    let t = Tensor::from_slice(&[2, 3], &[0f32; 6]).unwrap().with_name("w");
    let err = t.slice(2, 0..1).unwrap_err();
    assert_eq!(err.to_string(), "tensor w: slice: axis 2 is out of range for rank 2");
    assert!(t.slice(1, 2..4).is_err());
    #[allow(clippy::reversed_empty_ranges)] // a reversed range is exactly the bad input under test
    let reversed = 2..1;
    assert!(t.slice(1, reversed).is_err());
    assert!(t.reshape(&[4, 2]).unwrap_err().to_string().contains("different element count"));
    assert!(t.permute(&[0, 0]).is_err());
    assert!(t.permute(&[0]).is_err());
    assert!(t.permute(&[0, 2]).is_err());
    let err = t.permute(&[1, 0]).unwrap().reshape(&[6]).unwrap_err();
    assert!(err.to_string().contains("without a copy"), "{err}");
}

#[test]
fn empty_and_nested_slices_stay_inside_their_storage() {
    let t = Tensor::from_slice(&[2, 3], &[0, 1, 2, 3, 4, 5i32]).unwrap();
    let empty = t.slice(1, 1..3).unwrap().slice(0, 2..2).unwrap();
    assert_eq!(empty.shape(), &[0, 2]);
    assert!(empty.to_vec::<i32>().unwrap().is_empty());
    assert!(empty.to_row_major().unwrap().as_slice::<i32>().unwrap().is_empty());
    let corner = t.slice(1, 1..3).unwrap().slice(0, 1..2).unwrap().slice(1, 1..2).unwrap();
    assert_eq!(corner.to_vec::<i32>().unwrap(), vec![5]);
    assert_eq!(corner.as_slice::<i32>().unwrap(), &[5]);
}

#[test]
fn a_write_through_a_shared_storage_copies_first() {
    let t = Tensor::from_slice(&[4], &[1u8, 2, 3, 4]).unwrap();
    let mut part = t.slice(0, 2..4).unwrap();
    part.as_slice_mut::<u8>().unwrap()[0] = 30;
    assert_eq!(part.as_slice::<u8>().unwrap(), &[30, 4]);
    assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 3, 4]);
    assert!(!part.shares_storage_with(&t));
}

#[test]
fn display_names_type_shape_layout_and_place() {
    let t = Tensor::from_slice(&[2, 2], &[0f32; 4]).unwrap().with_name("x");
    assert_eq!(t.to_string(), "x: f32[2, 2] row-major, host, 16 bytes");
}
