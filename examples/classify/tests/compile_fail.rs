//! A typed module's inputs are checked when the caller's crate compiles: an array of another shape or element
//! type is a type error, not a run-time one.

#[test]
fn inputs_of_the_wrong_shape_or_type_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
