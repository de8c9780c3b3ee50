//! The derive's contract with its users: bad descriptors fail with the errors in the
//! golden `.stderr` files, each at its own attribute; odd-but-legal ones compile and run.

#[test]
fn bad_descriptors_are_compile_errors_at_their_attributes() {
    let cases = trybuild::TestCases::new();
    for category in ["malformed", "conflict", "missing", "unsupported", "fields", "all_at_once"] {
        cases.compile_fail(format!("tests/ui/{category}/*.rs"));
    }
}

#[test]
fn odd_but_legal_descriptors_compile_and_run() {
    trybuild::TestCases::new().pass("tests/pass/*.rs");
}
