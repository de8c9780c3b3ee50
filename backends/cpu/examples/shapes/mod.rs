//! The `SHAPES` variable the CPU examples share: `SHAPES="a,b,…;a,b,…"` times the shapes given instead of an
//! example's own, each of `N` comma-separated numbers.

/// The shapes `SHAPES` gives, each of `N` numbers; `None` when it is unset or empty.
///
/// # Panics
/// On a shape that is not `N` numbers: `what` names their order in the message.
pub fn asked<const N: usize>(what: &str) -> Option<Vec<[usize; N]>> {
    let text = std::env::var("SHAPES").ok().filter(|t| !t.trim().is_empty())?;
    let shape = |t: &str| -> [usize; N] {
        let v: Vec<usize> = t.split(',').map(|d| d.trim().parse().expect(what)).collect();
        v.try_into().unwrap_or_else(|_| panic!("SHAPES: {what}"))
    };
    Some(text.split(';').filter(|t| !t.trim().is_empty()).map(shape).collect())
}
