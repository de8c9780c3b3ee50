//! Misuse of mappings that the types rule out: each case in `tests/ui/` must fail to
//! compile, with the error in its `.stderr` file.

#[test]
fn mapping_misuse_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
